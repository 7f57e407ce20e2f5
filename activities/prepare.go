package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerswitch/brokerswitch/lease"
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
	var brokers []int
	for _, ep := range a.Pool.Endpoints() {
		brokers = append(brokers, ep.Index)
	}
	plan.Leftover, plan.Ahead = st.Spares(brokers)
	return plan, nil
}

// PreparedWindow is a window's plan and what its Leftover Drain took.
type PreparedWindow struct {
	Plan    WindowPlan
	Drained LeftoverDrainResult
	// Spares are what the consume activity watches, from what the drain saw.
	Spares []SpareWatch `json:",omitempty"`
}

// PrepareWindow resolves the active broker and runs the Leftover Drain in one activity:
// every activity is a billable Action. The drain is fenced as a consumer window is: a
// successor must not read a spare while this attempt still holds a batch of it.
func (a *Window) PrepareWindow(ctx context.Context, queue string) (PreparedWindow, error) {
	drainCtx, end := context.WithCancelCause(ctx)
	defer end(nil)
	g, err := a.fence().guard(ctx, lease.What{Queue: queue}, end)
	if err != nil {
		return PreparedWindow{}, fmt.Errorf("prepare window %s: %w", queue, err)
	}
	defer g.stop()
	plan, err := a.planWindow(drainCtx)
	if err != nil {
		return PreparedWindow{}, err
	}
	out := PreparedWindow{Plan: plan, Drained: LeftoverDrainResult{Taken: map[int]int{}}}
	if len(plan.Leftover)+len(plan.Ahead) == 0 {
		return out, nil
	}
	out.Drained, err = a.leftoverDrain(drainCtx, LeftoverDrainInput{
		Queue: queue, Brokers: plan.Leftover, Ahead: plan.Ahead, Active: plan.ActiveIndex, Cap: plan.LeftoverDrainCap,
	}, g)
	if err != nil {
		if errors.Is(context.Cause(drainCtx), errFenced) {
			return out, fmt.Errorf("prepare window %s: %w", queue, errFenced)
		}
		return out, err
	}
	out.Spares = spareWatches(plan, out.Drained)
	return out, nil
}

// spareWatches lists the spares a consumer window watches after its Leftover Drain: the
// spares behind the active broker the drain left with nothing to read, and those it holds
// back (ahead of the active broker, or holding messages the producer never announced).
func spareWatches(plan WindowPlan, res LeftoverDrainResult) []SpareWatch {
	held := map[int]time.Time{}
	for _, u := range res.Unannounced {
		if !u.Read {
			held[u.Broker] = u.ReadAfter
		}
	}
	var out []SpareWatch
	for _, idx := range plan.Leftover {
		if readAfter, ok := held[idx]; ok {
			out = append(out, SpareWatch{Broker: idx, ReadAfter: readAfter})
			continue
		}
		out = append(out, SpareWatch{Broker: idx, Behind: true})
	}
	for _, idx := range plan.Ahead {
		out = append(out, SpareWatch{Broker: idx, ReadAfter: held[idx]})
	}
	return out
}
