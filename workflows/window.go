package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
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

// QueueWindow is one consumer window of a queue: resolve the active broker, take the
// leftovers from the other brokers, consume the active one until the window ends or the
// broker changes, then continue as new.
func QueueWindow(ctx workflow.Context, in QueueWindowInput) error {
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
			return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
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
	return workflow.NewContinueAsNewError(ctx, QueueWindow, in)
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
