package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// trackedFields exposes the columns NextState governs on a pull request or issue row.
type trackedFields[T any] func(row *T) (tracking *models.Tracking, state *string)

// trackedChange is what ev does to a pull request or issue row, following NextState. The
// row it starts from was read FOR UPDATE, so the transition is decided on the row as it
// is now, not as another consumer is about to leave it.
func trackedChange[T any](ev Event, now time.Time, incoming T, fields trackedFields[T]) change[T] {
	return func(cur *T) *T {
		exists := cur != nil
		var current T
		if exists {
			current = *cur
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
		touch(tracking, ev, now, transition.ProcessingState)
		return &row
	}
}
