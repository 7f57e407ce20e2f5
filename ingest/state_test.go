package ingest

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/brokerswitch/brokerswitch/models"
)

func TestNextState(t *testing.T) {
	missing := priorRow{}
	open := priorRow{Exists: true, State: stateOpen}
	closed := priorRow{Exists: true, State: stateClosed}
	newerOpen := priorRow{Exists: true, State: stateOpen, Order: eventNewer}
	newerClosed := priorRow{Exists: true, State: stateClosed, Order: eventNewer}
	olderOpen := priorRow{Exists: true, State: stateOpen, Order: eventOlder}
	olderClosed := priorRow{Exists: true, State: stateClosed, Order: eventOlder}
	fromPayload := rowChange{Refresh: true, FromPayload: true, ProcessingState: models.StateUpdated}
	refresh := func(state string, ps models.ProcessingState) rowChange {
		return rowChange{Refresh: true, State: state, ProcessingState: ps}
	}

	tests := []struct {
		name   string
		prior  priorRow
		action string
		want   rowChange
	}{
		{"opened creates NEW", missing, "opened", refresh("open", models.StateNew)},
		{"opened on an open row is RE_REQUESTED", open, "opened", refresh("open", models.StateReRequested)},
		{"opened on a closed row reopens it", closed, "opened", refresh("open", models.StateReRequested)},
		{"reopened", closed, "reopened", refresh("open", models.StateReRequested)},
		{"reopened on an open row", open, "reopened", refresh("open", models.StateReRequested)},
		{"closed", open, "closed", refresh("closed", models.StateUpdated)},
		{"closed twice", closed, "closed", refresh("closed", models.StateUpdated)},
		{"synchronize on open", open, "synchronize", refresh("", models.StateUpdated)},
		{"edited on open", open, "edited", refresh("", models.StateUpdated)},
		{"labeled on open", open, "labeled", refresh("", models.StateUpdated)},
		{"synchronize after closed touches only last_*", closed, "synchronize", rowChange{}},
		{"edited on closed touches only last_*", closed, "edited", rowChange{}},
		{"labeled on closed touches only last_*", closed, "labeled", rowChange{}},
		{"synchronize on a missing row creates it UPDATED", missing, "synchronize", refresh("", models.StateUpdated)},
		{"closed on a missing row creates it closed", missing, "closed", refresh("closed", models.StateUpdated)},
		{"reopened on a missing row is RE_REQUESTED, as on an existing one", missing, "reopened", refresh("open", models.StateReRequested)},
		{"newer labeled on a closed row takes the payload: not late, a change", newerClosed, "labeled", fromPayload},
		{"newer synchronize on a closed row takes the payload's state", newerClosed, "synchronize", fromPayload},
		{"newer edited on an open row takes the payload's state", newerOpen, "edited", fromPayload},
		{"newer closed", newerOpen, "closed", refresh("closed", models.StateUpdated)},
		{"newer reopened", newerClosed, "reopened", refresh("open", models.StateReRequested)},
		{"newer opened on an existing row", newerOpen, "opened", refresh("open", models.StateReRequested)},
		{"older synchronize changes nothing", olderOpen, "synchronize", rowChange{Stale: true}},
		{"older opened does not re-request", olderOpen, "opened", rowChange{Stale: true}},
		{"older reopened does not reopen", olderClosed, "reopened", rowChange{Stale: true}},
		{"older closed does not close", olderOpen, "closed", rowChange{Stale: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, nextState(tt.prior, tt.action))
		})
	}
}

func TestNextStateNeverWritesReaderStates(t *testing.T) {
	for _, prior := range []priorRow{{}, {Exists: true, State: stateOpen}, {Exists: true, State: stateClosed},
		{Exists: true, State: stateClosed, Order: eventNewer}, {Exists: true, State: stateOpen, Order: eventOlder}} {
		for _, action := range []string{"opened", "reopened", "closed", "edited", "synchronize", "deleted", ""} {
			ps := nextState(prior, action).ProcessingState
			assert.NotEqual(t, models.StateProcessing, ps)
			assert.NotEqual(t, models.StateProcessed, ps)
		}
	}
}
