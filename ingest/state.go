package ingest

import "github.com/brokerswitch/brokerswitch/models"

// GitHub's states of pull requests and issues.
const (
	stateOpen   = "open"
	stateClosed = "closed"
)

// Lifecycle actions that move a pull request or issue between states.
const (
	actionOpened   = "opened"
	actionReopened = "reopened"
	actionClosed   = "closed"
)

// Prior is what the table holds for a pull request or issue before an event applies.
type Prior struct {
	// Exists is false when the entity has no row yet.
	Exists bool
	// State is the row's state, "open" or "closed".
	State string
}

// Transition is what one event does to a pull request or issue row.
type Transition struct {
	// Refresh copies the payload's columns onto the row. Without it only
	// last_delivery_id and last_action change.
	Refresh bool
	// State is the state to set; empty keeps the row's state (or, for a new row, takes
	// the payload's).
	State string
	// ProcessingState is the processing state to set, with processing_date; empty leaves
	// both alone.
	ProcessingState models.ProcessingState
}

// NextState applies the processing-state rules for pull requests and issues. It is pure
// so the rules can be read and tested apart from the database.
func NextState(prior Prior, action string) Transition {
	switch {
	case action == actionOpened && prior.Exists:
		// Opened again (e.g. a redelivered opened after the row exists): readers must look
		// at it again.
		return Transition{Refresh: true, State: stateOpen, ProcessingState: models.StateReRequested}
	case action == actionOpened:
		return Transition{Refresh: true, State: stateOpen, ProcessingState: models.StateNew}
	case action == actionClosed:
		return Transition{Refresh: true, State: stateClosed, ProcessingState: models.StateUpdated}
	case !prior.Exists:
		// Any other action on a row we never saw (its opened event predates this service):
		// create the row from the payload, as UPDATED rather than NEW or RE_REQUESTED
		// because the entity is not new, yet readers never saw it either.
		return Transition{Refresh: true, ProcessingState: models.StateUpdated}
	case action == actionReopened:
		return Transition{Refresh: true, State: stateOpen, ProcessingState: models.StateReRequested}
	case prior.State == stateClosed:
		// A late event on a closed entity (a synchronize that arrives after closed) must
		// not reopen it or make readers process it again; only record that it arrived.
		return Transition{}
	default:
		return Transition{Refresh: true, ProcessingState: models.StateUpdated}
	}
}
