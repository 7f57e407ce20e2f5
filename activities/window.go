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
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/metrics"
)

// consumerPool is what the window activities need from the brokers.
type consumerPool interface {
	Endpoints() []broker.Endpoint
	DeclareTopology(ctx context.Context, index int, t broker.Topology) error
	Consume(ctx context.Context, index int, queue string, opts broker.ConsumeOptions, h broker.BatchHandler) error
	DrainWith(ctx context.Context, index int, queue string, opts broker.DrainOptions, h broker.BatchHandler) (broker.DrainResult, error)
	ReadyCounts(ctx context.Context, index int, queues []string) (map[string]int, error)
}

// handlers gives the batch handler that applies a broker's deliveries.
type handlers interface {
	ForBroker(index int) broker.BatchHandler
}

// stateLoader reads the broker state.
type stateLoader interface {
	LoadConfigured(ctx context.Context) (brokerstate.BrokerState, error)
}

// spareMarks keeps what the Leftover Drain learned of each spare (brokerstate.BrokerStore).
type spareMarks interface {
	SpareMarks(ctx context.Context, queue string) (marks, reached map[int]brokerstate.SpareMark, err error)
	MarkSpare(ctx context.Context, index int, queue string, m brokerstate.SpareMark) error
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
	// holding stragglers, as before issue 19.
	Marks   spareMarks
	Watcher stateWatcher
	// UnnotifiedGrace is how long messages the producer never announced wait for its
	// notification (UNNOTIFIED_BROKER_GRACE); 0 means brokerstate.DefaultUnnotifiedBrokerGrace.
	UnnotifiedGrace time.Duration
	Topology        broker.Topology
	Prefetch        int
	// HeartbeatTimeout is how long a window may go silent before Temporal retries it on
	// another worker. Heartbeats only prove liveness: the SDK sends at most one per 0.8 ×
	// HeartbeatTimeout, and each one that reaches the server is a billable Action.
	HeartbeatTimeout time.Duration
	Logger           *slog.Logger
	// Metrics counts Leftover Drain messages and window lengths; nil counts nothing.
	Metrics *metrics.Metrics
	// Pings reports each consumer window to HealthChecks; nil pings nothing.
	Pings *healthchecks.Pinger
}

// WindowPlan says which broker a window reads and which others its Leftover Drain visits.
type WindowPlan struct {
	ActiveIndex      int
	ActiveName       string
	Window           time.Duration
	HeartbeatTimeout time.Duration
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
		HeartbeatTimeout: a.HeartbeatTimeout,
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
}

// PrepareWindow resolves the active broker and runs the Leftover Drain in one activity:
// every activity is a billable Action, and a window starts every CONSUMER_WINDOW per queue.
func (a *Window) PrepareWindow(ctx context.Context, queue string) (PreparedWindow, error) {
	plan, err := a.planWindow(ctx)
	if err != nil {
		return PreparedWindow{}, err
	}
	out := PreparedWindow{Plan: plan, Drained: LeftoverDrainResult{Taken: map[int]int{}}}
	if len(plan.Leftover)+len(plan.Ahead) == 0 {
		return out, nil
	}
	out.Drained, err = a.leftoverDrain(ctx, LeftoverDrainInput{
		Queue: queue, Brokers: plan.Leftover, Ahead: plan.Ahead, Active: plan.ActiveIndex, Cap: plan.LeftoverDrainCap,
	})
	return out, err
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
}

// leftoverDrain takes what waits on the queue on the other brokers (see broker.Pool.Drain), and
// applies it before the window starts: those messages are older than anything on the
// active broker. What may be the producer's future (brokerstate.ReadSpare) waits for its
// notification. A broker that cannot be reached is a warning, never a failed window; one
// that fails otherwise while it holds messages fails the attempt, so that the active
// broker is not read past it.
func (a *Window) leftoverDrain(ctx context.Context, in LeftoverDrainInput) (LeftoverDrainResult, error) {
	stopHeartbeat := heartbeat(ctx)
	defer stopHeartbeat()
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
			opts := broker.DrainOptions{Max: budget, Batch: a.Prefetch}
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
	now := time.Now()
	for _, idx := range in.Brokers {
		v := spareVisit{index: idx, mark: st.CurrentMark(idx, marks[idx])}
		v.reading = st.ReadSpare(idx, v.mark, st.CurrentMark(idx, reached[idx]), now, a.grace())
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
	switch {
	case got.Empty && got.Taken == 0 && !mark.DrainedAt.IsZero() && mark.HeldSince.IsZero():
		return false, nil // as the mark already says: nothing to write
	case got.Empty:
		mark.DrainedAt, mark.HeldSince = time.Now(), time.Time{}
	case got.Kept:
		if mark.HeldSince.IsZero() {
			mark.HeldSince = time.Now()
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
	counts, err := a.Pool.ReadyCounts(ctx, index, []string{queue})
	if err == nil && counts[queue] == 0 {
		a.Logger.WarnContext(ctx, "leftover drain: broker failed, and holds nothing ready",
			"queue", queue, "broker", a.endpoint(index), "error", cause)
		return nil
	}
	held := "an unknown number of"
	if err == nil {
		held = fmt.Sprint(counts[queue])
	}
	return fmt.Errorf("leftover drain %s on %s: failed with %s messages ready, which the active broker must not overtake: %w",
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
// broker. Anything else, an unreachable broker included, holds the spares ahead of it.
func (a *Window) activeEmpty(ctx context.Context, queue string, active int) bool {
	counts, err := a.Pool.ReadyCounts(ctx, active, []string{queue, broker.RetryQueue(queue)})
	if err != nil {
		a.Logger.WarnContext(ctx, "leftover drain: the active broker's backlog is unknown; spares ahead of it wait",
			"queue", queue, "broker", a.endpoint(active), "error", err)
		return false
	}
	for _, n := range counts {
		if n > 0 {
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

// ConsumeInput is one consumer window on one broker.
type ConsumeInput struct {
	Queue       string
	BrokerIndex int
	Window      time.Duration
}

// Why a window ends before its length; they say so in logs and metrics.
var (
	errSwitched = errors.New("the active broker moved")
	errStopping = errors.New("the worker is stopping")
	errFenced   = errors.New("the window may have been given to another worker")
)

// Consume reads the queue on the active broker for one window. It ends itself early, with
// the batch in hand settled, when Postgres announces that the active broker moved or the
// worker is stopping; both are normal ends, not errors.
func (a *Window) Consume(ctx context.Context, in ConsumeInput) (err error) {
	start := time.Now()
	ping := a.Pings.Start(ctx)
	windowCtx, end := context.WithCancelCause(ctx)
	defer end(nil)
	defer func() {
		outcome := metrics.WindowElapsed
		switch cause := context.Cause(windowCtx); {
		case err != nil && ctx.Err() == nil:
			outcome = metrics.WindowFailed
			ping.Fail(ctx, failureKind(err))
		case ctx.Err() != nil, errors.Is(cause, errSwitched), errors.Is(cause, errStopping):
			outcome = metrics.WindowCancelled
			ping.Success(ctx)
		default:
			ping.Success(ctx)
		}
		a.Metrics.Window(in.Queue, outcome, time.Since(start))
	}()
	// A retried attempt, or a plan read just before a switch, must not read a broker that
	// is no longer active.
	if st, err := a.State.LoadConfigured(ctx); err != nil {
		return fmt.Errorf("consume %s: %w", in.Queue, err)
	} else if st.ActiveIndex != in.BrokerIndex {
		end(errSwitched)
		return nil
	}
	if err := a.Pool.DeclareTopology(ctx, in.BrokerIndex, a.Topology); err != nil {
		return fmt.Errorf("consume %s: %w", in.Queue, err)
	}
	go a.endEarly(windowCtx, end, in)
	// Heartbeats go on until the batch in hand is settled, even after the window ended:
	// an activity that goes silent after its cancel was requested times out for good.
	stopHeartbeat := heartbeat(ctx)
	defer stopHeartbeat()
	fence := make(chan struct{})
	stopFence := a.fence(ctx, fence, end)
	defer stopFence()

	opts := broker.ConsumeOptions{Prefetch: a.Prefetch, ConsumerTag: consumerTag(ctx), Fence: fence}
	if err := a.Pool.Consume(windowCtx, in.BrokerIndex, in.Queue, opts, a.Handlers.ForBroker(in.BrokerIndex)); err != nil {
		return fmt.Errorf("consume %s on %s: %w", in.Queue, a.endpoint(in.BrokerIndex), err)
	}
	if cause := context.Cause(windowCtx); errors.Is(cause, errSwitched) || errors.Is(cause, errStopping) {
		a.Logger.InfoContext(ctx, "window ended early", "queue", in.Queue, "broker", a.endpoint(in.BrokerIndex), "why", cause.Error())
	}
	// A cancelled activity (the workflow was cancelled, or the worker's stop timeout
	// passed) reports cancellation; every other end is a success.
	return ctx.Err()
}

// fence closes gone, and ends the window, once this attempt must assume that Temporal
// gave the window to another worker: Temporal says this attempt is no longer the pending
// one, or has not answered for longer than the heartbeat timeout, after which it times the
// attempt out and retries it elsewhere. The SDK does not cancel an activity whose
// heartbeats fail with "unavailable", so a worker cut off from Temporal would otherwise
// go on consuming, and settling, beside its successor. Its batch in hand then goes back
// to the queue unsettled (broker.ConsumeOptions.Fence). Asking costs a describe, which is
// no billable Action.
func (a *Window) fence(ctx context.Context, gone chan<- struct{}, end context.CancelCauseFunc) (stop func()) {
	info := activity.GetInfo(ctx)
	timeout := info.HeartbeatTimeout
	if timeout <= 0 {
		return func() {}
	}
	c := activity.GetClient(ctx)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		lastAnswer := time.Now()
		every := max(timeout/4, time.Second)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			asked := time.Now()
			askCtx, cancelAsk := context.WithTimeout(ctx, every)
			res, err := c.DescribeWorkflowExecution(askCtx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
			cancelAsk()
			why := ""
			switch {
			case err == nil && superseded(res.GetPendingActivities(), info):
				why = "Temporal no longer runs this attempt"
			case err == nil:
				lastAnswer = asked
				continue
			case time.Since(lastAnswer) > timeout:
				why = fmt.Sprintf("Temporal has not answered for %s, more than the heartbeat timeout", time.Since(lastAnswer).Round(time.Second))
			default:
				continue
			}
			if ctx.Err() != nil {
				return
			}
			a.Logger.WarnContext(ctx, "window fenced: its batch in hand goes back to the queue unsettled", "why", why, "error", err)
			close(gone)
			end(errFenced)
			return
		}
	}()
	return func() { cancel(); <-done }
}

// superseded tells whether the describe's pending activities show that attempt info is
// over: the activity is gone, or a later attempt runs.
func superseded(pending []*workflowpb.PendingActivityInfo, info activity.Info) bool {
	for _, p := range pending {
		if p.GetActivityId() == info.ActivityID {
			return p.GetAttempt() > info.Attempt
		}
	}
	return true
}

// endEarly ends the window when its length has passed, when the active broker moves away
// from the one it reads, or when the worker begins to stop.
func (a *Window) endEarly(ctx context.Context, end context.CancelCauseFunc, in ConsumeInput) {
	timer := time.NewTimer(in.Window)
	defer timer.Stop()
	moved := make(chan struct{})
	go func() {
		if a.activeMoved(ctx, in.BrokerIndex) {
			close(moved)
		}
	}()
	select {
	case <-ctx.Done():
	case <-timer.C:
		end(context.DeadlineExceeded)
	case <-moved:
		end(errSwitched)
	case <-activity.GetWorkerStopChannel(ctx):
		end(errStopping)
	}
}

// activeMoved blocks until the active broker is no longer index, and reports whether it
// saw that before ctx ended. The watcher's reading may lag a switch the caller has already
// seen, so a reading that says "moved" is confirmed with a read of Postgres.
func (a *Window) activeMoved(ctx context.Context, index int) bool {
	var gen uint64
	for {
		st, g, ok := a.Watcher.Next(ctx, gen)
		if !ok {
			return false
		}
		gen = g
		if st.ActiveIndex == index {
			continue
		}
		if now, err := a.State.LoadConfigured(ctx); err != nil || now.ActiveIndex == index {
			continue // Postgres away, or a stale reading: keep reading what was planned
		}
		return true
	}
}

func (a *Window) endpoint(index int) string {
	for _, ep := range a.Pool.Endpoints() {
		if ep.Index == index {
			return ep.String()
		}
	}
	return fmt.Sprintf("#%d", index)
}

// consumerTag names the consumer after the activity so that the RabbitMQ management
// page says which workflow run holds a queue.
func consumerTag(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return fmt.Sprintf("%s/%s/%d", info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.Attempt)
}

// heartbeat records a heartbeat every third of the activity's heartbeat timeout until stop is
// called, whatever happens to ctx meanwhile. The SDK throttles what reaches the server to
// one per 0.8 × the timeout, so a short activity that ends before the first tick sends none.
func heartbeat(ctx context.Context) (stop func()) {
	every := activity.GetInfo(ctx).HeartbeatTimeout / 3
	if every <= 0 {
		return func() {}
	}
	// A heartbeat sent on a cancelled context never leaves the process.
	ctx = context.WithoutCancel(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// isBrokerUnreachable tells a broker that cannot be reached from a failure worth retrying.
func isBrokerUnreachable(err error) bool {
	return errors.Is(err, broker.ErrUnreachable)
}
