package models

import "time"

// CommentKind says what a Comment row is.
type CommentKind string

const (
	// KindIssueComment is a comment on an issue or on a pull request's conversation.
	KindIssueComment CommentKind = "issue_comment"
	// KindCommitComment is a comment on a commit.
	KindCommitComment CommentKind = "commit_comment"
	// KindReviewComment is a pull request review comment on a diff line.
	KindReviewComment CommentKind = "review_comment"
	// KindReview is a pull request review (its body and verdict).
	KindReview CommentKind = "review"
)

// Comment is an issue, commit or review comment, or a pull request review.
type Comment struct {
	// NodeID is GitHub's global node id, the row's key.
	NodeID string `gorm:"column:node_id;primaryKey"`
	// ID is GitHub's numeric comment (or review) id.
	ID int64 `gorm:"column:id"`
	// Kind says which kind of comment this is.
	Kind CommentKind `gorm:"column:kind"`
	// RepositoryID is the repository's id.
	RepositoryID int64 `gorm:"column:repository_id"`
	// RepositoryOwner is the repository owner's login.
	RepositoryOwner string `gorm:"column:repository_owner"`
	// RepositoryName is the repository's name.
	RepositoryName string `gorm:"column:repository_name"`
	// Number is the issue or pull request number; nil for commit comments.
	Number *int `gorm:"column:number"`
	// ParentNodeID is the node id of the issue or pull request commented on.
	ParentNodeID string `gorm:"column:parent_node_id"`
	// CommitID is the commented commit, for commit and review comments and reviews.
	CommitID string `gorm:"column:commit_id"`
	// Path is the commented file, for line comments.
	Path string `gorm:"column:path"`
	// ReviewState is a review's state, e.g. "approved"; empty for other kinds.
	ReviewState string `gorm:"column:review_state"`
	// AuthorLogin is the login of the comment's author.
	AuthorLogin string `gorm:"column:author_login"`
	// Body is the comment's text.
	Body string `gorm:"column:body"`
	// HTMLURL is the comment's page.
	HTMLURL string `gorm:"column:html_url"`
	// Deleted is set by a deleted event.
	Deleted bool `gorm:"column:deleted"`
	// InstallationID is the GitHub App installation the event came through, if any.
	InstallationID *int64 `gorm:"column:installation_id"`
	// SenderLogin is the login of the last event's sender.
	SenderLogin string `gorm:"column:sender_login"`
	// GitHubUpdatedAt is GitHub's updated_at (submitted_at for reviews).
	GitHubUpdatedAt *time.Time `gorm:"column:github_updated_at"`
	// EntityClock is GitHub's timestamp of the entity in the payload the row holds, in
	// whole seconds (the comment's updated_at, a review's submitted_at); nil compares as older than anything. An event with an older one
	// changes nothing here (migration 0005).
	EntityClock *time.Time `gorm:"column:entity_clock"`
	Tracking
}

// TableName is the comments table.
func (Comment) TableName() string { return "github_comments" }
