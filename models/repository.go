package models

import "time"

// Repository is a GitHub repository, from repository, installation and
// installation_repositories events.
type Repository struct {
	// ID is GitHub's numeric repository id.
	ID int64 `gorm:"column:id;primaryKey;autoIncrement:false"`
	// NodeID is GitHub's global node id.
	NodeID string `gorm:"column:node_id"`
	// OwnerLogin is the owning account's login.
	OwnerLogin string `gorm:"column:owner_login"`
	// Name is the repository name without its owner.
	Name string `gorm:"column:name"`
	// FullName is "owner/name".
	FullName string `gorm:"column:full_name"`
	// Private is GitHub's private flag.
	Private bool `gorm:"column:private"`
	// Archived is GitHub's archived flag.
	Archived bool `gorm:"column:archived"`
	// DefaultBranch is the repository's default branch, when a full payload was seen.
	DefaultBranch string `gorm:"column:default_branch"`
	// HTMLURL is the repository's page, when a full payload was seen.
	HTMLURL string `gorm:"column:html_url"`
	// InstallationID is the GitHub App installation that was granted the repository.
	InstallationID *int64 `gorm:"column:installation_id"`
	// InstallationRemoved is set once the repository was removed from that installation.
	InstallationRemoved bool `gorm:"column:installation_removed"`
	// Deleted is set by a repository deleted event.
	Deleted bool `gorm:"column:deleted"`
	// SenderLogin is the login of the last event's sender.
	SenderLogin string `gorm:"column:sender_login"`
	// EntityClock is GitHub's timestamp of the entity in the payload the row holds, in
	// whole seconds (repository.updated_at of repository events); nil compares as older than anything. An event with an older one
	// changes nothing here (migration 0005).
	EntityClock *time.Time `gorm:"column:entity_clock"`
	Tracking
}

// TableName is the repositories table.
func (Repository) TableName() string { return "github_repositories" }
