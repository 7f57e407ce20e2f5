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
		{"reopened on a missing row creates it UPDATED, state from payload", missing, "reopened", refresh("", models.StateUpdated)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, NextState(tt.prior, tt.action))
		})
	}
}

func TestNextStateNeverWritesReaderStates(t *testing.T) {
	for _, prior := range []Prior{{}, {Exists: true, State: stateOpen}, {Exists: true, State: stateClosed}} {
		for _, action := range []string{"opened", "reopened", "closed", "edited", "synchronize", "deleted", ""} {
			ps := NextState(prior, action).ProcessingState
			assert.NotEqual(t, models.StateProcessing, ps)
			assert.NotEqual(t, models.StateProcessed, ps)
		}
	}
}
