package models

import "time"

// Issue is a GitHub issue; its processing state follows the lifecycle rules of package
// ingest.
type Issue struct {
	// NodeID is GitHub's global node id, the row's key.
	NodeID string `gorm:"column:node_id;primaryKey"`
	// ID is GitHub's numeric issue id.
	ID int64 `gorm:"column:id"`
	// RepositoryID is the repository's id.
	RepositoryID int64 `gorm:"column:repository_id"`
	// RepositoryOwner is the repository owner's login.
	RepositoryOwner string `gorm:"column:repository_owner"`
	// RepositoryName is the repository's name.
	RepositoryName string `gorm:"column:repository_name"`
	// Number is the issue number in its repository.
	Number int `gorm:"column:number"`
	// Title is the issue title.
	Title string `gorm:"column:title"`
	// State is "open" or "closed".
	State string `gorm:"column:state"`
	// StateReason is GitHub's state_reason, e.g. "completed" or "not_planned".
	StateReason string `gorm:"column:state_reason"`
	// ClosedAt is when it was closed.
	ClosedAt *time.Time `gorm:"column:closed_at"`
	// AuthorLogin is the login of the issue's author.
	AuthorLogin string `gorm:"column:author_login"`
	// HTMLURL is the issue's page.
	HTMLURL string `gorm:"column:html_url"`
	// InstallationID is the GitHub App installation the event came through, if any.
	InstallationID *int64 `gorm:"column:installation_id"`
	// SenderLogin is the login of the last applied event's sender.
	SenderLogin string `gorm:"column:sender_login"`
	// GitHubUpdatedAt is GitHub's updated_at for the issue.
	GitHubUpdatedAt *time.Time `gorm:"column:github_updated_at"`
	// EntityClock is GitHub's timestamp of the entity in the payload the row holds, in
	// whole seconds (issue.updated_at); nil compares as older than anything. An event with an older one
	// changes nothing here (migration 0005).
	EntityClock *time.Time `gorm:"column:entity_clock"`
	Tracking
}

// TableName is the issues table.
func (Issue) TableName() string { return "github_issues" }
