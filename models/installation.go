package models

import "time"

// Installation is a GitHub App installation.
type Installation struct {
	// ID is the installation id.
	ID int64 `gorm:"column:id;primaryKey;autoIncrement:false"`
	// AppID is the GitHub App the installation belongs to.
	AppID int64 `gorm:"column:app_id"`
	// AccountID is the id of the account the app is installed on.
	AccountID int64 `gorm:"column:account_id"`
	// AccountLogin is the login of that account.
	AccountLogin string `gorm:"column:account_login"`
	// AccountType is "User" or "Organization".
	AccountType string `gorm:"column:account_type"`
	// TargetID is the id of the installation target.
	TargetID int64 `gorm:"column:target_id"`
	// TargetType is the installation target type, e.g. "Organization".
	TargetType string `gorm:"column:target_type"`
	// RepositorySelection is "all" or "selected".
	RepositorySelection string `gorm:"column:repository_selection"`
	// Suspended is set by a suspend event and cleared by unsuspend.
	Suspended bool `gorm:"column:suspended"`
	// SuspendedAt is GitHub's suspension time.
	SuspendedAt *time.Time `gorm:"column:suspended_at"`
	// Deleted is set by an installation deleted event.
	Deleted bool `gorm:"column:deleted"`
	// SenderLogin is the login of the last event's sender.
	SenderLogin string `gorm:"column:sender_login"`
	// EntityClock is GitHub's timestamp of the entity in the payload the row holds, in
	// whole seconds (installation.updated_at); nil compares as older than anything. An event with an older one
	// changes nothing here (migration 0005).
	EntityClock *time.Time `gorm:"column:entity_clock"`
	Tracking
}

// TableName is the installations table.
func (Installation) TableName() string { return "github_installations" }
