package models

import "time"

// Push is one push event. It does not embed Tracking because its key is the delivery id
// itself.
type Push struct {
	// DeliveryID is the delivery that carried the push: the row's key.
	DeliveryID string `gorm:"column:delivery_id;primaryKey"`
	// RepositoryID is the repository's id.
	RepositoryID int64 `gorm:"column:repository_id"`
	// RepositoryOwner is the repository owner's login.
	RepositoryOwner string `gorm:"column:repository_owner"`
	// RepositoryName is the repository's name.
	RepositoryName string `gorm:"column:repository_name"`
	// Ref is the full pushed ref, e.g. "refs/heads/main".
	Ref string `gorm:"column:ref"`
	// BeforeSHA is the ref's commit before the push.
	BeforeSHA string `gorm:"column:before_sha"`
	// AfterSHA is the ref's commit after the push.
	AfterSHA string `gorm:"column:after_sha"`
	// BaseRef is GitHub's base_ref, if any.
	BaseRef string `gorm:"column:base_ref"`
	// CommitCount is the number of commits in the payload.
	CommitCount int `gorm:"column:commit_count"`
	// HeadCommitID is the head commit's id.
	HeadCommitID string `gorm:"column:head_commit_id"`
	// Created is set when the push created the ref.
	Created bool `gorm:"column:created"`
	// Deleted is set when the push deleted the ref.
	Deleted bool `gorm:"column:deleted"`
	// Forced is set for a force push.
	Forced bool `gorm:"column:forced"`
	// CompareURL is GitHub's compare link.
	CompareURL string `gorm:"column:compare_url"`
	// PusherName is the pusher's name.
	PusherName string `gorm:"column:pusher_name"`
	// InstallationID is the GitHub App installation the event came through, if any.
	InstallationID *int64 `gorm:"column:installation_id"`
	// SenderLogin is the login of the event's sender.
	SenderLogin string `gorm:"column:sender_login"`
	// LastDeliveryID is the last delivery that touched the row (its own, for a push).
	LastDeliveryID string `gorm:"column:last_delivery_id"`
	// LastAction is "push".
	LastAction string `gorm:"column:last_action"`
	// ProcessingState is the row's state for readers.
	ProcessingState ProcessingState `gorm:"column:processing_state"`
	// ProcessingDate is when this service last set ProcessingState.
	ProcessingDate time.Time `gorm:"column:processing_date"`
	// ProcessingVersion is 1: a push is written once (see Tracking.ProcessingVersion).
	ProcessingVersion int64 `gorm:"column:processing_version"`
	// ProcessedDate belongs to readers.
	ProcessedDate *time.Time `gorm:"column:processed_date"`
	// CreatedAt is when the row was inserted.
	CreatedAt time.Time `gorm:"column:created_at"`
	// UpdatedAt is when the row was last written.
	UpdatedAt time.Time `gorm:"column:updated_at"`
}

// TableName is the pushes table.
func (Push) TableName() string { return "github_pushes" }
