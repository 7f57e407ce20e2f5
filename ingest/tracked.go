package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/brokerswitch/brokerswitch/models"
)

// trackedFields exposes the columns NextState governs on a pull request or issue row.
type trackedFields[T any] func(row *T) (tracking *models.Tracking, state *string)

// applyTracked writes a pull request or issue following NextState. The row is read FOR
// UPDATE first so the transition is decided on the row as it is now, not as another
// consumer is about to leave it.
func applyTracked[T any](ctx context.Context, tx *gorm.DB, ev Event, now time.Time, nodeID string, incoming T, fields trackedFields[T]) error {
	var current T
	err := tx.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).Where("node_id = ?", nodeID).Take(&current).Error
	exists := err == nil
	if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("lock row %s: %w", nodeID, err)
	}
	currentTracking, currentState := fields(&current)
	transition := NextState(Prior{Exists: exists, State: *currentState}, ev.Action)

	row := incoming
	if exists && !transition.Refresh {
		row = current
	}
	tracking, state := fields(&row)
	switch {
	case transition.State != "":
		*state = transition.State
	case exists:
		*state = *currentState
	}
	if exists {
		*tracking = *currentTracking
	} else {
		*tracking = newTracking(ev, now)
	}
	tracking.LastDeliveryID = ev.DeliveryID
	tracking.LastAction = lastAction(ev)
	tracking.UpdatedAt = now
	if transition.ProcessingState != "" {
		tracking.ProcessingState = transition.ProcessingState
		tracking.ProcessingDate = now
	}

	if !exists {
		if err := tx.WithContext(ctx).Create(&row).Error; err != nil {
			return fmt.Errorf("insert row %s: %w", nodeID, err)
		}
		return nil
	}
	// Select("*") writes every column, zero values included (a PR that stopped being a
	// draft must store false).
	if err := tx.WithContext(ctx).Select("*").Updates(&row).Error; err != nil {
		return fmt.Errorf("update row %s: %w", nodeID, err)
	}
	return nil
}
