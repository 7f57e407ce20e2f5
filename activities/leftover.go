package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/windowplan"
)

// LeftoverDrainInput names the queue, the brokers to visit and the cap for this cycle.
type LeftoverDrainInput struct {
	Queue   string
	Brokers []int
	// Ahead are visited after Brokers, and only when the queue and its -retry sibling are
	// empty on the Active broker: their messages are newer than its backlog.
	Ahead  []int `json:",omitempty"`
	Active int   `json:",omitempty"`
	Cap    int
}

// leftoverDrain takes what waits on the queue on the spares, as windowplan plans it, and
// applies it before the window starts: those messages are older than anything on the
// active broker. The batch in hand is given back unsettled once h is lost
// (broker.DrainOptions.Fence), and every batch's transaction checks that the attempt
// still holds the queue (h.Checks) and that the spare is still one (stateLoader.SpareCheck):
// a notification recorded since the drain decided how to read it ends the spare's visit.
func (a *Window) leftoverDrain(ctx context.Context, in LeftoverDrainInput, h *liveness.Held) (windowplan.LeftoverDrainResult, error) {
	plan, err := a.planDrain(ctx, in)
	if err != nil {
		return windowplan.LeftoverDrainResult{Taken: map[int]int{}}, fmt.Errorf("leftover drain %s: %w", in.Queue, err)
	}
	spares, res := plan.Order(len(plan.Ahead) > 0 && a.activeIdle(ctx, in.Queue, in.Active))
	budget := in.Cap
	for _, s := range spares {
		if budget <= 0 {
			break
		}
		st, err := a.State.Load(ctx)
		if err != nil {
			return res, fmt.Errorf("leftover drain %s: %w", in.Queue, err)
		} else if !windowplan.StillSpare(st, s.Index) {
			continue
		}
		got, err := a.drainSpare(ctx, in.Queue, s, budget, h)
		res.Taken[s.Index] = got.Taken
		budget -= got.Taken
		a.Metrics.LeftoverDrained(in.Queue, s.Index, got.Taken)
		if s.Reading == brokerstate.ReadUnannounced {
			a.Metrics.UnannouncedRead(in.Queue, s.Index, got.Taken)
		}
		step := windowplan.Next
		if err != nil {
			err = a.drainFailed(ctx, in.Queue, s.Index, got.Taken, err, &res)
		} else {
			step = s.After(got, budget)
			err = a.afterDrain(ctx, in.Queue, s, step, &res)
		}
		if err != nil || step == windowplan.Incomplete {
			return res, err
		}
	}
	return res, nil
}

// planDrain reads what the Leftover Drain's plan needs: the broker state, the queue's
// marks and Postgres' clock.
func (a *Window) planDrain(ctx context.Context, in LeftoverDrainInput) (windowplan.Drain, error) {
	st, err := a.State.Load(ctx)
	if err != nil {
		return windowplan.Drain{}, err
	}
	marks, reached, err := a.Marks.SpareMarks(ctx, in.Queue)
	if err != nil {
		return windowplan.Drain{}, err
	}
	now, err := a.Marks.Now(ctx)
	if err != nil {
		return windowplan.Drain{}, err
	}
	return windowplan.Plan(windowplan.Input{
		State: st, Behind: in.Brokers, Ahead: in.Ahead, Marks: marks, Reached: reached, Now: now, Grace: a.UnnotifiedGrace,
	}), nil
}

// drainSpare takes what spare s holds on queue, up to budget messages, as the plan reads
// it. The spare's topology first: a message rejected to {q}-retry on a broker where the
// producer never declared it would be dead-lettered into nothing.
func (a *Window) drainSpare(ctx context.Context, queue string, s windowplan.Spare, budget int, h *liveness.Held) (broker.DrainResult, error) {
	if err := a.Pool.DeclareTopology(ctx, s.Index, a.Topology.ForQueue(queue)); err != nil {
		return broker.DrainResult{}, err
	}
	opts := s.Options(queue, broker.DrainOptions{Max: budget, Batch: a.Prefetch, Fence: h.Lost()})
	checks := append(h.Checks(), a.State.SpareCheck(s.Index))
	return a.Pool.DrainWith(ctx, s.Index, queue, opts, a.Handlers.ForBroker(s.Index, checks...))
}

// afterDrain does what step, the plan's word after a drain of spare s, says: it records
// what the drain saw on the spare's mark and in res.
func (a *Window) afterDrain(ctx context.Context, queue string, s windowplan.Spare, step windowplan.Step, res *windowplan.LeftoverDrainResult) error {
	switch step {
	case windowplan.Next:
		return nil
	case windowplan.Incomplete:
		a.Logger.WarnContext(ctx, "leftover drain: the broker was not seen empty; the window ends before the active broker",
			"queue", queue, "broker", a.endpoint(s.Index))
		res.Incomplete = append(res.Incomplete, s.Index)
		return nil
	}
	// A mark is dated on Postgres' clock, as the producer's trail is.
	now, err := a.Marks.Now(ctx)
	switch {
	case err != nil:
	case step == windowplan.Kept:
		err = a.hold(ctx, queue, s, now, res)
	default:
		if s.Reading == brokerstate.ReadUnannounced {
			u := windowplan.Unannounced(s.Index, s.Mark.HeldSince, a.UnnotifiedGrace)
			u.Read = true
			res.Unannounced = append(res.Unannounced, u)
		}
		err = a.Marks.MarkSpare(ctx, s.Index, queue, s.EmptiedMark(now))
	}
	if err != nil {
		return fmt.Errorf("leftover drain %s: %w", queue, err)
	}
	return nil
}

// hold dates spare s's mark as holding, at now, messages the producer never announced,
// which wait for its notification. The date alone, and only when the mark has none: a
// drain check may have dated it since this drain read it, and its date is the earlier.
func (a *Window) hold(ctx context.Context, queue string, s windowplan.Spare, now time.Time, res *windowplan.LeftoverDrainResult) error {
	mark := s.HeldMark(now)
	since, err := a.Marks.HoldSpare(ctx, s.Index, queue, s.MarkedUnder, mark)
	if err != nil {
		return err
	}
	if !since.IsZero() {
		mark.HeldSince = since
	}
	a.Metrics.UnannouncedHeld(queue, s.Index)
	a.Logger.WarnContext(ctx, "leftover drain: the broker has messages the producer never announced; they wait for its notification",
		"queue", queue, "broker", a.endpoint(s.Index), "since", mark.HeldSince, "read_after", mark.HeldSince.Add(a.UnnotifiedGrace))
	res.Unannounced = append(res.Unannounced, windowplan.Unannounced(s.Index, mark.HeldSince, a.UnnotifiedGrace))
	return nil
}

// drainFailed reports a failed drain of spare index, which took taken messages, as
// windowplan.Failed classes it, and returns the error that fails the attempt, if any.
func (a *Window) drainFailed(ctx context.Context, queue string, index, taken int, err error, res *windowplan.LeftoverDrainResult) error {
	switch windowplan.Failed(err, ctx.Err() != nil) {
	case windowplan.NotSpare:
		a.Logger.InfoContext(ctx, "leftover drain: the broker is no longer a spare; its visit ends",
			"queue", queue, "broker", a.endpoint(index), "taken", taken, "why", err)
		return nil
	case windowplan.Unreachable:
		a.Logger.WarnContext(ctx, "leftover drain: broker unreachable, skipped",
			"queue", queue, "broker", a.endpoint(index), "error", err)
		a.Metrics.LeftoverUnreachable(queue, index)
		res.Unreachable = append(res.Unreachable, index)
		return nil
	case windowplan.Unverified:
		a.Metrics.LeftoverFailed(queue, index)
		if err := a.unverified(ctx, queue, index, err); err != nil {
			a.Pings.Fail(ctx, failureKind(err))
			return err
		}
		res.Skipped = append(res.Skipped, index)
		return nil
	}
	err = fmt.Errorf("leftover drain %s on %s: %w", queue, a.endpoint(index), err)
	// A batch refused because another attempt took the queue over is no failure to page
	// anyone for: the queue is read.
	if ctx.Err() == nil && !errors.Is(err, liveness.ErrQueueTaken) {
		a.Pings.Fail(ctx, failureKind(err))
	}
	return err
}

// unverified decides about a spare that answered but could not be drained: one seen
// holding nothing ready is skipped with a warning; otherwise the error says why the
// window must not go on past it, and the attempt is retried.
func (a *Window) unverified(ctx context.Context, queue string, index int, cause error) error {
	if errors.Is(cause, broker.ErrQueueBusy) {
		// A window that has not stopped yet (a worker cut off from Temporal) holds it; it
		// stops once its worker cannot renew its lease, within WORKER_LEASE_TTL (package
		// lease), and the retry of this attempt reads the queue then.
		return fmt.Errorf("leftover drain %s on %s: another consumer may hold messages that come back to its head: %w",
			queue, a.endpoint(index), cause)
	}
	// A consumer counts as holding messages: the drain's own, on a connection gone
	// half-open, holds its batch unacknowledged until the broker reaps it, and the batch
	// then comes back to the head.
	counts, err := a.Pool.QueueCounts(ctx, index, []string{queue})
	if err == nil && counts[queue].Idle() {
		a.Logger.WarnContext(ctx, "leftover drain: broker failed, and holds nothing ready or unacknowledged",
			"queue", queue, "broker", a.endpoint(index), "error", cause)
		return nil
	}
	held := "an unknown number of messages ready"
	if c := counts[queue]; err == nil {
		held = fmt.Sprintf("%d messages ready and %d consumers that may hold more unacknowledged", c.Ready, c.Consumers)
	}
	return fmt.Errorf("leftover drain %s on %s: failed with %s, which the active broker must not overtake: %w",
		queue, a.endpoint(index), held, cause)
}

// activeIdle tells whether queue and its -retry sibling were seen empty on the active
// broker, with no consumer that may hold deliveries unacknowledged (a window that has not
// stopped yet, a connection gone half-open): those come back to the head. Anything else,
// an unreachable broker included, holds the spares ahead of it.
func (a *Window) activeIdle(ctx context.Context, queue string, active int) bool {
	counts, err := a.Pool.QueueCounts(ctx, active, []string{queue, broker.RetryQueue(queue)})
	if err != nil {
		a.Logger.WarnContext(ctx, "leftover drain: the active broker's backlog is unknown; spares ahead of it wait",
			"queue", queue, "broker", a.endpoint(active), "error", err)
		return false
	}
	for _, c := range counts {
		if !c.Idle() {
			return false
		}
	}
	return true
}
