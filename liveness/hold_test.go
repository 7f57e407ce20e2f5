package liveness

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
)

// A fenced attempt stops when its lease is lost, when its deadline is near, or when
// Temporal shows that it no longer runs it; a Temporal that does not answer decides
// nothing; a requested cancellation is fetched by one heartbeat.
func TestAFencedAttemptStopsBeforeAnotherCanTakeItsPlace(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pending := func(attempt int32, state enumspb.PendingActivityState) *workflowpb.PendingActivityInfo {
		return &workflowpb.PendingActivityInfo{ActivityId: "5", Attempt: attempt, State: state}
	}
	started := enumspb.PENDING_ACTIVITY_STATE_STARTED
	cancelRequested := enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
	for _, c := range []struct {
		name      string
		s         sight
		stop      string // "" goes on
		heartbeat bool
	}{
		{name: "nothing new", s: sight{}},
		{name: "the lease is lost", s: sight{leaseLost: true, answered: true, pending: pending(1, started)},
			stop: "the worker's lease was lost"},
		{name: "the deadline is far", s: sight{deadline: now.Add(deadlineMargin + time.Second)}},
		{name: "the deadline is near", s: sight{deadline: now.Add(deadlineMargin)}, stop: "its start-to-close deadline is 30s away"},
		{name: "the deadline passed", s: sight{deadline: now.Add(-time.Minute)}, stop: "its start-to-close deadline is 30s away"},
		{name: "Temporal does not answer", s: sight{answered: false}},
		{name: "Temporal runs this attempt", s: sight{answered: true, pending: pending(1, started)}},
		{name: "the activity is gone", s: sight{answered: true}, stop: "Temporal no longer runs this attempt"},
		{name: "a later attempt runs", s: sight{answered: true, pending: pending(2, started)},
			stop: "Temporal no longer runs this attempt"},
		{name: "a cancellation is requested", s: sight{answered: true, pending: pending(1, cancelRequested)}, heartbeat: true},
		{name: "a cancellation was fetched already", s: sight{answered: true, pending: pending(1, cancelRequested), cancelFetched: true}},
		{name: "a later attempt is asked to cancel", s: sight{answered: true, pending: pending(2, cancelRequested)},
			stop: "Temporal no longer runs this attempt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.s.now, c.s.attempt = now, 1
			why, heartbeat := decide(c.s)
			assert.Equal(t, c.heartbeat, heartbeat)
			if c.stop == "" {
				assert.NoError(t, why)
				return
			}
			assert.True(t, errors.Is(why, ErrLost), "the reason wraps ErrLost")
			assert.ErrorContains(t, why, c.stop)
		})
	}
}
