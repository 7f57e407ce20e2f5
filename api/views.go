package api

import (
	"slices"
	"time"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/liveness"
)

// stateView is the broker state as the API shows it.
type stateView struct {
	ActiveIndex    int                        `json:"activeIndex"`
	PendingSwitch  *brokerstate.PendingSwitch `json:"pendingSwitch"`
	LastSwitch     *brokerstate.LastSwitch    `json:"lastSwitch"`
	LastDrainCheck *brokerstate.DrainCheck    `json:"lastDrainCheck"`
	SeenUntil      *time.Time                 `json:"seenUntil,omitempty"`
}

// brokerView is one configured broker, without its URL: the URL carries the password.
type brokerView struct {
	Index  int    `json:"index"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Vhost  string `json:"vhost"`
	Active bool   `json:"active"`
	// OnRoute says the broker is a hop of the Pending Switch: the producer publishes, or
	// published, to it and it is not read yet.
	OnRoute bool `json:"onRoute"`
	// LeftoverOrder is a spare's place in the Leftover Drain's order, from 1.
	LeftoverOrder int `json:"leftoverOrder,omitempty"`
	// AheadOfActive says the spare is read only once the active broker's queue is empty.
	AheadOfActive bool `json:"aheadOfActive,omitempty"`
}

// brokerRef names the broker a notification resolved to.
type brokerRef struct {
	Index int    `json:"index"`
	Host  string `json:"host"`
	Vhost string `json:"vhost"`
}

// notificationAnswer is the answer to a notification: what it does, as the API's read of
// the state predicts it. It carries only what the producer needs to stop retrying; the
// route, drain counts and errors are operator information (GET /api/v1/broker).
type notificationAnswer struct {
	// Outcome is one of brokerstate's notification outcomes.
	Outcome string `json:"outcome"`
	// Ignored repeats Outcome when the notification changes nothing.
	Ignored string    `json:"ignored,omitempty"`
	Target  brokerRef `json:"target"`
}

// orderAnswer is the answer to an operator's force or cancel order.
type orderAnswer struct {
	// Committed says the state below already shows the order; false means it was sent to
	// the workflow and is still to be applied.
	Committed bool `json:"committed"`
	// Outcome is the workflow's own answer (committed, already-there or refused) when the
	// order went as a Workflow Update; empty when the API had to fall back to a signal.
	Outcome string `json:"outcome,omitempty"`
	// Reason explains a refusal, or what a committed order left in place.
	Reason string `json:"reason,omitempty"`
	stateView
}

// brokerStatus is GET /api/v1/broker.
type brokerStatus struct {
	Brokers []brokerView `json:"brokers"`
	stateView
	Workflow workflowView `json:"workflow"`
	// Windows are the window activities the live workers hold, from their leases.
	Windows []liveness.Attempt `json:"windows"`
}

// workflowView is what Temporal says about the BrokerSwitch workflow.
type workflowView struct {
	ID string `json:"id"`
	// Found is false when Temporal has no such workflow (none started yet) or cannot say.
	Found bool `json:"found"`
	// Status is Temporal's execution status (Running, Completed, ...), NotFound or Unknown.
	Status    string     `json:"status"`
	RunID     string     `json:"runId,omitempty"`
	StartTime *time.Time `json:"startTime,omitempty"`
	// Waiting is what the running workflow waits for, from its status query.
	Waiting string `json:"waiting,omitempty"`
	// Checks counts the drain checks of the current hop, from its status query.
	Checks *int `json:"checks,omitempty"`
	// Error says, without Temporal's own words, why Status is Unknown or Waiting is missing.
	Error string `json:"error,omitempty"`
}

// newStateView copies st for an answer. The drain check's error text was scrubbed of
// broker credentials where it was made (the drain check activity, with the worker's own
// broker list): the API's list may hold no credentials at all.
func newStateView(st brokerstate.State) stateView {
	v := stateView{
		ActiveIndex:    st.ActiveIndex,
		PendingSwitch:  st.Pending,
		LastSwitch:     st.LastSwitch,
		LastDrainCheck: st.LastDrainCheck,
	}
	if !st.SeenUntil.IsZero() {
		t := st.SeenUntil
		v.SeenUntil = &t
	}
	return v
}

// brokerViews lists the configured brokers for GET /api/v1/broker.
func brokerViews(eps []broker.Endpoint, st brokerstate.State) []brokerView {
	onRoute := map[int]bool{}
	if st.Pending != nil {
		for _, h := range st.Pending.Route {
			onRoute[h.Index] = true
		}
	}
	indices := make([]int, 0, len(eps))
	for _, ep := range eps {
		indices = append(indices, ep.Index)
	}
	behind, ahead := st.Spares(indices)
	order := map[int]int{}
	for i, idx := range append(behind, ahead...) {
		order[idx] = i + 1
	}
	out := make([]brokerView, 0, len(eps))
	for _, ep := range eps {
		out = append(out, brokerView{
			LeftoverOrder: order[ep.Index],
			AheadOfActive: slices.Contains(ahead, ep.Index),
			Index:         ep.Index,
			Host:          ep.Host,
			Port:          ep.Port,
			Vhost:         ep.Vhost,
			Active:        ep.Index == st.ActiveIndex,
			OnRoute:       onRoute[ep.Index],
		})
	}
	return out
}
