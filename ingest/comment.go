package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

const (
	actionDeleted = "deleted"
	// actionCreated creates a comment, a repository or an installation; actionSubmitted
	// creates a review.
	actionCreated   = "created"
	actionSubmitted = "submitted"
)

// applyIssueComment applies an issue_comment event (on an issue or a pull request's
// conversation) to github_comments.
func applyIssueComment(w *writes, ev Event) {
	e := ev.Payload
	c := &e.Comment
	w.addComment(ev, models.Comment{
		NodeID:          c.NodeID,
		ID:              c.ID,
		Kind:            models.KindIssueComment,
		Number:          optionalInt(e.Issue.Number),
		ParentNodeID:    e.Issue.NodeID,
		AuthorLogin:     c.User.Login,
		Body:            c.Body,
		HTMLURL:         c.HTMLURL,
		GitHubUpdatedAt: c.UpdatedAt.time(),
	})
}

// applyCommitComment applies a commit_comment event to github_comments.
func applyCommitComment(w *writes, ev Event) {
	c := &ev.Payload.Comment
	w.addComment(ev, models.Comment{
		NodeID:          c.NodeID,
		ID:              c.ID,
		Kind:            models.KindCommitComment,
		CommitID:        c.CommitID,
		Path:            c.Path,
		AuthorLogin:     c.User.Login,
		Body:            c.Body,
		HTMLURL:         c.HTMLURL,
		GitHubUpdatedAt: c.UpdatedAt.time(),
	})
}

// applyReviewComment applies a pull_request_review_comment event to github_comments.
func applyReviewComment(w *writes, ev Event) {
	e := ev.Payload
	c := &e.Comment
	w.addComment(ev, models.Comment{
		NodeID:          c.NodeID,
		ID:              c.ID,
		Kind:            models.KindReviewComment,
		Number:          optionalInt(e.PullRequest.Number),
		ParentNodeID:    e.PullRequest.NodeID,
		CommitID:        c.CommitID,
		Path:            c.Path,
		AuthorLogin:     c.User.Login,
		Body:            c.Body,
		HTMLURL:         c.HTMLURL,
		GitHubUpdatedAt: c.UpdatedAt.time(),
	})
}

// applyReview applies a pull_request_review event to github_comments: a review is stored
// as a comment whose review_state carries its verdict.
func applyReview(w *writes, ev Event) {
	e := ev.Payload
	r := &e.Review
	w.addComment(ev, models.Comment{
		NodeID:          r.NodeID,
		ID:              r.ID,
		Kind:            models.KindReview,
		Number:          optionalInt(e.PullRequest.Number),
		ParentNodeID:    e.PullRequest.NodeID,
		CommitID:        r.CommitID,
		ReviewState:     r.State,
		AuthorLogin:     r.User.Login,
		Body:            r.Body,
		HTMLURL:         r.HTMLURL,
		GitHubUpdatedAt: r.SubmittedAt.time(),
	})
}

func commentTracking(r *models.Comment) *models.Tracking { return &r.Tracking }

func commentClock(r *models.Comment) **time.Time { return &r.EntityClock }

// addComment fills the columns every kind of comment shares, and refreshes every column
// of an existing row: each kind's payload carries all of them.
func (w *writes) addComment(ev Event, row models.Comment) {
	ref := refOf(&ev.Payload.Repository)
	row.RepositoryID, row.RepositoryOwner, row.RepositoryName = ref.ID, ref.Owner, ref.Name
	row.Deleted = ev.Action == actionDeleted
	row.InstallationID = optionalID(ev.Payload.Installation.ID)
	row.SenderLogin = ev.Sender.login()
	row.Tracking = newTracking(ev, w.now)
	row.EntityClock = row.GitHubUpdatedAt
	creates := ev.Action == actionCreated || ev.Action == actionSubmitted
	w.comments.add(row.NodeID, clocked(refresh(ev, w.now, row, commentTracking, allColumns(commentTracking)),
		row.EntityClock, creates, commentClock, commentTracking))
}
