package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/lease"
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

// LeftoverDrainResult says how many messages each broker gave and which could not be reached.
type LeftoverDrainResult struct {
	Taken       map[int]int
	Unreachable []int
	// Skipped are spares that failed otherwise (a refused declaration, a closed channel)
	// and were seen holding nothing ready: nothing to read past.
	Skipped []int `json:",omitempty"`
	// Held are spares ahead of the active broker left for a later window, because the
	// active broker's queue was not seen empty.
	Held []int `json:",omitempty"`
	// Incomplete is the spare whose drain ended without seeing its queue empty (a round
	// that waited too long for a message): the window ends as at the cap, so that neither
	// the active broker nor the next spare overtakes what it still holds.
	Incomplete []int `json:",omitempty"`
	// Unannounced are spares holding messages the producer never announced.
	Unannounced []UnannouncedSpare `json:",omitempty"`
}

// UnannouncedSpare is a spare holding messages the producer never announced: they may be
// its future, so they wait for the notification that puts the broker on the route.
type UnannouncedSpare struct {
	Broker int
	// Since is when a Leftover Drain first found them; ReadAfter when they are read
	// without a notification (Since + UNNOTIFIED_BROKER_GRACE), once the active broker's
	// queue is empty.
	Since, ReadAfter time.Time
	// Read is true once the grace passed and this window read them.
	Read bool `json:",omitempty"`
}

// spareVisit is one spare as this window reads it.
type spareVisit struct {
	index   int
	reading brokerstate.SpareReading
	mark    brokerstate.SpareMark
	// settled is set when the mark already says the queue was seen empty after the
	// producer left (brokerstate.State.EmptyMarkSettled).
	settled bool
	// read is the visit the stored mark was made under, which mark may have left behind
	// (brokerstate.State.CurrentMark).
	read time.Time
}

// leftoverDrain takes what waits on the queue on the other brokers (see broker.Pool.DrainWith), and
// applies it before the window starts: those messages are older than anything on the
// active broker. What may be the producer's future (brokerstate.ReadSpare) waits for its
// notification. A broker that cannot be reached is a warning, never a failed window; one
// that fails otherwise while it holds messages fails the attempt, so that the active
// broker is not read past it. The batch in hand is given back unsettled once gone closes
// (broker.DrainOptions.Fence), and every batch's transaction checks that the attempt still
// holds the queue (g.checks) and that the spare is still one (stateLoader.SpareCheck): a
// notification recorded since the drain decided how to read it ends the spare's visit.
func (a *Window) leftoverDrain(ctx context.Context, in LeftoverDrainInput, g guarded) (LeftoverDrainResult, error) {
	res := LeftoverDrainResult{Taken: map[int]int{}}
	behind, unannounced, err := a.readings(ctx, in)
	if err != nil {
		return res, fmt.Errorf("leftover drain %s: %w", in.Queue, err)
	}
	visits := behind
	ahead := append(spareVisits(in.Ahead), unannounced...)
	if len(ahead) > 0 {
		if a.activeEmpty(ctx, in.Queue, in.Active) {
			visits = append(slices.Clip(visits), ahead...)
		} else {
			for _, v := range ahead {
				res.Held = append(res.Held, v.index)
				if v.reading == brokerstate.ReadUnannounced {
					res.Unannounced = append(res.Unannounced, a.unannounced(v))
				}
			}
		}
	}
	budget := in.Cap
	for _, v := range visits {
		if budget <= 0 {
			break
		}
		idx := v.index
		// The plan may be older than a notification or a switch recorded since: a broker
		// now on a pending route is being filled by the producer, and one that became
		// active is read after the broker it replaced; neither may be read early.
		if skip, err := a.noLongerLeftover(ctx, idx); err != nil {
			return res, fmt.Errorf("leftover drain %s: %w", in.Queue, err)
		} else if skip {
			continue
		}
		// The spare's topology first: a message rejected to {q}-retry on a broker where
		// the producer never declared it would be dead-lettered into nothing.
		err := a.Pool.DeclareTopology(ctx, idx, a.Topology.ForQueue(in.Queue))
		var got broker.DrainResult
		if err == nil {
			opts := broker.DrainOptions{Max: budget, Batch: a.Prefetch, Fence: g.gone}
			if v.reading == brokerstate.ReadReturned {
				opts.Keep = func(d amqp.Delivery) bool { return !broker.Returned(d, in.Queue) }
			}
			checks := append(slices.Clip(g.checks), a.State.SpareCheck(idx))
			got, err = a.Pool.DrainWith(ctx, idx, in.Queue, opts, a.Handlers.ForBroker(idx, checks...))
		}
		res.Taken[idx] = got.Taken
		budget -= got.Taken
		a.Metrics.LeftoverDrained(in.Queue, idx, got.Taken)
		if v.reading == brokerstate.ReadUnannounced {
			a.Metrics.UnannouncedRead(in.Queue, idx, got.Taken)
		}
		switch {
		case err == nil:
			if stop, err := a.afterDrain(ctx, in.Queue, v, got, budget, &res); err != nil || stop {
				return res, err
			}
		case errors.Is(err, brokerstate.ErrNotSpare):
			// A notification or a switch recorded since this visit began: what the broker
			// holds now is read as its new place says, by a later window.
			a.Logger.InfoContext(ctx, "leftover drain: the broker is no longer a spare; its visit ends",
				"queue", in.Queue, "broker", a.endpoint(idx), "taken", got.Taken, "why", err)
		case ctx.Err() == nil && !errors.Is(err, broker.ErrHandler) && !isBrokerUnreachable(err):
			// The spare answers but cannot be read: what it holds may be older than
			// anything behind it.
			a.Metrics.LeftoverFailed(in.Queue, idx)
			if err := a.unverified(ctx, in.Queue, idx, err); err != nil {
				a.Pings.Fail(ctx, failureKind(err))
				return res, err
			}
			res.Skipped = append(res.Skipped, idx)
		case isBrokerUnreachable(err):
			// A spare that is down is a warning: never a failed window, nor a failed ping.
			a.Logger.WarnContext(ctx, "leftover drain: broker unreachable, skipped",
				"queue", in.Queue, "broker", a.endpoint(idx), "error", err)
			a.Metrics.LeftoverUnreachable(in.Queue, idx)
			res.Unreachable = append(res.Unreachable, idx)
		default:
			err = fmt.Errorf("leftover drain %s on %s: %w", in.Queue, a.endpoint(idx), err)
			// A batch refused because another attempt took the queue over is no failure
			// to page anyone for: the queue is read.
			if ctx.Err() == nil && !errors.Is(err, lease.ErrQueueTaken) {
				a.Pings.Fail(ctx, failureKind(err))
			}
			return res, err
		}
	}
	return res, nil
}

// spareVisits reads every spare of indexes for stragglers.
func spareVisits(indexes []int) []spareVisit {
	out := make([]spareVisit, 0, len(indexes))
	for _, idx := range indexes {
		out = append(out, spareVisit{index: idx})
	}
	return out
}

// readings decides how each spare behind the active broker is read (brokerstate.ReadSpare):
// behind are read now, unannounced (brokerstate.ReadUnannounced: their grace for a notification passed) only once the
// active broker's queue is empty.
func (a *Window) readings(ctx context.Context, in LeftoverDrainInput) (behind, unannounced []spareVisit, err error) {
	if len(in.Brokers) == 0 {
		return nil, nil, nil
	}
	st, err := a.State.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	marks, reached, err := a.Marks.SpareMarks(ctx, in.Queue)
	if err != nil {
		return nil, nil, err
	}
	now, err := a.Marks.Now(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, idx := range in.Brokers {
		v := spareVisit{index: idx, mark: st.CurrentMark(idx, marks[idx]), read: marks[idx].LastVisit}
		v.reading = st.ReadSpare(idx, v.mark, st.CurrentMark(idx, reached[idx]), now, a.grace())
		v.settled = st.EmptyMarkSettled(idx, v.mark)
		if v.reading == brokerstate.ReadUnannounced {
			unannounced = append(unannounced, v)
		} else {
			behind = append(behind, v)
		}
	}
	return behind, unannounced, nil
}

// afterDrain records what a drain of spare v saw, and tells whether the window must stop
// visiting spares: one that was not seen empty may hold messages older than the next.
func (a *Window) afterDrain(ctx context.Context, queue string, v spareVisit, got broker.DrainResult, budget int, res *LeftoverDrainResult) (stop bool, err error) {
	mark := v.mark
	if got.Empty && got.Taken == 0 && v.settled {
		return false, nil // as the mark already says: nothing to write
	}
	// A mark is dated on Postgres' clock, as the producer's trail is.
	var now time.Time
	if got.Empty || got.Kept {
		if now, err = a.Marks.Now(ctx); err != nil {
			return false, fmt.Errorf("leftover drain %s: %w", queue, err)
		}
	}
	switch {
	case got.Empty:
		// Dated again at every empty drain until the producer had left by then: a mark
		// left at a time it was still there would read its return as stragglers. A
		// held-since date a drain check wrote since this drain read the mark goes too: the
		// next check dates it again, later, and the commit only waits longer.
		mark.DrainedAt, mark.HeldSince = now, time.Time{}
	case got.Kept:
		if mark.HeldSince.IsZero() {
			mark.HeldSince = now
		}
		// The date alone, and only when the mark has none: a drain check may have dated
		// it since this drain read it, and its date is the earlier.
		since, err := a.Marks.HoldSpare(ctx, v.index, queue, v.read, mark)
		if err != nil {
			return false, fmt.Errorf("leftover drain %s: %w", queue, err)
		}
		if !since.IsZero() {
			mark.HeldSince = since
		}
		a.Metrics.UnannouncedHeld(queue, v.index)
		a.Logger.WarnContext(ctx, "leftover drain: the broker has messages the producer never announced; they wait for its notification",
			"queue", queue, "broker", a.endpoint(v.index), "since", mark.HeldSince, "read_after", mark.HeldSince.Add(a.grace()))
		res.Unannounced = append(res.Unannounced, a.unannounced(spareVisit{index: v.index, mark: mark}))
		return false, nil
	case budget > 0:
		a.Logger.WarnContext(ctx, "leftover drain: the broker was not seen empty; the window ends before the active broker",
			"queue", queue, "broker", a.endpoint(v.index))
		res.Incomplete = append(res.Incomplete, v.index)
		return true, nil
	default:
		return false, nil // at the cap: the window ends, and the next one drains on
	}
	if v.reading == brokerstate.ReadUnannounced {
		u := a.unannounced(v)
		u.Read = true
		res.Unannounced = append(res.Unannounced, u)
	}
	if err := a.Marks.MarkSpare(ctx, v.index, queue, mark); err != nil {
		return false, fmt.Errorf("leftover drain %s: %w", queue, err)
	}
	return false, nil
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

// unannounced describes spare v's unannounced messages for the window's details.
func (a *Window) unannounced(v spareVisit) UnannouncedSpare {
	return UnannouncedSpare{Broker: v.index, Since: v.mark.HeldSince, ReadAfter: v.mark.HeldSince.Add(a.grace())}
}

func (a *Window) grace() time.Duration {
	if a.UnnotifiedGrace > 0 {
		return a.UnnotifiedGrace
	}
	return config.DefaultUnnotifiedBrokerGrace
}

// activeEmpty tells whether queue and its -retry sibling were seen empty on the active
// broker, with no consumer that may hold deliveries unacknowledged (a window that has not
// stopped yet, a connection gone half-open): those come back to the head. Anything else,
// an unreachable broker included, holds the spares ahead of it.
func (a *Window) activeEmpty(ctx context.Context, queue string, active int) bool {
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

// noLongerLeftover tells whether broker index is, as Postgres has it now, the active
// broker or on the route of the Pending Switch.
func (a *Window) noLongerLeftover(ctx context.Context, index int) (bool, error) {
	st, err := a.State.Load(ctx)
	if err != nil {
		return false, err
	}
	if st.ActiveIndex == index {
		return true, nil
	}
	if st.Pending != nil {
		for _, h := range st.Pending.Route {
			if h.Index == index {
				return true, nil
			}
		}
	}
	return false, nil
}

// isBrokerUnreachable tells a broker that cannot be reached from a failure worth retrying.
func isBrokerUnreachable(err error) bool {
	return errors.Is(err, broker.ErrUnreachable)
}
