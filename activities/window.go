// Package activities holds the side effects the workflows drive: reading brokers,
// applying events to Postgres, and changing the broker state.
package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/lease"
	"github.com/brokerswitch/brokerswitch/metrics"
)

// consumerPool is what the window activities need from the brokers.
type consumerPool interface {
	Endpoints() []broker.Endpoint
	DeclareTopology(ctx context.Context, index int, t broker.Topology) error
	Consume(ctx context.Context, index int, queue string, opts broker.ConsumeOptions, h broker.BatchHandler) error
	DrainWith(ctx context.Context, index int, queue string, opts broker.DrainOptions, h broker.BatchHandler) (broker.DrainResult, error)
	ReadyCounts(ctx context.Context, index int, queues []string) (map[string]int, error)
	QueueCounts(ctx context.Context, index int, queues []string) (map[string]broker.QueueCount, error)
}

// handlers gives the batch handler that applies a broker's deliveries (ingest.Ingester).
type handlers interface {
	// ForBroker applies a spare's deliveries, for a Leftover Drain.
	ForBroker(index int) broker.BatchHandler
	// ForActive applies the active broker's deliveries, each batch only while index is
	// still active: otherwise it fails with brokerstate.ErrNotActive, nothing settled.
	ForActive(index int) broker.BatchHandler
}

// stateLoader reads the broker state.
type stateLoader interface {
	LoadConfigured(ctx context.Context) (brokerstate.BrokerState, error)
}

// spareMarks keeps what the Leftover Drain learned of each spare (brokerstate.BrokerStore).
type spareMarks interface {
	SpareMarks(ctx context.Context, queue string) (marks, reached map[int]brokerstate.SpareMark, err error)
	MarkSpare(ctx context.Context, index int, queue string, m brokerstate.SpareMark) error
	// Now is Postgres' clock, the one marks and the producer's trail are dated by.
	Now(ctx context.Context) (time.Time, error)
}

// stateWatcher hands out the process's latest reading of the broker state as it changes
// (brokerstate.StateWatcher), so that a window learns of a committed switch from Postgres, not
// from a Temporal round trip.
type stateWatcher interface {
	Next(ctx context.Context, after uint64) (brokerstate.BrokerState, uint64, bool)
}

// Window holds the activities of a queue's consumer window.
type Window struct {
	Pool consumerPool
	// WindowLength and LeftoverDrainCap come from the worker's configuration, so that a
	// change takes effect at the next window.
	WindowLength     time.Duration
	LeftoverDrainCap int
	Handlers         handlers
	State            stateLoader
	// Marks keeps what the Leftover Drain saw on each spare; nil reads every spare as
	// holding stragglers (the activity tests that drain without a broker state).
	Marks   spareMarks
	Watcher stateWatcher
	// UnnotifiedGrace is how long messages the producer never announced wait for its
	// notification (UNNOTIFIED_BROKER_GRACE); 0 means brokerstate.DefaultUnnotifiedBrokerGrace.
	UnnotifiedGrace time.Duration
	Topology        broker.Topology
	Prefetch        int
	// Leases registers each attempt under the worker's lease (lease.Keeper): a worker that
	// dies has its attempts failed by a peer and retried at once, without heartbeats.
	Leases attemptHolder
	// FenceCheck is how often an attempt asks Temporal whether it still runs; 0 means
	// DefaultFenceCheck.
	FenceCheck time.Duration
	// SpareCheck is how often a consumer window counts the spares it watches
	// (SPARE_CHECK_INTERVAL); 0 means DefaultSpareCheck.
	SpareCheck time.Duration
	// StatementTimeout is DB_STATEMENT_TIMEOUT: with Prefetch it bounds how long the batch
	// in hand at a window's end may take to settle.
	StatementTimeout time.Duration
	Logger           *slog.Logger
	// Metrics counts Leftover Drain messages and window lengths; nil counts nothing.
	Metrics *metrics.Metrics
	// Pings reports each consumer window to HealthChecks; nil pings nothing.
	Pings *healthchecks.Pinger
}

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
	st, err := a.State.LoadConfigured(ctx)
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

// settle is the worst time the batch in hand takes to be applied: one message at a time,
// each up to the statement timeout, and a minute for the rest.
func (a *Window) settle() time.Duration {
	return time.Duration(max(a.Prefetch, 1))*a.StatementTimeout + time.Minute
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
	gone, stopFence, err := a.fence().guard(ctx, lease.What{Queue: queue}, end)
	if err != nil {
		return PreparedWindow{}, fmt.Errorf("prepare window %s: %w", queue, err)
	}
	defer stopFence()
	plan, err := a.planWindow(drainCtx)
	if err != nil {
		return PreparedWindow{}, err
	}
	out := PreparedWindow{Plan: plan, Drained: LeftoverDrainResult{Taken: map[int]int{}}}
	if len(plan.Leftover)+len(plan.Ahead) == 0 {
		return out, nil
	}
	out.Drained, err = a.leftoverDrainFenced(drainCtx, LeftoverDrainInput{
		Queue: queue, Brokers: plan.Leftover, Ahead: plan.Ahead, Active: plan.ActiveIndex, Cap: plan.LeftoverDrainCap,
	}, gone)
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
	// producer left (brokerstate.BrokerState.EmptyMarkSettled).
	settled bool
}

// leftoverDrain takes what waits on the queue on the other brokers (see broker.Pool.Drain), and
// applies it before the window starts: those messages are older than anything on the
// active broker. What may be the producer's future (brokerstate.ReadSpare) waits for its
// notification. A broker that cannot be reached is a warning, never a failed window; one
// that fails otherwise while it holds messages fails the attempt, so that the active
// broker is not read past it.
func (a *Window) leftoverDrain(ctx context.Context, in LeftoverDrainInput) (LeftoverDrainResult, error) {
	return a.leftoverDrainFenced(ctx, in, nil)
}

// leftoverDrainFenced is leftoverDrain whose batch in hand is given back unsettled once
// gone closes (broker.DrainOptions.Fence).
func (a *Window) leftoverDrainFenced(ctx context.Context, in LeftoverDrainInput, gone <-chan struct{}) (LeftoverDrainResult, error) {
	res := LeftoverDrainResult{Taken: map[int]int{}}
	behind, late, err := a.readings(ctx, in)
	if err != nil {
		return res, fmt.Errorf("leftover drain %s: %w", in.Queue, err)
	}
	visits := behind
	ahead := append(spareVisits(in.Ahead), late...)
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
			opts := broker.DrainOptions{Max: budget, Batch: a.Prefetch, Fence: gone}
			if v.reading == brokerstate.ReadReturned {
				opts.Keep = func(d amqp.Delivery) bool { return !broker.Returned(d, in.Queue) }
			}
			got, err = a.Pool.DrainWith(ctx, idx, in.Queue, opts, a.Handlers.ForBroker(idx))
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
			if ctx.Err() == nil {
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
// behind are read now, late (their grace for a notification passed) only once the
// active broker's queue is empty.
func (a *Window) readings(ctx context.Context, in LeftoverDrainInput) (behind, late []spareVisit, err error) {
	if a.Marks == nil || a.State == nil || len(in.Brokers) == 0 {
		return spareVisits(in.Brokers), nil, nil
	}
	st, err := a.State.LoadConfigured(ctx)
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
		v := spareVisit{index: idx, mark: st.CurrentMark(idx, marks[idx])}
		v.reading = st.ReadSpare(idx, v.mark, st.CurrentMark(idx, reached[idx]), now, a.grace())
		v.settled = st.EmptyMarkSettled(idx, v.mark)
		if v.reading == brokerstate.ReadUnannounced {
			late = append(late, v)
		} else {
			behind = append(behind, v)
		}
	}
	return behind, late, nil
}

// afterDrain records what a drain of spare v saw, and tells whether the window must stop
// visiting spares: one that was not seen empty may hold messages older than the next.
func (a *Window) afterDrain(ctx context.Context, queue string, v spareVisit, got broker.DrainResult, budget int, res *LeftoverDrainResult) (stop bool, err error) {
	mark := v.mark
	if got.Empty && got.Taken == 0 && v.settled {
		return false, nil // as the mark already says: nothing to write
	}
	// A mark is dated on Postgres' clock, as the producer's trail is.
	now := time.Now()
	if (got.Empty || got.Kept) && a.Marks != nil && a.State != nil {
		if now, err = a.Marks.Now(ctx); err != nil {
			return false, fmt.Errorf("leftover drain %s: %w", queue, err)
		}
	}
	switch {
	case got.Empty:
		// Dated again at every empty drain until the producer had left by then: a mark
		// left at a time it was still there would read its return as stragglers.
		mark.DrainedAt, mark.HeldSince = now, time.Time{}
	case got.Kept:
		if mark.HeldSince.IsZero() {
			mark.HeldSince = now
		}
		a.Metrics.UnannouncedHeld(queue, v.index)
		a.Logger.WarnContext(ctx, "leftover drain: the broker has messages the producer never announced; they wait for its notification",
			"queue", queue, "broker", a.endpoint(v.index), "since", mark.HeldSince, "read_after", mark.HeldSince.Add(a.grace()))
		res.Unannounced = append(res.Unannounced, a.unannounced(spareVisit{index: v.index, mark: mark}))
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
	if a.Marks == nil || a.State == nil {
		return false, nil
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
		// gives up within its heartbeat timeout.
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
	return brokerstate.DefaultUnnotifiedBrokerGrace
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
	if a.State == nil {
		return false, nil
	}
	st, err := a.State.LoadConfigured(ctx)
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

func (a *Window) endpoint(index int) string {
	for _, ep := range a.Pool.Endpoints() {
		if ep.Index == index {
			return ep.String()
		}
	}
	return fmt.Sprintf("#%d", index)
}

// isBrokerUnreachable tells a broker that cannot be reached from a failure worth retrying.
func isBrokerUnreachable(err error) bool {
	return errors.Is(err, broker.ErrUnreachable)
}
