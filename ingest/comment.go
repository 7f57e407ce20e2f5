package ingest

import (
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/brokerswitch/brokerswitch/models"
)

const actionDeleted = "deleted"

// applyIssueComment applies an issue_comment event (on an issue or a pull request's
// conversation) to github_comments.
func applyIssueComment(w *writes, ev Event) {
	e := ev.Payload.(*github.IssueCommentEvent)
	c := e.GetComment()
	w.addComment(ev, commentRow(ev, w.now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
		NodeID:          c.GetNodeID(),
		ID:              c.GetID(),
		Kind:            models.KindIssueComment,
		Number:          optionalInt(e.GetIssue().GetNumber()),
		ParentNodeID:    e.GetIssue().GetNodeID(),
		AuthorLogin:     c.GetUser().GetLogin(),
		Body:            c.GetBody(),
		HTMLURL:         c.GetHTMLURL(),
		GitHubUpdatedAt: timeOf(c.UpdatedAt),
	}))
}

// applyCommitComment applies a commit_comment event to github_comments.
func applyCommitComment(w *writes, ev Event) {
	e := ev.Payload.(*github.CommitCommentEvent)
	c := e.GetComment()
	w.addComment(ev, commentRow(ev, w.now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
		NodeID:          c.GetNodeID(),
		ID:              c.GetID(),
		Kind:            models.KindCommitComment,
		CommitID:        c.GetCommitID(),
		Path:            c.GetPath(),
		AuthorLogin:     c.GetUser().GetLogin(),
		Body:            c.GetBody(),
		HTMLURL:         c.GetHTMLURL(),
		GitHubUpdatedAt: timeOf(c.UpdatedAt),
	}))
}

// applyReviewComment applies a pull_request_review_comment event to github_comments.
func applyReviewComment(w *writes, ev Event) {
	e := ev.Payload.(*github.PullRequestReviewCommentEvent)
	c := e.GetComment()
	w.addComment(ev, commentRow(ev, w.now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
		NodeID:          c.GetNodeID(),
		ID:              c.GetID(),
		Kind:            models.KindReviewComment,
		Number:          optionalInt(e.GetPullRequest().GetNumber()),
		ParentNodeID:    e.GetPullRequest().GetNodeID(),
		CommitID:        c.GetCommitID(),
		Path:            c.GetPath(),
		AuthorLogin:     c.GetUser().GetLogin(),
		Body:            c.GetBody(),
		HTMLURL:         c.GetHTMLURL(),
		GitHubUpdatedAt: timeOf(c.UpdatedAt),
	}))
}

// applyReview applies a pull_request_review event to github_comments: a review is stored
// as a comment whose review_state carries its verdict.
func applyReview(w *writes, ev Event) {
	e := ev.Payload.(*github.PullRequestReviewEvent)
	r := e.GetReview()
	w.addComment(ev, commentRow(ev, w.now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
		NodeID:          r.GetNodeID(),
		ID:              r.GetID(),
		Kind:            models.KindReview,
		Number:          optionalInt(e.GetPullRequest().GetNumber()),
		ParentNodeID:    e.GetPullRequest().GetNodeID(),
		CommitID:        r.GetCommitID(),
		ReviewState:     r.GetState(),
		AuthorLogin:     r.GetUser().GetLogin(),
		Body:            r.GetBody(),
		HTMLURL:         r.GetHTMLURL(),
		GitHubUpdatedAt: timeOf(r.SubmittedAt),
	}))
}

// commentRow fills the columns every kind of comment shares.
func commentRow(ev Event, now time.Time, repo *github.Repository, inst *github.Installation, sender *github.User, row models.Comment) models.Comment {
	ref := refOf(repo)
	row.RepositoryID, row.RepositoryOwner, row.RepositoryName = ref.ID, ref.Owner, ref.Name
	row.Deleted = ev.Action == actionDeleted
	row.InstallationID = optionalID(inst.GetID())
	row.SenderLogin = sender.GetLogin()
	row.Tracking = newTracking(ev, now)
	return row
}

func commentTracking(r *models.Comment) *models.Tracking { return &r.Tracking }

// addComment refreshes every column of the comment: each kind's payload carries all of them.
func (w *writes) addComment(ev Event, row models.Comment) {
	w.comments.add(row.NodeID, refresh(ev, w.now, row, commentTracking, allColumns(commentTracking)))
}
