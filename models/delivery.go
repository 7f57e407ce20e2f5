package models

import "time"

// DeliveryOutcome is what the service did with a delivery.
type DeliveryOutcome string

const (
	// OutcomeApplied means the event's typed rows were written.
	OutcomeApplied DeliveryOutcome = "applied"
	// OutcomeIgnored means the event has no table; it was acknowledged without typed writes.
	OutcomeIgnored DeliveryOutcome = "ignored"
	// OutcomeError means the last attempt failed (malformed, or a database error); a later
	// attempt may still apply it.
	OutcomeError DeliveryOutcome = "error"
)

// Delivery is the ledger row of one GitHub delivery GUID: it makes applying exactly-once.
type Delivery struct {
	// DeliveryID is the x-github-delivery header, as sent. The table's unique key is the
	// uuid github_delivery_key(delivery_id) (migration 0008), one-to-one with the text.
	DeliveryID string `gorm:"column:delivery_id;primaryKey"`
	// Event is the x-github-event header.
	Event string `gorm:"column:event"`
	// Action is the payload's action, empty when it has none.
	Action string `gorm:"column:action"`
	// Queue is the logical queue the delivery was consumed from.
	Queue string `gorm:"column:queue"`
	// BrokerIndex identifies the broker the delivery was consumed from.
	BrokerIndex int `gorm:"column:broker_index"`
	// Outcome is what happened to the delivery.
	Outcome DeliveryOutcome `gorm:"column:outcome"`
	// ErrorReason explains an OutcomeError.
	ErrorReason string `gorm:"column:error_reason"`
	// RetryCycles counts the trips through the -retry queue before this attempt.
	RetryCycles int `gorm:"column:retry_cycles"`
	// HookID is the x-github-hook-id header, if any.
	HookID string `gorm:"column:hook_id"`
	// HookInstallationTargetID is the x-github-hook-installation-target-id header, if any.
	HookInstallationTargetID string `gorm:"column:hook_installation_target_id"`
	// HookInstallationTargetType is the x-github-hook-installation-target-type header, if any.
	HookInstallationTargetType string `gorm:"column:hook_installation_target_type"`
	// ReceivedAt is when the attempt that wrote this row started.
	ReceivedAt time.Time `gorm:"column:received_at"`
	// AppliedAt is when the delivery was applied or ignored; nil for errors.
	AppliedAt *time.Time `gorm:"column:applied_at"`
	// PayloadSHA256 is the SHA-256 of the message body, to tell a redelivery from a
	// delivery id reused with another payload; nil on rows older than migration 0004.
	PayloadSHA256 []byte `gorm:"column:payload_sha256"`
}

// TableName is the ledger table.
func (Delivery) TableName() string { return "github_deliveries" }
