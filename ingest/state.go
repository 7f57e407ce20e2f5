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

// priorRow is what the table holds for a pull request or issue before an event applies.
type priorRow struct {
	// Exists is false when the entity has no row yet.
	Exists bool
	// State is the row's state, "open" or "closed".
	State string
	// Order is how the event's clock compares with the row's (compareClocks).
	Order clockOrder
}

// rowChange is what one event does to a pull request or issue row.
type rowChange struct {
	// Refresh copies the payload's columns onto the row. Without it only
	// last_delivery_id and last_action change.
	Refresh bool
	// State is the state to set; empty keeps the row's state (or, for a new row, takes
	// the payload's).
	State string
	// ProcessingState is the processing state to set, with processing_date; empty leaves
	// both alone.
	ProcessingState models.ProcessingState
	// FromPayload takes the state from the payload when State is empty, instead of keeping
	// the row's: the event is newer than the row, so its payload is GitHub's truth.
	FromPayload bool
	// Stale means the event is older than the row: nothing changes, not even last_*.
	Stale bool
}

// nextState applies the processing-state rules for pull requests and issues. It is pure
// so the rules can be read and tested apart from the database.
//
// Under reordering, the rule is GitHub's clock (prior.Order): the row holds the newest
// payload of its entity, and the result is the row that delivery in clock order leaves.
//   - An event older than the row is stale: readers already saw a newer state, so it
//     must not make them process the entity again, and it changes nothing, last_*
//     included (last_delivery_id names the delivery whose payload the row holds). Only
//     the ledger records it.
//   - An event newer than the row applies, its payload wholly (state included): GitHub
//     stamped it after what the row holds, so a labeled after a closed, or a synchronize
//     whose reopened is still on its way, is a change readers have not seen and is never
//     hidden. The lifecycle actions still set their states and processing states.
//   - Whether a row existed must not change the outcome, or delivering the newest event
//     first would differ from clock order: reopened is RE_REQUESTED with or without a row,
//     and any other action on a row never seen is UPDATED, as it is on an existing one.
//     (opened is NEW only on a missing row; a real lifecycle starts with it, so when it is
//     the newest event it is the only one.)
//   - When the clocks cannot tell (equal seconds, a missing clock), the queue decides,
//     by the lifecycle rules below alone.
//
// The prior row is the row as stored, read FOR UPDATE with its clock, and as the batch's
// earlier events of the entity left it (rowSet.fold).
func nextState(prior priorRow, action string) rowChange {
	switch {
	case prior.Order == eventOlder:
		return rowChange{Stale: true}
	case action == actionOpened && prior.Exists:
		// Opened again (e.g. a redelivered opened after the row exists): readers must look
		// at it again.
		return rowChange{Refresh: true, State: stateOpen, ProcessingState: models.StateReRequested}
	case action == actionOpened:
		return rowChange{Refresh: true, State: stateOpen, ProcessingState: models.StateNew}
	case action == actionClosed:
		return rowChange{Refresh: true, State: stateClosed, ProcessingState: models.StateUpdated}
	case action == actionReopened:
		return rowChange{Refresh: true, State: stateOpen, ProcessingState: models.StateReRequested}
	case !prior.Exists:
		// Any other action on a row we never saw (its opened predates this service, or is
		// still on its way): create the row from the payload, as UPDATED rather than NEW
		// because the entity is not new, yet readers never saw it either.
		return rowChange{Refresh: true, ProcessingState: models.StateUpdated}
	case prior.Order == eventNewer:
		return rowChange{Refresh: true, FromPayload: true, ProcessingState: models.StateUpdated}
	case prior.State == stateClosed:
		// A late event on a closed entity (a synchronize that arrives after closed) must
		// not reopen it or make readers process it again; only record that it arrived.
		// Without a clock to tell, arriving after closed is all we know.
		return rowChange{}
	default:
		return rowChange{Refresh: true, ProcessingState: models.StateUpdated}
	}
}
