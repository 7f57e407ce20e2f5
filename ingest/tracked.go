package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// trackedFields exposes the columns nextState governs on a pull request or issue row.
type trackedFields[T any] func(row *T) (tracking *models.Tracking, state *string, clock **time.Time)

// trackedChange is what ev does to a pull request or issue row, following nextState;
// incoming carries ev's clock. The row it starts from was read FOR UPDATE, clock
// included, so the transition is decided on the row as it is now, not as another
// consumer is about to leave it.
func trackedChange[T any](ev Event, now time.Time, incoming T, fields trackedFields[T]) change[T] {
	return func(cur *T) *T {
		exists := cur != nil
		var current T
		if exists {
			current = *cur
		}
		currentTracking, currentState, currentClock := fields(&current)
		_, incomingState, incomingClock := fields(&incoming)
		order := compareClocks(*incomingClock, *currentClock, exists)
		transition := nextState(priorRow{Exists: exists, State: *currentState, Order: order}, ev.Action)
		if transition.Stale {
			return nil
		}

		row := incoming
		if exists && !transition.Refresh {
			row = current
		}
		tracking, state, clock := fields(&row)
		switch {
		case transition.State != "":
			*state = transition.State
		case transition.FromPayload:
			*state = *incomingState
		case exists:
			*state = *currentState
		}
		*clock = laterClock(*incomingClock, *currentClock)
		if exists {
			*tracking = *currentTracking
		} else {
			*tracking = newTracking(ev, now)
		}
		touch(tracking, ev, now, transition.ProcessingState)
		return &row
	}
}

// clocked makes c follow the entity's clock: an event older than the row changes
// nothing, and the row keeps the newer clock of the two. creates says whether ev's action is the one that creates the entity: a row first seen
// through any later event is UPDATED, not NEW, as nextState has it for pull requests,
// so that delivering the newest event first leaves what clock order leaves.
func clocked[R any](c change[R], event *time.Time, creates bool, clock func(*R) **time.Time, tracking trackingOf[R]) change[R] {
	return func(cur *R) *R {
		var prior *time.Time
		if cur != nil {
			prior = *clock(cur)
			if compareClocks(event, prior, true) == eventOlder {
				return nil
			}
		}
		next := c(cur)
		if next == nil {
			return nil
		}
		*clock(next) = laterClock(event, prior)
		if cur == nil && !creates {
			t := tracking(next)
			t.ProcessingState = models.StateUpdated
		}
		return next
	}
}
