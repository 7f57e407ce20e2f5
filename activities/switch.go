package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/metrics"
)

// countingPool is what a drain check needs from the brokers.
type countingPool interface {
	Endpoints() []broker.Endpoint
	ReadyCounts(ctx context.Context, index int, queues []string) (map[string]int, error)
	QueueCounts(ctx context.Context, index int, queues []string) (map[string]broker.QueueCount, error)
}

// stateStore reads and changes the broker state.
type stateStore interface {
	LoadAllowingRemoved(ctx context.Context) (brokerstate.State, error)
	Update(ctx context.Context, fn func(brokerstate.State) (brokerstate.State, error)) (brokerstate.State, error)
	RecordDrainCheck(ctx context.Context, check brokerstate.DrainCheck) error
	spareMarks
}

// Switch holds the activities of the BrokerSwitch workflow.
type Switch struct {
	Pool   countingPool
	Store  stateStore
	Queues []string
	// DrainCheckInterval is the pause between drain checks (DRAIN_CHECK_INTERVAL).
	DrainCheckInterval time.Duration
	Now                func() time.Time
	Logger             *slog.Logger
	// Watcher announces changes of the state that an idle BrokerSwitch workflow waits for.
	Watcher stateWatcher
	// MaxClockSkew is how far ahead of Now a notification may be
	// (NOTIFICATION_MAX_CLOCK_SKEW): the API refuses it, and so does a signal sent around it.
	MaxClockSkew time.Duration
	// Metrics counts drain checks and switches and observes switch lags; nil counts nothing.
	Metrics *metrics.Metrics
	// Leases registers the idle watch under the worker's lease, so that a watch whose
	// worker died is failed by a peer and the workflow reads the state again.
	Leases attemptHolder
	// UnnotifiedGrace bounds how long a spare holding messages of unknown place holds a
	// hop's commit (UNNOTIFIED_BROKER_GRACE; 0 means not at all).
	UnnotifiedGrace time.Duration
}

// LoadState reads the broker state as stored. An active broker removed from the
// configuration reads as index -1, not as an error: retrying could not help, and the
// workflow must get to the force signal that repairs it.
func (a *Switch) LoadState(ctx context.Context) (brokerstate.State, error) {
	st, err := a.Store.LoadAllowingRemoved(ctx)
	if err != nil {
		return st, fmt.Errorf("load broker state: %w", err)
	}
	return st, nil
}

// WaitForChangeInput is what an idle BrokerSwitch workflow knows: the active broker, with
// nothing pending.
type WaitForChangeInput struct {
	ActiveIndex int
}

// WaitForChange returns true once Postgres announces a Pending Switch or another active
// broker than in.ActiveIndex: a change that no signal brought, such as a notification
// the API recorded while Temporal was away. It returns true too when the worker stops,
// so that the workflow re-reads the state and watches on from another worker, and false
// shortly before its deadline, so that the workflow's fallback is not an activity timeout.
func (a *Switch) WaitForChange(ctx context.Context, in WaitForChangeInput) (bool, error) {
	// A watch whose worker dies, or loses its lease (its answer may never reach Temporal),
	// is failed by a peer, and the workflow reads the state itself: no heartbeats. One
	// whose lease was lost ends as a stopping worker's does.
	ctx, held, err := a.Leases.Hold(ctx, liveness.What{})
	if err != nil {
		return false, fmt.Errorf("wait for a change: %w", err)
	}
	defer held.Release()
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-5*time.Second))
		defer cancel()
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	stopping := make(chan struct{})
	go func() {
		select {
		case <-activity.GetWorkerStopChannel(ctx):
			close(stopping)
			stop()
		case <-ctx.Done():
		}
	}()
	var gen uint64
	for {
		st, g, ok := a.Watcher.Next(ctx, gen)
		if !ok {
			select {
			case <-stopping:
				return true, nil
			default:
				return errors.Is(context.Cause(ctx), liveness.ErrLost), nil
			}
		}
		gen = g
		if !changedFrom(st, in) {
			continue
		}
		// The watcher's reading can predate a change the workflow already knows of (a force
		// it just applied): answering on it would send the workflow straight back here,
		// an Action each, until the watcher catches up. Postgres has the last word.
		now, err := a.Store.LoadAllowingRemoved(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			continue // the watch ends: Next says why
		case err != nil, changedFrom(now, in):
			return true, nil // Postgres away: the workflow's own read retries until it is back
		}
	}
}

// changedFrom tells whether st differs from what an idle workflow knows: a Pending Switch,
// or another active broker.
func changedFrom(st brokerstate.State, in WaitForChangeInput) bool {
	return st.Pending != nil || st.ActiveIndex != in.ActiveIndex
}

// SwitchSettings are the worker's settings the BrokerSwitch workflow follows.
type SwitchSettings struct {
	DrainCheckInterval time.Duration
}

// Settings reports the worker's drain-check interval, so that a changed configuration
// reaches the workflow at its next run instead of living in its input. A worker built
// without one is refused: the workflow would check without a pause.
func (a *Switch) Settings(context.Context) (SwitchSettings, error) {
	if a.DrainCheckInterval <= 0 {
		return SwitchSettings{}, temporal.NewNonRetryableApplicationError(
			"the worker has no drain-check interval (DRAIN_CHECK_INTERVAL)", "NoDrainCheckInterval", nil)
	}
	return SwitchSettings{DrainCheckInterval: a.DrainCheckInterval}, nil
}

// NotificationResult is the state after a notification and what the notification did.
type NotificationResult struct {
	State   brokerstate.State
	Outcome string
}

// RecordNotification records the producer's notification as a Pending Switch, unless it
// is stale or changes nothing.
func (a *Switch) RecordNotification(ctx context.Context, n brokerstate.Notification) (NotificationResult, error) {
	if err := brokerstate.CheckSwitchedAt(n.SwitchedAt, a.Now(), a.MaxClockSkew); err != nil {
		// The API refuses these; a signal sent around it is refused the same way.
		return NotificationResult{}, temporal.NewNonRetryableApplicationError(err.Error(), "SwitchedAtAhead", nil)
	}
	var outcome string
	st, err := a.Store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		next, o := cur.ApplyNotification(n, a.Now())
		outcome = o
		return next, nil
	})
	if err != nil {
		return NotificationResult{}, fmt.Errorf("record notification for broker %d: %w", n.Index, err)
	}
	a.Logger.InfoContext(ctx, "pending switch notification", "target", n.Index, "outcome", outcome)
	return NotificationResult{State: st, Outcome: outcome}, nil
}

// DrainCheckInput names the broker to check.
type DrainCheckInput struct {
	BrokerIndex int
}

// DrainCheck counts the ready messages of the logical queues and their -retry siblings on
// a broker; -error is left out. An unreachable broker is not drained, and not an error:
// the switch waits for it and says so.
func (a *Switch) DrainCheck(ctx context.Context, in DrainCheckInput) (brokerstate.DrainCheck, error) {
	queues := make([]string, 0, 2*len(a.Queues))
	for _, q := range a.Queues {
		queues = append(queues, q, q+"-retry")
	}
	check := brokerstate.DrainCheck{BrokerIndex: in.BrokerIndex, CheckedAt: a.Now()}
	counts, err := a.Pool.ReadyCounts(ctx, in.BrokerIndex, queues)
	if err != nil {
		// The text goes to Postgres, the workflow's history and the log: scrubbed here, once.
		check.Error = broker.Redact(err.Error(), a.Pool.Endpoints())
		a.Logger.WarnContext(ctx, "drain check: active broker unreachable, the switch waits", "broker", in.BrokerIndex, "error", check.Error)
	} else {
		check.Reachable = true
		check.Counts = counts
	}
	if check.Drained() {
		check.Idle = a.idleQueues(ctx, in.BrokerIndex)
		held, err := a.heldBy(ctx, in.BrokerIndex)
		if err != nil {
			return check, fmt.Errorf("drain check %d: %w", in.BrokerIndex, err)
		}
		check.HeldBy = held
		// Which queues the commit will date seen empty: one left out had a consumer still.
		a.Logger.InfoContext(ctx, "drain check: broker drained", "broker", in.BrokerIndex, "idle", check.Idle, "held", len(held))
	}
	if err := a.Store.RecordDrainCheck(ctx, check); err != nil {
		return check, fmt.Errorf("drain check %d: %w", in.BrokerIndex, err)
	}
	switch {
	case !check.Reachable:
		a.Metrics.DrainCheck(in.BrokerIndex, metrics.DrainUnreachable)
	case check.Drained():
		a.Metrics.DrainCheck(in.BrokerIndex, metrics.DrainDrained)
	default:
		a.Metrics.DrainCheck(in.BrokerIndex, metrics.DrainNotDrained)
	}
	return check, nil
}

// consumersLeave bounds how long a drain check that found its broker drained waits for
// the windows there to let go of their consumers: a window on a broker the producer left
// lets go once its queue is quiet (Window.Consume), well within it. A queue whose consumer
// stays (a worker paused with it, a window still applying its last batch) is left
// undated by the commit, as before the windows let go.
const consumersLeave = 3 * time.Second

// idleQueues names the logical queues of a drained broker seen idle (nothing ready, no
// consumer) within consumersLeave, each at least once: nothing of theirs was then in
// a consumer's hands, so what they hold after the commit is the producer's future or
// came back from -retry or -error (brokerstate.DrainCheck.Idle). A count that fails
// names nothing more: the queue stays undated.
func (a *Switch) idleQueues(ctx context.Context, index int) []string {
	var idle []string
	waiting := slices.Clone(a.Queues)
	deadline := time.Now().Add(consumersLeave)
	for len(waiting) > 0 {
		counts, err := a.Pool.QueueCounts(ctx, index, waiting)
		if err != nil {
			break
		}
		waiting = slices.DeleteFunc(waiting, func(q string) bool {
			if counts[q].Idle() {
				idle = append(idle, q)
				return true
			}
			return false
		})
		if len(waiting) == 0 || !time.Now().Before(deadline) || !pause(ctx, idleRecount) {
			break
		}
	}
	slices.Sort(idle)
	return idle
}

// idleRecount is how often idleQueues counts the queues whose consumer is still there.
const idleRecount = 100 * time.Millisecond

// heldBy counts the logical queues of the spares outside the route once the active
// broker is drained, and names those whose messages hold the hop's commit
// (brokerstate.State.CommitHold), dating each as first seen holding. A spare that cannot
// be counted holds nothing: it may be down for good, and its windows say so.
func (a *Switch) heldBy(ctx context.Context, active int) ([]brokerstate.Held, error) {
	st, err := a.Store.LoadAllowingRemoved(ctx)
	if err != nil || st.ActiveIndex != active || st.Pending == nil {
		return nil, err // moved on: the commit finds it out
	}
	behind, ahead := st.Spares(indexes(a.Pool.Endpoints()))
	counts := map[int]map[string]broker.QueueCount{}
	for _, idx := range append(behind, ahead...) {
		c, err := a.Pool.QueueCounts(ctx, idx, a.Queues)
		if err != nil {
			a.Logger.WarnContext(ctx, "drain check: a spare cannot be counted; it holds no commit", "broker", idx, "error", err)
			continue
		}
		counts[idx] = c
	}
	now, err := a.Store.Now(ctx)
	if err != nil {
		return nil, err
	}
	grace := a.UnnotifiedGrace
	var held []brokerstate.Held
	for _, q := range a.Queues {
		marks, reached, err := a.Store.SpareMarks(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, idx := range append(behind, ahead...) {
			if c, ok := counts[idx][q]; !ok || c.Idle() {
				continue
			}
			mark, placing := st.CurrentMark(idx, marks[idx]), st.CurrentMark(idx, reached[idx])
			hold, next := st.CommitHold(idx, mark, placing, now, grace)
			if next != mark {
				// The date alone: a Leftover Drain may have marked the queue since it was
				// read, and what it saw is newer than that reading.
				since, err := a.Store.HoldSpare(ctx, idx, q, marks[idx].LastVisit, next)
				if err != nil {
					return nil, err
				}
				if !since.IsZero() {
					next.HeldSince = since
					hold, _ = st.CommitHold(idx, next, placing, now, grace)
				}
			}
			if hold {
				held = append(held, brokerstate.Held{Broker: idx, Queue: q, Since: next.HeldSince, Until: next.HeldSince.Add(grace)})
			}
		}
	}
	return held, nil
}

// CommitHopInput is a drained broker and the hop that follows it.
type CommitHopInput struct {
	From   int
	Hop    brokerstate.Hop
	Checks int
}

// CommitHop makes the hop's broker active, in one transaction; a retried or concurrent
// commit finds the state moved on and changes nothing.
func (a *Switch) CommitHop(ctx context.Context, in CommitHopInput) (brokerstate.State, error) {
	var moved bool
	commitLag, pendingFor := time.Duration(-1), time.Duration(-1)
	st, err := a.Store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		now := a.Now()
		var next brokerstate.State
		next, moved = cur.CompleteHop(in.From, in.Hop, in.Checks, now)
		if moved {
			commitLag, pendingFor = switchLags(cur, in.From, now)
		}
		return next, nil
	})
	if err != nil {
		return st, fmt.Errorf("commit switch %d to %d: %w", in.From, in.Hop.Index, err)
	}
	if moved {
		a.Metrics.SwitchCommitted(commitLag, pendingFor)
	}
	a.Logger.InfoContext(ctx, "switch committed", "from", in.From, "to", in.Hop.Index, "checks", in.Checks)
	return st, nil
}

// switchLags measures a hop committed at now from the state before it: commitLag from the
// recorded drain check that found broker from empty, pendingFor from the Pending Switch's
// recording. Both are on this service's clocks; -1 means unknown.
func switchLags(before brokerstate.State, from int, now time.Time) (commitLag, pendingFor time.Duration) {
	commitLag, pendingFor = -1, -1
	if c := before.LastDrainCheck; c != nil && c.BrokerIndex == from && c.Drained() && !c.CheckedAt.After(now) {
		commitLag = now.Sub(c.CheckedAt)
	}
	if p := before.Pending; p != nil && !p.RecordedAt.IsZero() && !p.RecordedAt.After(now) {
		pendingFor = now.Sub(p.RecordedAt)
	}
	return commitLag, pendingFor
}

// ForceSwitchInput is an operator's order to move now.
type ForceSwitchInput struct {
	Index int `json:"index"`
	// AskedAt is when the operator asked: a Pending Switch recorded after it survives the
	// force. Zero (the Temporal CLI's plain signal) drops whatever is pending.
	AskedAt time.Time `json:"askedAt,omitzero"`
}

// ForceSwitch moves to the broker at once and drops any Pending Switch.
func (a *Switch) ForceSwitch(ctx context.Context, in ForceSwitchInput) (brokerstate.State, error) {
	if in.Index < 0 || in.Index >= len(a.Pool.Endpoints()) {
		// Retrying cannot help, and every later signal would wait behind it.
		return brokerstate.State{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("force switch: broker %d is not configured (%d brokers)", in.Index, len(a.Pool.Endpoints())), "UnknownBroker", nil)
	}
	st, err := a.Store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		return cur.Force(in.Index, in.AskedAt, a.Now()), nil
	})
	if err != nil {
		return st, fmt.Errorf("force switch to %d: %w", in.Index, err)
	}
	a.Metrics.SwitchForced()
	a.Logger.InfoContext(ctx, "switch forced", "to", in.Index)
	return st, nil
}

// CancelPendingSwitchInput names the Pending Switch to cancel by its target's switchedAt;
// empty cancels whatever is pending (the Temporal CLI's plain signal).
type CancelPendingSwitchInput struct {
	SwitchedAt time.Time `json:"switchedAt,omitzero"`
	// Index is the named target's broker, when the caller read it: two hops in one second
	// are told apart by it.
	Index *int `json:"index,omitempty"`
}

// CancelPendingSwitch takes the hops the cancel names off the route without moving. A
// cancel that comes after the switch it names was committed is refused with the reason:
// the broker moved, and only a force goes back.
func (a *Switch) CancelPendingSwitch(ctx context.Context, in CancelPendingSwitchInput) (brokerstate.State, error) {
	var committed *brokerstate.LastSwitch
	st, err := a.Store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		if committed = cur.CommittedPast(in.SwitchedAt, in.Index); committed != nil {
			return cur, errCommittedFirst
		}
		return cur.CancelPending(in.SwitchedAt, a.Now()), nil
	})
	if committed != nil {
		return st, temporal.NewNonRetryableApplicationError(committedFirst(*committed), "SwitchCommitted", nil)
	}
	if err != nil {
		return st, fmt.Errorf("cancel pending switch: %w", err)
	}
	return st, nil
}

// errCommittedFirst rolls back a cancel that found its switch committed.
var errCommittedFirst = errors.New("the switch was committed first")

// committedFirst is the reason a cancel that came after its switch's commit is refused.
func committedFirst(ls brokerstate.LastSwitch) string {
	return fmt.Sprintf("too late to cancel: the switch from broker %d to broker %d was committed at %s, once broker %d was drained, "+
		"before the cancel reached it; broker %d is active: force a switch to go back",
		ls.From, ls.To, ls.CompletedAt.UTC().Format(time.RFC3339), ls.From, ls.To)
}
