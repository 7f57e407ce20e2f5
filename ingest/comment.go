package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/google/go-github/v75/github"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/models"
)

const actionDeleted = "deleted"

// applyIssueComment applies an issue_comment event (on an issue or a pull request's
// conversation) to github_comments.
func applyIssueComment(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.IssueCommentEvent)
	c := e.GetComment()
	return upsertComment(ctx, tx, commentRow(ev, now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
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
func applyCommitComment(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.CommitCommentEvent)
	c := e.GetComment()
	return upsertComment(ctx, tx, commentRow(ev, now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
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
func applyReviewComment(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.PullRequestReviewCommentEvent)
	c := e.GetComment()
	return upsertComment(ctx, tx, commentRow(ev, now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
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
func applyReview(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.PullRequestReviewEvent)
	r := e.GetReview()
	return upsertComment(ctx, tx, commentRow(ev, now, e.GetRepo(), e.GetInstallation(), e.GetSender(), models.Comment{
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

func upsertComment(ctx context.Context, tx *gorm.DB, row models.Comment) error {
	upsert := refreshOnConflict([]string{"node_id"},
		"id", "kind", "repository_id", "repository_owner", "repository_name", "number", "parent_node_id",
		"commit_id", "path", "review_state", "author_login", "body", "html_url", "deleted",
		"installation_id", "sender_login", "github_updated_at")
	if err := tx.WithContext(ctx).Clauses(upsert).Create(&row).Error; err != nil {
		return fmt.Errorf("upsert %s %s: %w", row.Kind, row.NodeID, err)
	}
	return nil
}
