package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
)

// idleFallback is how often an idle BrokerSwitch workflow re-reads the broker state
// although Postgres announced nothing: a rare fallback. The watch's answer can be lost only
// with Temporal out of reach of its worker, whose lease then expires, and a peer fails the
// watch: the workflow reads the state within seconds of the lease's end anyway.
const idleFallback = 6 * time.Hour

const idleWhy = "Nothing pending: waiting for a pending-switch, force-switch or cancel-pending-switch order"

// idle waits, with nothing pending, for an order or for a change of the broker state that
// no order brought. Postgres is the source of truth: a switch recorded whose signal was
// lost is found here. The watch and its fallback timer outlive an order that interrupts
// the wait, and the next wait takes them up again: an idle workflow costs a watch, a
// timer and a read per change or per idleFallback.
func (r *switchRun) idle(ctx workflow.Context) error {
	var a *activities.Switch
	if r.watching == nil {
		r.watching = r.watch(ctx)
	}
	for {
		r.show(ctx, idleWhy)
		if err := workflow.Await(ctx, func() bool { return r.orders.waiting() || r.watching.ready() }); err != nil {
			return nil // cancelled: the loop ends
		}
		if r.orders.waiting() {
			return nil
		}
		if r.watching.sawNothing(ctx) {
			continue // the timer decides
		}
		r.watching.stop()
		watched := r.watching.activeIndex
		r.watching = nil
		if r.lean && watched != r.status.State.ActiveIndex {
			// The change it saw is one this workflow committed (or a step of it): the state
			// in hand is what that commit read. The next watch starts from it, and sees at
			// once whatever changed since.
			return nil
		}
		return r.runLocal(ctx, "read broker state", a.LoadState, nil, &r.status.State)
	}
}

// idleWatch is an idle workflow's watch of Postgres and its fallback timer.
type idleWatch struct {
	watch       workflow.Future // WaitForChange: true when Postgres announced a change
	watchDone   bool
	timer       workflow.Future
	cancelTimer workflow.CancelFunc
	// activeIndex is the active broker the watch was started for.
	activeIndex int
}

func (r *switchRun) watch(ctx workflow.Context) *idleWatch {
	var a *activities.Switch
	watchCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: idleFallback + time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             "wait for Postgres to announce a change of the broker state",
	})
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	return &idleWatch{
		watch: workflow.ExecuteActivity(watchCtx, a.WaitForChange,
			activities.WaitForChangeInput{ActiveIndex: r.status.State.ActiveIndex}),
		timer:       workflow.NewTimerWithOptions(timerCtx, idleFallback, workflow.TimerOptions{Summary: "re-read the broker state"}),
		cancelTimer: cancelTimer,
		activeIndex: r.status.State.ActiveIndex,
	}
}

// ready tells whether the timer fired or the watch answered and has not been heard yet.
func (i *idleWatch) ready() bool {
	return i.timer.IsReady() || (!i.watchDone && i.watch.IsReady())
}

// sawNothing tells, once, that the watch answered "no change" before the timer fired; a
// failed watch counts as a change, so that the state is read again.
func (i *idleWatch) sawNothing(ctx workflow.Context) bool {
	if i.watchDone || i.timer.IsReady() || !i.watch.IsReady() {
		return false
	}
	i.watchDone = true
	var changed bool
	err := i.watch.Get(ctx, &changed)
	return err == nil && !changed
}

func (i *idleWatch) stop() {
	if !i.timer.IsReady() {
		i.cancelTimer()
	}
}
