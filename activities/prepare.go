package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/windowplan"
)

// WindowPlan says which broker a window reads and which others its Leftover Drain visits.
type WindowPlan struct {
	ActiveIndex int
	ActiveName  string
	Window      time.Duration
	// Settle is how long the batch in hand at the window's end may take to be applied at
	// worst, one message at a time, each up to the statement timeout: the consume
	// activity's start-to-close timeout is Window + Settle, so that Temporal never cuts
	// off a batch that is still being applied.
	Settle           time.Duration
	LeftoverDrainCap int
	// Leftover are the other brokers, less those on a pending route (the producer is
	// filling those and they must not be read early), in the order the producer left them.
	Leftover []int
	// Ahead are spares the producer used after it left the active broker (a canceled
	// route, its current broker last): read only once the active broker's queue is empty.
	Ahead []int `json:",omitempty"`
}

// planWindow resolves the active broker from Postgres for one window.
func (a *Window) planWindow(ctx context.Context) (WindowPlan, error) {
	st, err := a.State.Load(ctx)
	if err != nil {
		return WindowPlan{}, fmt.Errorf("plan window: %w", err)
	}
	plan := WindowPlan{
		ActiveIndex:      st.ActiveIndex,
		ActiveName:       a.endpoint(st.ActiveIndex),
		Window:           a.WindowLength,
		Settle:           a.settle(),
		LeftoverDrainCap: a.LeftoverDrainCap,
	}
	plan.Leftover, plan.Ahead = st.Spares(indexes(a.Pool.Endpoints()))
	return plan, nil
}

// PreparedWindow is a window's plan and what its Leftover Drain took.
type PreparedWindow struct {
	Plan    WindowPlan
	Drained windowplan.LeftoverDrainResult
	// Spares are what the consume activity watches, from what the drain saw.
	Spares []windowplan.SpareWatch `json:",omitempty"`
}

// PrepareWindow resolves the active broker and runs the Leftover Drain in one activity:
// every activity is a billable Action. The drain is fenced as a consumer window is: a
// successor must not read a spare while this attempt still holds a batch of it.
func (a *Window) PrepareWindow(ctx context.Context, queue string) (PreparedWindow, error) {
	drainCtx, h, err := a.Leases.Hold(ctx, liveness.What{Queue: queue})
	if err != nil {
		return PreparedWindow{}, fmt.Errorf("prepare window %s: %w", queue, err)
	}
	defer h.Release()
	plan, err := a.planWindow(drainCtx)
	if err != nil {
		return PreparedWindow{}, err
	}
	out := PreparedWindow{Plan: plan, Drained: windowplan.LeftoverDrainResult{Taken: map[int]int{}}}
	if len(plan.Leftover)+len(plan.Ahead) == 0 {
		return out, nil
	}
	out.Drained, err = a.leftoverDrain(drainCtx, leftoverDrainInput{
		Queue: queue, Brokers: plan.Leftover, Ahead: plan.Ahead, Active: plan.ActiveIndex, Cap: plan.LeftoverDrainCap,
	}, h)
	if err != nil {
		if cause := context.Cause(drainCtx); errors.Is(cause, liveness.ErrLost) {
			return out, fmt.Errorf("prepare window %s: %w", queue, cause)
		}
		return out, err
	}
	out.Spares = windowplan.Watches(plan.Leftover, plan.Ahead, out.Drained)
	return out, nil
}
