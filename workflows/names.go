// Package workflows holds the control plane: one window workflow per logical queue and one
// BrokerSwitch workflow. Messages never travel through them; they decide what to read and
// when to move, and activities do the work.
package workflows

// Workflow ids, signal, update and query names. Operators type these in the Temporal CLI,
// so they are plain words, and inputs are small JSON objects that tctl accepts too. Each
// signal and update carries an Order of the kind it is named after.
const (
	// BrokerSwitchWorkflowID is the id of the one BrokerSwitch workflow.
	BrokerSwitchWorkflowID = "broker-switch"

	// SignalPendingSwitch carries a producer's notification (brokerstate.Notification).
	SignalPendingSwitch = "pending-switch"
	// SignalForceSwitch moves at once: {"index": N}.
	SignalForceSwitch = "force-switch"
	// SignalCancelPendingSwitch drops the Pending Switch without moving; its optional input
	// {"switchedAt": T, "index": N} names the target read, so that a hop made after T is
	// spared and a cancel that comes after that switch was committed is refused.
	SignalCancelPendingSwitch = "cancel-pending-switch"

	// QueryStatus returns a BrokerSwitch workflow's Status.
	QueryStatus = "status"

	// UpdateForceSwitch is the force-switch order as a Workflow Update: the caller waits
	// for the workflow's own answer (an OrderResult) instead of polling Postgres. The
	// signal stays, for the CLI and tctl.
	UpdateForceSwitch = "force-switch"
	// UpdateCancelPendingSwitch is the cancel-pending-switch order as a Workflow Update.
	UpdateCancelPendingSwitch = "cancel-pending-switch"
)

// Order outcomes, as an OrderResult reports them.
const (
	// OrderCommitted: the state shows the order.
	OrderCommitted = "committed"
	// OrderAlreadyThere: the state already was what the order asks for; nothing moved.
	OrderAlreadyThere = "already-there"
	// OrderRefused: the order was not applied; Reason says why.
	OrderRefused = "refused"
)

// QueueWindowWorkflowID is the fixed id of a queue's window workflow: one id per queue
// means one consumer per queue across all workers.
func QueueWindowWorkflowID(queue string) string {
	return "queue-window-" + queue
}
