package models

import "time"

// ProcessingState tells readers what happened to a typed row since they last looked.
type ProcessingState string

const (
	// StateNew marks a row this service created.
	StateNew ProcessingState = "NEW"
	// StateReRequested marks a row whose entity was opened again (re-opened, or an
	// opened event for a row that already existed).
	StateReRequested ProcessingState = "RE_REQUESTED"
	// StateUpdated marks a row this service changed.
	StateUpdated ProcessingState = "UPDATED"
	// StateProcessing is set by readers while they work on a row; never by this service,
	// which replaces it with the state an event sets (docs/tables.md, "Reading the typed tables").
	StateProcessing ProcessingState = "PROCESSING"
	// StateProcessed is set by readers once done; never by this service.
	StateProcessed ProcessingState = "PROCESSED"
)

// Tracking holds the columns every typed row shares: which deliveries wrote it and its
// processing state for readers.
type Tracking struct {
	// DeliveryID is the delivery that created the row.
	DeliveryID string `gorm:"column:delivery_id"`
	// LastDeliveryID is the last delivery that touched the row.
	LastDeliveryID string `gorm:"column:last_delivery_id"`
	// LastAction is that delivery's action, or its event name when it has no action.
	LastAction string `gorm:"column:last_action"`
	// ProcessingState is the row's state for readers.
	ProcessingState ProcessingState `gorm:"column:processing_state"`
	// ProcessingDate is when this service last set ProcessingState.
	ProcessingDate time.Time `gorm:"column:processing_date"`
	// ProcessingVersion goes up each time this service sets ProcessingState; a reader
	// finishes a claim only at the version it claimed (migration 0006). Compare it, never
	// read a count into it.
	ProcessingVersion int64 `gorm:"column:processing_version"`
	// ProcessedDate belongs to readers.
	ProcessedDate *time.Time `gorm:"column:processed_date"`
	// CreatedAt is when the row was inserted.
	CreatedAt time.Time `gorm:"column:created_at"`
	// UpdatedAt is when the row was last written.
	UpdatedAt time.Time `gorm:"column:updated_at"`
}
