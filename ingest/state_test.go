package ingest

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/brokerswitch/brokerswitch/models"
)

func TestNextState(t *testing.T) {
	missing := Prior{}
	open := Prior{Exists: true, State: stateOpen}
	closed := Prior{Exists: true, State: stateClosed}
	newerOpen := Prior{Exists: true, State: stateOpen, Order: Newer}
	newerClosed := Prior{Exists: true, State: stateClosed, Order: Newer}
	olderOpen := Prior{Exists: true, State: stateOpen, Order: Older}
	olderClosed := Prior{Exists: true, State: stateClosed, Order: Older}
	fromPayload := Transition{Refresh: true, FromPayload: true, ProcessingState: models.StateUpdated}
	refresh := func(state string, ps models.ProcessingState) Transition {
		return Transition{Refresh: true, State: state, ProcessingState: ps}
	}

	tests := []struct {
		name   string
		prior  Prior
		action string
		want   Transition
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
		{"synchronize after closed touches only last_*", closed, "synchronize", Transition{}},
		{"edited on closed touches only last_*", closed, "edited", Transition{}},
		{"labeled on closed touches only last_*", closed, "labeled", Transition{}},
		{"synchronize on a missing row creates it UPDATED", missing, "synchronize", refresh("", models.StateUpdated)},
		{"closed on a missing row creates it closed", missing, "closed", refresh("closed", models.StateUpdated)},
		{"reopened on a missing row is RE_REQUESTED, as on an existing one", missing, "reopened", refresh("open", models.StateReRequested)},
		{"newer labeled on a closed row takes the payload: not late, a change", newerClosed, "labeled", fromPayload},
		{"newer synchronize on a closed row takes the payload's state", newerClosed, "synchronize", fromPayload},
		{"newer edited on an open row takes the payload's state", newerOpen, "edited", fromPayload},
		{"newer closed", newerOpen, "closed", refresh("closed", models.StateUpdated)},
		{"newer reopened", newerClosed, "reopened", refresh("open", models.StateReRequested)},
		{"newer opened on an existing row", newerOpen, "opened", refresh("open", models.StateReRequested)},
		{"older synchronize changes nothing", olderOpen, "synchronize", Transition{Stale: true}},
		{"older opened does not re-request", olderOpen, "opened", Transition{Stale: true}},
		{"older reopened does not reopen", olderClosed, "reopened", Transition{Stale: true}},
		{"older closed does not close", olderOpen, "closed", Transition{Stale: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, NextState(tt.prior, tt.action))
		})
	}
}

func TestNextStateNeverWritesReaderStates(t *testing.T) {
	for _, prior := range []Prior{{}, {Exists: true, State: stateOpen}, {Exists: true, State: stateClosed},
		{Exists: true, State: stateClosed, Order: Newer}, {Exists: true, State: stateOpen, Order: Older}} {
		for _, action := range []string{"opened", "reopened", "closed", "edited", "synchronize", "deleted", ""} {
			ps := NextState(prior, action).ProcessingState
			assert.NotEqual(t, models.StateProcessing, ps)
			assert.NotEqual(t, models.StateProcessed, ps)
		}
	}
}
