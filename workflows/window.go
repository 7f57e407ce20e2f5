package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/windowplan"
)

// QueueWindowInput names the logical queue a window workflow reads.
type QueueWindowInput struct {
	Queue string
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
// switch, when a spare it watches has stragglers, or when the worker stops, so the window
// takes no signal and no cancellation to follow the producer, and costs Temporal nothing
// while it consumes.
func QueueWindow(ctx workflow.Context, in QueueWindowInput) error {
	var a *activities.Window
	var w activities.PreparedWindow
	// No heartbeats: a worker's liveness is its lease in Postgres, and a peer fails the
	// attempt of a worker that died (see package liveness). The attempt fences itself before
	// this timeout.
	prepareCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy:         retryForever,
		Summary:             fmt.Sprintf("resolve the active broker and take the leftovers of %s", in.Queue),
	})
	if err := workflow.ExecuteActivity(prepareCtx, a.PrepareWindow, in.Queue).Get(ctx, &w); err != nil {
		return startOver(ctx, in, fmt.Errorf("prepare window %s: %w", in.Queue, err))
	}
	// A Leftover Drain that stopped at its cap, or did not see a spare empty, may have left
	// older messages behind; consuming the active broker now would apply newer ones before
	// them. The window ends instead, and the next one drains on.
	if why := w.Drained.Unfinished(w.Plan.LeftoverDrainCap); why != "" {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Leftover Drain of `%s` %s: draining on before the active broker",
			in.Queue, why)+unannouncedDetails(w.Drained))
		return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
	}

	plan := w.Plan
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Consuming `%s` on broker %s since %s, for up to %s: until a switch is committed or a spare has stragglers",
		in.Queue, plan.ActiveName, workflow.Now(ctx).UTC().Format(time.RFC3339), plan.Window)+unannouncedDetails(w.Drained))
	consumeCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// The window, then the batch in hand at its end, however slowly it is applied; an
		// attempt that overruns is retried, and the retry first checks that its broker is
		// still active. No heartbeats, as above.
		StartToCloseTimeout: plan.Window + settleOf(plan),
		WaitForCancellation: true, // the next window's exclusive consumer must not meet this one
		RetryPolicy:         retryForever,
		Summary:             fmt.Sprintf("consume %s on %s", in.Queue, plan.ActiveName),
	})
	err := workflow.ExecuteActivity(consumeCtx, a.Consume,
		activities.ConsumeInput{Queue: in.Queue, BrokerIndex: plan.ActiveIndex, Window: plan.Window, Spares: w.Spares}).Get(ctx, nil)
	if err != nil {
		return startOver(ctx, in, fmt.Errorf("consume %s: %w", in.Queue, err))
	}
	return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
}

// settleOf is the plan's allowance for the batch in hand; a plan from a worker that
// predates it allowed two minutes.
func settleOf(plan activities.WindowPlan) time.Duration {
	if plan.Settle > 0 {
		return plan.Settle
	}
	return 2 * time.Minute
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

// unannouncedDetails says, for the Web UI, which spares hold messages the producer never
// announced and when they are read without its notification.
func unannouncedDetails(res windowplan.LeftoverDrainResult) string {
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
