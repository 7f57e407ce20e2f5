package models

import "time"

// PullRequest is a GitHub pull request; its processing state follows the lifecycle
// rules of package ingest.
type PullRequest struct {
	// NodeID is GitHub's global node id, the row's key.
	NodeID string `gorm:"column:node_id;primaryKey"`
	// ID is GitHub's numeric pull request id.
	ID int64 `gorm:"column:id"`
	// RepositoryID is the base repository's id.
	RepositoryID int64 `gorm:"column:repository_id"`
	// RepositoryOwner is the base repository owner's login.
	RepositoryOwner string `gorm:"column:repository_owner"`
	// RepositoryName is the base repository's name.
	RepositoryName string `gorm:"column:repository_name"`
	// Number is the pull request number in its repository.
	Number int `gorm:"column:number"`
	// Title is the pull request title.
	Title string `gorm:"column:title"`
	// State is "open" or "closed".
	State string `gorm:"column:state"`
	// Draft is GitHub's draft flag.
	Draft bool `gorm:"column:draft"`
	// Merged is set when the pull request was merged.
	Merged bool `gorm:"column:merged"`
	// MergedAt is when it was merged.
	MergedAt *time.Time `gorm:"column:merged_at"`
	// ClosedAt is when it was closed.
	ClosedAt *time.Time `gorm:"column:closed_at"`
	// HeadRef is the head branch.
	HeadRef string `gorm:"column:head_ref"`
	// HeadSHA is the head commit.
	HeadSHA string `gorm:"column:head_sha"`
	// BaseRef is the base branch.
	BaseRef string `gorm:"column:base_ref"`
	// BaseSHA is the base commit.
	BaseSHA string `gorm:"column:base_sha"`
	// AuthorLogin is the login of the pull request's author.
	AuthorLogin string `gorm:"column:author_login"`
	// HTMLURL is the pull request's page.
	HTMLURL string `gorm:"column:html_url"`
	// InstallationID is the GitHub App installation the event came through, if any.
	InstallationID *int64 `gorm:"column:installation_id"`
	// SenderLogin is the login of the last applied event's sender.
	SenderLogin string `gorm:"column:sender_login"`
	// GitHubUpdatedAt is GitHub's updated_at for the pull request.
	GitHubUpdatedAt *time.Time `gorm:"column:github_updated_at"`
	// EntityClock is GitHub's timestamp of the entity in the payload the row holds, in
	// whole seconds (pull_request.updated_at); nil compares as older than anything. An event with an older one
	// changes nothing here (migration 0005).
	EntityClock *time.Time `gorm:"column:entity_clock"`
	Tracking
}

// TableName is the pull requests table.
func (PullRequest) TableName() string { return "github_pull_requests" }
