package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/brokerstate"
)

// Order is one thing the BrokerSwitch workflow is told to do: record a producer's
// notification, force a switch or cancel the Pending Switch. It is the same whichever
// door it came through, a signal (the API's notification, an operator's CLI or tctl) or
// a Workflow Update (the API's force and cancel), and it keeps its place in one queue.
type Order struct {
	// Op is what the order does, named after the signal that carries it:
	// SignalPendingSwitch, SignalForceSwitch or SignalCancelPendingSwitch. A force or
	// cancel that came as a Workflow Update is named by its signal too, so that both doors
	// lead to the same apply. Its JSON name stays Kind: orders travel in a continue-as-new
	// input, and a run of the previous build must read them.
	Op           string                              `json:"Kind"`
	Notification brokerstate.Notification            `json:",omitzero"`
	Force        activities.ForceSwitchInput         `json:",omitzero"`
	Cancel       activities.CancelPendingSwitchInput `json:",omitzero"`
	// Invalid says why a signal's input could not be read; such an order is skipped.
	Invalid string `json:",omitempty"`

	// reply is set for an order that came as a Workflow Update: its handler waits for it.
	// Updates are answered before a continue-as-new, so it never needs to travel.
	reply *OrderResult
}

// OrderResult is the workflow's answer to a force or cancel sent as a Workflow Update.
type OrderResult struct {
	// Outcome is OrderCommitted, OrderAlreadyThere or OrderRefused.
	Outcome string
	// Reason says why an order was refused.
	Reason string `json:",omitempty"`
	// State is the broker state after the order.
	State brokerstate.State
	done  bool
}

// orderSignals are the signals that carry orders.
var orderSignals = []string{SignalPendingSwitch, SignalForceSwitch, SignalCancelPendingSwitch}

// maxHeldNotifications is the most pending-switch orders the workflow holds unhandled.
// One more is dropped safely: the API records a notification in Postgres before it
// signals, and each held one re-reads the state, so the first handled after the drop
// sees the dropped one too. A flood then costs at most this many activities, not one each.
const maxHeldNotifications = 10

// orderQueue holds a run's orders in the order they arrived.
type orderQueue struct{ orders []Order }

// push queues an order, unless it is a notification beyond maxHeldNotifications.
func (q *orderQueue) push(o Order) {
	if o.Op == SignalPendingSwitch {
		held := 0
		for _, h := range q.orders {
			if h.Op == SignalPendingSwitch {
				held++
			}
		}
		if held >= maxHeldNotifications {
			return
		}
	}
	q.orders = append(q.orders, o)
}

// pop takes the oldest order.
func (q *orderQueue) pop() (Order, bool) {
	if len(q.orders) == 0 {
		return Order{}, false
	}
	o := q.orders[0]
	q.orders = q.orders[1:]
	return o, true
}

func (q *orderQueue) waiting() bool { return len(q.orders) > 0 }

// OrderIntake is the worker interceptor that takes the BrokerSwitch workflow's order
// signals into its queue as they arrive. The SDK would deliver each signal name to a
// channel of its own, which loses the order across names: a force sent after a
// notification could be handled before it. The interceptor sees every signal in history
// order, on replay too. The BrokerSwitch workflow refuses to run without it; worker.Options
// registers it.
type OrderIntake struct {
	interceptor.WorkerInterceptorBase
}

// InterceptWorkflow gives each workflow run its own queue; only BrokerSwitch reads it.
func (*OrderIntake) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &intakeInbound{queue: &orderQueue{}}
	i.Next = next
	return i
}

type queueKey struct{}

type intakeInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	queue *orderQueue
}

// ExecuteWorkflow hands the queue to the workflow through its context.
func (i *intakeInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return i.Next.ExecuteWorkflow(workflow.WithValue(ctx, queueKey{}, i.queue), in)
}

// HandleSignal queues an order signal; other signals go to their channels as usual.
func (i *intakeInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	if !slices.Contains(orderSignals, in.SignalName) {
		return i.Next.HandleSignal(ctx, in)
	}
	// Raw JSON first: an operator's malformed input must be reported and skipped, not
	// fail the workflow task on a value it cannot decode.
	var raw json.RawMessage
	if err := converter.GetDefaultDataConverter().FromPayloads(in.Arg, &raw); err != nil {
		i.queue.push(Order{Op: in.SignalName, Invalid: err.Error()})
		return nil
	}
	i.queue.push(decodeOrder(in.SignalName, raw))
	return nil
}

// queueOf is the run's order queue, nil when the worker has no OrderIntake.
func queueOf(ctx workflow.Context) *orderQueue {
	q, _ := ctx.Value(queueKey{}).(*orderQueue)
	return q
}

// decodeOrder reads the JSON input of the signal named signal into its order.
func decodeOrder(signal string, raw json.RawMessage) Order {
	o := Order{Op: signal}
	var err error
	switch signal {
	case SignalPendingSwitch:
		err = json.Unmarshal(raw, &o.Notification)
	case SignalForceSwitch:
		err = json.Unmarshal(raw, &o.Force)
	case SignalCancelPendingSwitch:
		if len(raw) > 0 && string(raw) != "null" { // the plain CLI signal has no input
			err = json.Unmarshal(raw, &o.Cancel)
		}
	}
	if err != nil {
		o.Invalid = err.Error()
	}
	return o
}

// acceptUpdates registers the force and cancel updates. An order joins the queue behind
// what arrived before it, and its handler waits for the main loop's answer.
func (r *switchRun) acceptUpdates(ctx workflow.Context) error {
	order := func(ctx workflow.Context, o Order) (OrderResult, error) {
		reply := &OrderResult{}
		o.reply = reply
		r.orders.push(o)
		if err := workflow.Await(ctx, func() bool { return reply.done }); err != nil {
			return OrderResult{}, fmt.Errorf("wait for the order to be applied: %w", err)
		}
		return *reply, nil
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateForceSwitch,
		func(ctx workflow.Context, in activities.ForceSwitchInput) (OrderResult, error) {
			return order(ctx, Order{Op: SignalForceSwitch, Force: in})
		},
		workflow.UpdateHandlerOptions{Validator: func(in activities.ForceSwitchInput) error {
			if in.Index < 0 {
				return fmt.Errorf("broker index %d is negative", in.Index)
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("register %s update: %w", UpdateForceSwitch, err)
	}
	err = workflow.SetUpdateHandler(ctx, UpdateCancelPendingSwitch,
		func(ctx workflow.Context, in activities.CancelPendingSwitchInput) (OrderResult, error) {
			return order(ctx, Order{Op: SignalCancelPendingSwitch, Cancel: in})
		})
	if err != nil {
		return fmt.Errorf("register %s update: %w", UpdateCancelPendingSwitch, err)
	}
	return nil
}

// apply carries out one order. A refused one (an unknown broker, a notification too far
// ahead) is answered and logged, and does not end the workflow.
func (r *switchRun) apply(ctx workflow.Context, o Order) error {
	var a *activities.Switch
	if o.Invalid != "" {
		workflow.GetLogger(ctx).Warn("order ignored: its input is not valid", "order", o.Op, "error", o.Invalid)
		return nil
	}
	before := r.status.State
	// Results land in next, so that a refused order leaves the cached state as it was.
	var next brokerstate.State
	var err error
	switch o.Op {
	case SignalPendingSwitch:
		var res activities.NotificationResult
		err = r.runLocal(ctx, fmt.Sprintf("record notification for %s vhost %s", o.Notification.Host, o.Notification.Vhost),
			a.RecordNotification, o.Notification, &res)
		next = res.State
	case SignalForceSwitch:
		err = r.runLocal(ctx, fmt.Sprintf("force switch to broker %d", o.Force.Index), a.ForceSwitch, o.Force, &next)
	case SignalCancelPendingSwitch:
		err = r.runLocal(ctx, "cancel the pending switch", a.CancelPendingSwitch, o.Cancel, &next)
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() {
		workflow.GetLogger(ctx).Warn("order refused", "order", o.Op, "error", err)
		o.answer(OrderResult{Outcome: OrderRefused, Reason: appErr.Message(), State: r.status.State})
		return nil
	}
	if err != nil {
		return err
	}
	r.status.State = next
	r.status.Checks = 0
	o.answer(o.outcome(before, next))
	r.showState(ctx)
	return nil
}

// answer ends the wait of an order's update handler, if the order came as one.
func (o Order) answer(r OrderResult) {
	if o.reply != nil {
		r.done = true
		*o.reply = r
	}
}

// outcome says what an applied order did, from the state before and after it.
func (o Order) outcome(before, after brokerstate.State) OrderResult {
	r := OrderResult{Outcome: OrderCommitted, State: after}
	switch o.Op {
	case SignalForceSwitch:
		if before.ActiveIndex == o.Force.Index && before.Pending == nil {
			r.Outcome = OrderAlreadyThere
		}
	case SignalCancelPendingSwitch:
		switch {
		// A cancel that names a switch was given because the API read one in Postgres;
		// the workflow's own reading may not show it yet (the notification's signal can
		// reach the workflow after the update), so only an unnamed cancel is judged by it.
		case before.Pending == nil && o.Cancel.SwitchedAt.IsZero():
			r.Outcome = OrderAlreadyThere
		case after.Pending != nil:
			// The switch the cancel named is gone; the producer's later one is not undone.
			r.Reason = "a notification recorded after the cancel was asked for is kept"
		}
	}
	return r
}
