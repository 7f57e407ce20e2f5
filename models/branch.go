package models

// Branch is a branch or tag, created or deleted.
type Branch struct {
	// RepositoryID is the repository's id (part of the key).
	RepositoryID int64 `gorm:"column:repository_id;primaryKey;autoIncrement:false"`
	// RefType is "branch" or "tag" (part of the key).
	RefType string `gorm:"column:ref_type;primaryKey"`
	// Ref is the short ref name, e.g. "main" (part of the key).
	Ref string `gorm:"column:ref;primaryKey"`
	// RepositoryOwner is the repository owner's login.
	RepositoryOwner string `gorm:"column:repository_owner"`
	// RepositoryName is the repository's name.
	RepositoryName string `gorm:"column:repository_name"`
	// MasterBranch is the repository's default branch as a create event reports it.
	MasterBranch string `gorm:"column:master_branch"`
	// PusherType is "user" or "deploy_key".
	PusherType string `gorm:"column:pusher_type"`
	// Deleted is set by a delete event and cleared by a later create.
	Deleted bool `gorm:"column:deleted"`
	// InstallationID is the GitHub App installation the event came through, if any.
	InstallationID *int64 `gorm:"column:installation_id"`
	// SenderLogin is the login of the last event's sender.
	SenderLogin string `gorm:"column:sender_login"`
	Tracking
}

// TableName is the branches table.
func (Branch) TableName() string { return "github_branches" }
