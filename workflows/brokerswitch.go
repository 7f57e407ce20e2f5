package workflows

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/brokerstate"
)

// BrokerSwitchInput is what a BrokerSwitch run hands to the next one when it continues
// as new; a first run starts from the zero value. Its settings come from the worker.
type BrokerSwitchInput struct {
	// Orders were received but not yet applied by the previous run.
	Orders []Order `json:",omitempty"`
	// Checks counts the drain checks of the current hop so far.
	Checks int `json:",omitempty"`
}

// Status is what the status query answers.
type Status struct {
	State     brokerstate.State
	Checks    int
	LastCheck *brokerstate.DrainCheck
	Waiting   string
}

// BrokerSwitch follows the producer from broker to broker. A producer's notification
// records a Pending Switch; while one is pending the workflow checks the active broker
// until its queues and their -retry siblings are empty, then commits the next hop. The
// windows learn of the commit from Postgres. An operator's force moves at once and drops
// the Pending Switch, a cancel drops it without moving. Orders are applied one at a time,
// in the order they arrived; with nothing pending the workflow waits for one.
func BrokerSwitch(ctx workflow.Context, in BrokerSwitchInput) error {
	r, err := newSwitchRun(ctx, in)
	if err != nil {
		return err
	}
	return r.run(ctx)
}

type switchRun struct {
	status Status
	orders *orderQueue
	// drainCheckInterval is the longest pause between drain checks (DRAIN_CHECK_INTERVAL),
	// as the worker's Settings report it at the start of the run.
	drainCheckInterval time.Duration
	// watching is the running watch of an idle workflow, if any.
	watching *idleWatch
	// shown is the memo last shown in this run, nil before the first.
	shown *memo
	// lean says this run spends no Action a switch does not need: an unchanged memo is
	// not written again, and a watch that saw the change the workflow made itself is not
	// followed by a read of the state.
	lean bool
	// holds says a drained broker's hop waits while spares hold messages of unknown place
	// (brokerstate.DrainCheck.HeldBy).
	holds bool
}

// memo is what the Web UI's memo of the BrokerSwitch workflow shows.
type memo struct {
	ActiveIndex   int
	PendingSwitch *brokerstate.PendingSwitch
}

func newSwitchRun(ctx workflow.Context, in BrokerSwitchInput) (*switchRun, error) {
	orders := queueOf(ctx)
	if orders == nil {
		return nil, temporal.NewNonRetryableApplicationError(
			"the worker has no workflows.OrderIntake interceptor: build its options with worker.Options", "NoOrderIntake", nil)
	}
	// What the last run left comes before what reached this one.
	orders.orders = append(in.Orders, orders.orders...)
	r := &switchRun{orders: orders, status: Status{Checks: in.Checks}}
	// Remove once no run started before release 1.1 is open: before it, every order and
	// commit wrote the memo, unchanged or not, and every change a watch saw was read
	// again, so a switch cost a memo write and a read more.
	r.lean = workflow.GetVersion(ctx, "lean-switch", workflow.DefaultVersion, 1) == 1
	// Remove once no run started before release 1.2 is open: before it, a drained broker's
	// hop committed whatever the spares held.
	r.holds = workflow.GetVersion(ctx, "commit-hold", workflow.DefaultVersion, 1) == 1
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (Status, error) { return r.status, nil }); err != nil {
		return nil, fmt.Errorf("register status query: %w", err)
	}
	if err := r.acceptUpdates(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *switchRun) run(ctx workflow.Context) error {
	var a *activities.Switch
	if err := r.runLocal(ctx, "read broker state", a.LoadState, nil, &r.status.State); err != nil {
		return err
	}
	// A changed DRAIN_CHECK_INTERVAL takes effect at the next run.
	var settings activities.SwitchSettings
	if err := r.runLocal(ctx, "read the worker's settings", a.Settings, nil, &settings); err != nil {
		return err
	}
	r.drainCheckInterval = settings.DrainCheckInterval
	r.showState(ctx)
	for ctx.Err() == nil {
		if err := r.applyOrders(ctx); err != nil {
			return err
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return r.continueAsNew(ctx)
		}
		pending := r.status.State.Pending
		if pending == nil {
			if err := r.idle(ctx); err != nil {
				return err
			}
			continue
		}
		if err := r.checkAndCommit(ctx, pending.Next()); err != nil {
			return err
		}
	}
	return temporal.NewCanceledError("broker switch workflow canceled")
}

// applyOrders applies the orders received so far, in arrival order.
func (r *switchRun) applyOrders(ctx workflow.Context) error {
	for o, ok := r.orders.pop(); ok; o, ok = r.orders.pop() {
		if err := r.apply(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// checkAndCommit runs one drain check of the active broker and commits the hop when it is
// empty; otherwise it waits for the next check or an order.
func (r *switchRun) checkAndCommit(ctx workflow.Context, hop brokerstate.Hop) error {
	var a *activities.Switch
	active := r.status.State.ActiveIndex
	var check brokerstate.DrainCheck
	if err := r.runLocal(ctx, fmt.Sprintf("drain check of broker %d", active), a.DrainCheck,
		activities.DrainCheckInput{BrokerIndex: active}, &check); err != nil {
		return err
	}
	r.status.Checks++
	r.status.LastCheck = &check
	if !check.Drained() {
		next := r.nextCheckIn()
		why := fmt.Sprintf("Switch %d → %d waits: broker %d is not drained yet %v; next check in %s",
			active, hop.Index, active, check.Counts, next)
		if !check.Reachable {
			why = fmt.Sprintf("Switch %d → %d waits: broker %d is unreachable (%s); it will be checked again in %s",
				active, hop.Index, active, check.Error, next)
			workflow.GetLogger(ctx).Warn("active broker unreachable, switch waits", "broker", active, "error", check.Error)
		}
		return r.wait(ctx, why, next)
	}
	if r.holds && len(check.HeldBy) > 0 {
		next := r.nextCheckIn()
		return r.wait(ctx, heldWhy(active, hop.Index, check.HeldBy, next), next)
	}
	in := activities.CommitHopInput{From: active, Hop: hop, Checks: r.status.Checks}
	if err := r.runLocal(ctx, fmt.Sprintf("commit switch %d → %d", active, hop.Index), a.CommitHop, in, &r.status.State); err != nil {
		return err
	}
	r.status.Checks = 0
	r.showState(ctx)
	return nil
}

// heldWhy says why a drained broker's hop waits: the spares' queues that hold messages
// whose place in the producer's order is unknown, and until when at most.
func heldWhy(active, next int, held []brokerstate.Held, recheck time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Switch %d → %d waits: broker %d is drained, but ", active, next, active)
	for i, h := range held {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "broker %d holds messages on %s whose place in the producer's order is unknown (since %s; held until %s at most, UNNOTIFIED_BROKER_GRACE)",
			h.Broker, h.Queue, h.Since.UTC().Format(time.RFC3339), h.Until.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, ": a late notification would put it on the route before broker %d; next check in %s", next, recheck)
	return b.String()
}

// firstRecheck is the pause after a hop's first failed drain check. A backlog usually
// clears within seconds of a rotation, so the pause doubles from here up to the drain
// check interval instead of waiting a whole interval after every check.
const firstRecheck = 250 * time.Millisecond

// nextCheckIn is the pause before the next drain check of the current hop.
func (r *switchRun) nextCheckIn() time.Duration {
	d := firstRecheck
	for i := 1; i < r.status.Checks && d < r.drainCheckInterval; i++ {
		d *= 2
	}
	return min(d, r.drainCheckInterval)
}

// showState shows the broker state in the Web UI's memo.
func (r *switchRun) showState(ctx workflow.Context) {
	next := memo{ActiveIndex: r.status.State.ActiveIndex, PendingSwitch: r.status.State.Pending}
	if r.lean && r.shown != nil && reflect.DeepEqual(*r.shown, next) {
		return
	}
	r.shown = &next
	fields := map[string]any{"activeIndex": next.ActiveIndex, "pendingSwitch": next.PendingSwitch}
	if err := workflow.UpsertMemo(ctx, fields); err != nil {
		workflow.GetLogger(ctx).Warn("memo not updated", "error", err)
	}
}

// show says, in the status query and the Web UI, why the workflow waits.
func (r *switchRun) show(ctx workflow.Context, why string) {
	r.status.Waiting = why
	workflow.SetCurrentDetails(ctx, why)
}

// wait shows why the workflow waits, then blocks until an order arrives or d passes.
func (r *switchRun) wait(ctx workflow.Context, why string, d time.Duration) error {
	r.show(ctx, why)
	_, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: d, TimerOptions: workflow.TimerOptions{Summary: "next check"}},
		r.orders.waiting)
	if err != nil && !temporal.IsCanceledError(err) {
		return fmt.Errorf("wait: %w", err)
	}
	return nil // a cancellation ends the loop
}

// continueAsNew hands the state and the orders not yet applied to a fresh run, so that a
// long -retry tail does not grow one history without bound. Orders that came as updates
// are applied and answered first: an update cannot travel to the next run.
func (r *switchRun) continueAsNew(ctx workflow.Context) error {
	for !workflow.AllHandlersFinished(ctx) {
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) || r.orders.waiting() }); err != nil {
			return fmt.Errorf("wait for update handlers: %w", err)
		}
		if err := r.applyOrders(ctx); err != nil {
			return err
		}
	}
	return workflow.NewContinueAsNewError(ctx, BrokerSwitch, BrokerSwitchInput{Orders: r.orders.orders, Checks: r.status.Checks})
}

// runLocal runs one state activity of the BrokerSwitch workflow, named in the Web UI by
// summary, as a local activity: each is a short read or transaction, run inside the
// workflow task that needs it, so that an order is accepted and answered in one workflow
// task. As activity tasks, an order would cost a chain of round trips through Temporal,
// each waiting for a poller of a busy worker: a cancel that arrives while a notification
// is being recorded would be answered four workflow tasks and three activity tasks later,
// on a loaded machine past the API's 45 s. The idle watch (WaitForChange), which runs for
// up to an hour, stays an activity task.
//
// activity is a method of a nil *activities.Switch, as everywhere in this package: it
// only names the activity, and the worker runs the one it registered.
func (r *switchRun) runLocal(ctx workflow.Context, summary string, activity any, arg any, result any) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         retryForever,
		Summary:             summary,
	})
	args := []any{}
	if arg != nil {
		args = append(args, arg)
	}
	if err := workflow.ExecuteLocalActivity(lctx, activity, args...).Get(ctx, result); err != nil {
		return fmt.Errorf("%s: %w", summary, err)
	}
	return nil
}
