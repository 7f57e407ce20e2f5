package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
)

// QueueWindowInput names the logical queue a window workflow reads.
type QueueWindowInput struct {
	Queue string
	// Version is the window code a run takes. It rides in the input, not in a GetVersion
	// marker: a window continues as new every few minutes, and a marker with its search
	// attribute would cost two Actions per run. Runs started before windows ended
	// themselves have 0.
	Version int `json:",omitempty"`
}

// windowEndsItself is the Version of windows whose consume activity ends itself.
const windowEndsItself = 1

// NewQueueWindowInput is the input that starts a queue's windows with the current code.
func NewQueueWindowInput(queue string) QueueWindowInput {
	return QueueWindowInput{Queue: queue, Version: windowEndsItself}
}

// retryForever keeps retrying with backoff: a window must outlive a broker or database
// outage, and an operator sees the last failure on the pending activity in the Web UI.
var retryForever = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    30 * time.Second,
}

// QueueWindow is one consumer window of a queue: resolve the active broker and take the
// leftovers from the other brokers, consume the active one until the window ends, then
// continue as new. The consume activity ends itself when Postgres announces a committed
// switch or the worker stops, so the window needs no signal and no cancellation to follow
// the producer, and its heartbeats only prove that the worker lives.
func QueueWindow(ctx workflow.Context, in QueueWindowInput) error {
	if in.Version < windowEndsItself {
		return signalledQueueWindow(ctx, in)
	}
	var a *activities.Window
	var w activities.PreparedWindow
	prepareCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         retryForever,
		Summary:             fmt.Sprintf("resolve the active broker and take the leftovers of %s", in.Queue),
	})
	if err := workflow.ExecuteActivity(prepareCtx, a.PrepareWindow, in.Queue).Get(ctx, &w); err != nil {
		return startOver(ctx, in, fmt.Errorf("prepare window %s: %w", in.Queue, err))
	}
	// A Leftover Drain that stopped at its cap may have left older messages behind;
	// consuming the active broker now would apply newer ones before them. The window ends
	// instead, and the next one drains on.
	if capReached(w.Drained, w.Plan.LeftoverDrainCap) {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Leftover Drain of `%s` stopped at its cap of %d: draining on before the active broker",
			in.Queue, w.Plan.LeftoverDrainCap)+unannouncedDetails(w.Drained))
		return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
	}
	// Likewise a spare the drain did not see empty (a round that waited too long).
	if len(w.Drained.Incomplete) > 0 {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Leftover Drain of `%s` did not see broker %v empty: draining on before the active broker",
			in.Queue, w.Drained.Incomplete)+unannouncedDetails(w.Drained))
		return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
	}

	plan := w.Plan
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Consuming `%s` on broker %s for %s, or until a switch is committed",
		in.Queue, plan.ActiveName, plan.Window)+unannouncedDetails(w.Drained))
	consumeCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// The window, then the batch in hand; an attempt that overruns is retried, and the
		// retry first checks that its broker is still active.
		StartToCloseTimeout: plan.Window + 2*time.Minute,
		HeartbeatTimeout:    plan.HeartbeatTimeout,
		WaitForCancellation: true, // the next window's exclusive consumer must not meet this one
		RetryPolicy:         retryForever,
		Summary:             fmt.Sprintf("consume %s on %s", in.Queue, plan.ActiveName),
	})
	err := workflow.ExecuteActivity(consumeCtx, a.Consume,
		activities.ConsumeInput{Queue: in.Queue, BrokerIndex: plan.ActiveIndex, Window: plan.Window}).Get(ctx, nil)
	// broker-changed signals only say in the history why a window ended early: the
	// activity learned it from Postgres.
	changed := workflow.GetSignalChannel(ctx, SignalBrokerChanged)
	for changed.ReceiveAsync(nil) {
	}
	if err != nil {
		return startOver(ctx, in, fmt.Errorf("consume %s: %w", in.Queue, err))
	}
	return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
}

// windowRestartPause is how long a window whose activity failed for good waits before it
// starts over, so that a fault that repeats does not spin.
const windowRestartPause = 30 * time.Second

// startOver ends a run whose activity failed for good (a non-retryable error, or a timeout
// after a cancellation) by starting the next window after a pause: a failed window
// workflow would leave its queue unread until someone restarted it. Only a cancelled
// workflow ends.
func startOver(ctx workflow.Context, in QueueWindowInput, err error) error {
	if ctx.Err() != nil {
		return temporal.NewCanceledError(err.Error())
	}
	workflow.GetLogger(ctx).Warn("window failed; starting over", "queue", in.Queue, "error", err)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Window of `%s` failed (%v); the next one starts in %s", in.Queue, err, windowRestartPause))
	if err := workflow.Sleep(ctx, windowRestartPause); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
}

// signalledQueueWindow is the window as it ran before windowEndsItself: a broker-changed
// signal cancelled its consume activity, which heartbeated every 500 ms to hear of it. It
// stays so that a run in flight across the upgrade replays; that run continues as new
// with the current code (replay compares no continue-as-new input).
func signalledQueueWindow(ctx workflow.Context, in QueueWindowInput) error {
	next := NewQueueWindowInput(in.Queue)
	var a *activities.Window
	changed := workflow.GetSignalChannel(ctx, SignalBrokerChanged)

	var plan activities.WindowPlan
	planCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         retryForever,
		Summary:             "resolve the active broker",
	})
	if err := workflow.ExecuteActivity(planCtx, a.PlanWindow).Get(ctx, &plan); err != nil {
		return fmt.Errorf("plan window %s: %w", in.Queue, err)
	}

	if len(plan.Leftover) > 0 {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Leftover Drain of `%s` on brokers %v", in.Queue, plan.Leftover))
		drainCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 10 * time.Minute,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy:         retryForever,
			Summary:             fmt.Sprintf("leftover drain %s", in.Queue),
		})
		drainIn := activities.LeftoverDrainInput{Queue: in.Queue, Brokers: plan.Leftover, Cap: plan.LeftoverDrainCap}
		var drained activities.LeftoverDrainResult
		if err := workflow.ExecuteActivity(drainCtx, a.LeftoverDrain, drainIn).Get(ctx, &drained); err != nil {
			return fmt.Errorf("leftover drain %s: %w", in.Queue, err)
		}
		// A Leftover Drain that stopped at its cap may have left older messages behind;
		// consuming the active broker now would apply newer ones before them. The window
		// ends instead, and the next one drains on.
		if capReached(drained, plan.LeftoverDrainCap) &&
			workflow.GetVersion(ctx, leftoverCapChange, workflow.DefaultVersion, 1) >= 1 {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("Leftover Drain of `%s` stopped at its cap of %d: draining on before the active broker",
				in.Queue, plan.LeftoverDrainCap))
			return workflow.NewContinueAsNewError(ctx, QueueWindow, next)
		}
	}

	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Consuming `%s` on broker %s for %s, or until a switch is committed",
		in.Queue, plan.ActiveName, plan.Window))
	consumeCtx, cancel := workflow.WithCancel(ctx)
	consumeCtx = workflow.WithActivityOptions(consumeCtx, workflow.ActivityOptions{
		StartToCloseTimeout: plan.Window + time.Minute,
		HeartbeatTimeout:    20 * time.Second,
		WaitForCancellation: true, // the next window's exclusive consumer must not meet this one
		RetryPolicy:         retryForever,
		Summary:             fmt.Sprintf("consume %s on %s", in.Queue, plan.ActiveName),
	})
	consumed := workflow.ExecuteActivity(consumeCtx, a.Consume,
		activities.ConsumeInput{Queue: in.Queue, BrokerIndex: plan.ActiveIndex, Window: plan.Window})

	sel := workflow.NewSelector(ctx)
	sel.AddFuture(consumed, func(workflow.Future) {})
	sel.AddReceive(changed, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		cancel()
	})
	sel.Select(ctx)
	if err := consumed.Get(ctx, nil); err != nil && !temporal.IsCanceledError(err) {
		return fmt.Errorf("consume %s: %w", in.Queue, err)
	}
	// Further signals ask for what the next run does anyway: resolve the broker again.
	for changed.ReceiveAsync(nil) {
	}
	return workflow.NewContinueAsNewError(ctx, QueueWindow, next)
}

// leftoverCapChange versions the end of a window whose Leftover Drain stopped at its cap,
// so that runs recorded before it replay as they ran.
const leftoverCapChange = "leftover-drain-cap-ends-window"

// capReached tells whether a Leftover Drain took as many messages as its cap allowed.
func capReached(res activities.LeftoverDrainResult, limit int) bool {
	taken := 0
	for _, n := range res.Taken {
		taken += n
	}
	return limit > 0 && taken >= limit
}

// unannouncedDetails says, for the Web UI, which spares hold messages the producer never
// announced and when they are read without its notification.
func unannouncedDetails(res activities.LeftoverDrainResult) string {
	var out strings.Builder
	for _, u := range res.Unannounced {
		if u.Read {
			fmt.Fprintf(&out, "\n\nBroker %d has messages the producer never announced: held since %s, read after UNNOTIFIED_BROKER_GRACE.",
				u.Broker, u.Since.UTC().Format(time.RFC3339))
			continue
		}
		fmt.Fprintf(&out, "\n\nBroker %d has messages the producer never announced: held since %s for its notification, read after %s once the active broker is empty.",
			u.Broker, u.Since.UTC().Format(time.RFC3339), u.ReadAfter.UTC().Format(time.RFC3339))
	}
	return out.String()
}
