package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/windowplan"
)

// ConsumeInput is one consumer window on one broker.
type ConsumeInput struct {
	Queue       string
	BrokerIndex int
	// Window is the longest the window lasts (CONSUMER_WINDOW); it ends earlier on events.
	Window time.Duration
	// Spares are the other brokers the window keeps an eye on, from its Leftover Drain.
	Spares []windowplan.SpareWatch `json:",omitempty"`
}

// pingEvery is how often a long window reports to HealthChecks: a check expects a ping
// far more often than a window may last.
const pingEvery = 5 * time.Minute

// Why a window ends before its length; they say so in logs and metrics.
var (
	errSwitched  = errors.New("the active broker moved")
	errStopping  = errors.New("the worker is stopping")
	errStraggler = errors.New("a spare has messages for a Leftover Drain")
)

// Consume reads the queue on the active broker for one window. It ends itself early, with
// the batch in hand settled, when Postgres announces that the active broker moved, when a
// spare it watches has something for a Leftover Drain, or when the worker is stopping;
// those are normal ends, not errors.
func (a *Window) Consume(ctx context.Context, in ConsumeInput) (err error) {
	start := time.Now()
	ping := newPinging(ctx, a.Pings)
	var why error // why the window ended
	defer func() { a.report(ctx, why, in.Queue, time.Since(start), ping, err) }()
	// A retried attempt, or a plan read just before a switch, must not read a broker that
	// is not the active one any more.
	planned, err := a.State.Load(ctx)
	if err != nil {
		return fmt.Errorf("consume %s: %w", in.Queue, err)
	} else if planned.ActiveIndex != in.BrokerIndex {
		why = errSwitched
		return nil
	}
	if err := a.Pool.DeclareTopology(ctx, in.BrokerIndex, a.Topology); err != nil {
		return fmt.Errorf("consume %s: %w", in.Queue, err)
	}
	held, h, err := a.Leases.Hold(ctx, liveness.What{Queue: in.Queue, Broker: &in.BrokerIndex})
	if err != nil {
		return fmt.Errorf("consume %s: %w", in.Queue, err)
	}
	defer h.Release()
	windowCtx, end := context.WithCancelCause(held)
	defer end(nil)
	defer func() { why = context.Cause(windowCtx) }()
	go a.endEarly(windowCtx, end, in, planned)
	go a.watchSpares(windowCtx, end, in)

	err = a.consume(windowCtx, in, planned, h)
	if endedWhileAsking(windowCtx, err) {
		err = nil
	}
	if errors.Is(err, brokerstate.ErrNotActive) {
		// The switch committed before this process's watcher heard of it: the batch went
		// back unsettled, to be read after the new active broker's backlog.
		end(errSwitched)
		err = nil
	}
	if err != nil {
		return fmt.Errorf("consume %s on %s: %w", in.Queue, a.endpoint(in.BrokerIndex), err)
	}
	if cause := context.Cause(windowCtx); errors.Is(cause, errSwitched) || errors.Is(cause, errStopping) || errors.Is(cause, errStraggler) {
		a.Logger.InfoContext(ctx, "window ended early", "queue", in.Queue, "broker", a.endpoint(in.BrokerIndex), "why", cause.Error())
	}
	// A cancelled activity (the workflow was cancelled, or the worker's stop timeout
	// passed) reports cancellation; every other end is a success.
	return ctx.Err()
}

// consume reads in's queue until windowCtx ends, h is lost or reading fails, and returns
// why it stopped. Once the producer has left the broker it lets go of its consumer while
// the queue is quiet (release.go).
func (a *Window) consume(windowCtx context.Context, in ConsumeInput, planned brokerstate.State, h *liveness.Held) error {
	opts := broker.ConsumeOptions{Prefetch: a.Prefetch, ConsumerTag: consumerTag(windowCtx), Fence: h.Lost(), SettleTimeout: a.settle()}
	rel := a.watchRelease(windowCtx, in, planned)
	taken := time.Now().Add(a.consumerWait(in.BrokerIndex))
	for {
		if !rel.awaitWork(windowCtx) {
			return nil
		}
		consumerCtx, handler, stop := rel.consuming(windowCtx, a.Handlers.ForActive(in.BrokerIndex, h.Checks()...))
		err := a.Pool.Consume(consumerCtx, in.BrokerIndex, in.Queue, opts, handler)
		let := released(consumerCtx) && windowCtx.Err() == nil
		stop()
		switch {
		// A message no consumer can hold has been moved to -error: reading on in this
		// attempt costs the queue nothing, where failing it would wait out a retry's backoff.
		case errors.Is(err, broker.ErrMovedToError):
			continue
		case let && err == nil:
			// Asked again later: a consumer left on a silent connection is waited for anew.
			taken = time.Now().Add(a.consumerWait(in.BrokerIndex))
			continue
		}
		// The attempt this one replaces may hold the exclusive consumer on a connection
		// gone silent (its worker paused or cut off): the broker drops it a few heartbeats
		// later, and its batches are refused meanwhile (the queue's fencing token). Asking
		// again here takes the queue as soon as it is free, where a failed attempt would
		// wait out a growing retry backoff.
		if !errors.Is(err, broker.ErrExclusiveConsumer) || !time.Now().Before(taken) || !pause(windowCtx, consumerRetry) {
			return err
		}
	}
}

// report tells metrics and HealthChecks how a window of queue ended after lasting took:
// err is what Consume returns, cause why its window's context ended.
func (a *Window) report(ctx context.Context, cause error, queue string, took time.Duration, ping *pinging, err error) {
	outcome := metrics.WindowElapsed
	switch {
	case err != nil && ctx.Err() == nil && !errors.Is(err, liveness.ErrQueueTaken):
		outcome = metrics.WindowFailed
		ping.fail(ctx, failureKind(err))
	case ctx.Err() != nil, errors.Is(cause, errSwitched), errors.Is(cause, errStopping), errors.Is(cause, errStraggler),
		// A late batch of an attempt another took over, refused by the queue's fencing
		// token: the queue is read, and nothing is wrong for anyone to act on.
		errors.Is(err, liveness.ErrQueueTaken):
		outcome = metrics.WindowCancelled
		ping.success(ctx)
	default:
		ping.success(ctx)
	}
	a.Metrics.Window(queue, outcome, took)
}

// endedWhileAsking tells whether err, the exclusive consumer refused, came as the window
// ended for a normal reason (a switch, a straggler, its length) while it still asked for
// the consumer: a normal end, not a failed window that waits out a retry's backoff.
func endedWhileAsking(windowCtx context.Context, err error) bool {
	return errors.Is(err, broker.ErrExclusiveConsumer) && windowCtx.Err() != nil &&
		!errors.Is(context.Cause(windowCtx), liveness.ErrLost)
}

// consumerRetry is how often a window asks again for an exclusive consumer that another
// connection holds.
const consumerRetry = 500 * time.Millisecond

// consumerWait is how long a window asks again for an exclusive consumer that another
// connection to broker index holds: three heartbeats, after which the broker drops a
// silent connection, and a margin. The heartbeat is the one our connections to it
// negotiated, the URL's heartbeat parameter and the broker's own included: the workers
// share the configuration, so the silent connection negotiated the same.
func (a *Window) consumerWait(index int) time.Duration {
	return 3*a.Pool.NegotiatedHeartbeat(index) + 5*time.Second
}

// pause waits for d, and tells whether ctx is still live after it.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// endEarly ends the window when its length has passed, when the active broker moves away
// from the one it reads or a spare changes its place in the order (activeMoved), or when
// the worker begins to stop.
func (a *Window) endEarly(ctx context.Context, end context.CancelCauseFunc, in ConsumeInput, planned brokerstate.State) {
	timer := time.NewTimer(in.Window)
	defer timer.Stop()
	moved := make(chan struct{})
	go func() {
		if a.activeMoved(ctx, in.BrokerIndex, planned) {
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

// watchSpares ends the window once a spare it watches has something for a Leftover Drain.
func (a *Window) watchSpares(ctx context.Context, end context.CancelCauseFunc, in ConsumeInput) {
	if len(in.Spares) == 0 {
		return
	}
	every := a.SpareCheck
	if every <= 0 {
		end(errors.New("the worker has no spare-check interval (SPARE_CHECK_INTERVAL) to watch the spares with"))
		return
	}
	started := time.Now()
	tickUntil(ctx, every, func() bool {
		spare, ok := windowplan.Calling(in.Spares, a.look(ctx, in, time.Since(started)))
		if ok {
			a.Logger.InfoContext(ctx, "a spare has messages for a Leftover Drain: the window ends",
				"queue", in.Queue, "spare", a.endpoint(spare))
			end(errStraggler)
		}
		return ok
	})
}

// tickUntil calls done every d until it returns true or ctx ends.
func tickUntil(ctx context.Context, d time.Duration, done func() bool) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if done() {
			return
		}
	}
}

// look counts the queue on the spares the window watches (a passive declare: no message,
// no Action), and on the active broker when a spare waits for its backlog, for
// windowplan.Calling.
func (a *Window) look(ctx context.Context, in ConsumeInput, lasted time.Duration) windowplan.Look {
	l := windowplan.Look{Ready: map[int]int{}, ActiveBacklog: -1, Lasted: lasted, Now: time.Now()}
	ahead := false
	for _, s := range in.Spares {
		if counts, err := a.Pool.ReadyCounts(ctx, s.Broker, []string{in.Queue}); err == nil {
			l.Ready[s.Broker] = counts[in.Queue]
		}
		ahead = ahead || !s.Behind
	}
	if !ahead {
		return l
	}
	retry := broker.RetryQueue(in.Queue)
	if counts, err := a.Pool.ReadyCounts(ctx, in.BrokerIndex, []string{in.Queue, retry}); err == nil {
		l.ActiveBacklog = counts[in.Queue] + counts[retry]
	}
	return l
}

// activeMoved blocks until the active broker is no longer index, or a spare changed its
// place in the producer's order since planned (brokerstate.SparesReordered: after a
// cancel, the producer's return to the active broker puts the canceled brokers behind
// it, and their backlog is then older than what it publishes here), and reports whether
// it saw that before ctx ended. The watcher's reading may lag a change the caller has
// already seen, so a reading that says "moved" is confirmed with a read of Postgres.
func (a *Window) activeMoved(ctx context.Context, index int, planned brokerstate.State) bool {
	brokers := indexes(a.Pool.Endpoints())
	moved := func(st brokerstate.State) bool {
		return st.ActiveIndex != index || brokerstate.SparesReordered(planned, st, brokers)
	}
	var gen uint64
	for {
		st, g, ok := a.Watcher.Next(ctx, gen)
		if !ok {
			return false
		}
		gen = g
		if !moved(st) {
			continue
		}
		if now, err := a.State.Load(ctx); err != nil || !moved(now) {
			continue // Postgres away, or a stale reading: keep reading what was planned
		}
		return true
	}
}

// consumerTag names the consumer after the activity so that the RabbitMQ management
// page says which workflow run holds a queue.
func consumerTag(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return fmt.Sprintf("%s/%s/%d", info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.Attempt)
}

// pinging is a window's HealthChecks pings: a start, and every pingEvery a success and a
// new start, so that a check sees a long window as alive.
type pinging struct {
	mu   sync.Mutex
	run  *healthchecks.Run
	stop chan struct{}
	done chan struct{}
}

func newPinging(ctx context.Context, p *healthchecks.Pinger) *pinging {
	pg := &pinging{run: p.Start(ctx), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(pg.done)
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-pg.stop:
				return
			case <-t.C:
				pg.mu.Lock()
				pg.run.Success(ctx)
				pg.run = p.Start(ctx)
				pg.mu.Unlock()
			}
		}
	}()
	return pg
}

func (pg *pinging) end() *healthchecks.Run {
	close(pg.stop)
	<-pg.done
	return pg.run
}

func (pg *pinging) success(ctx context.Context) { pg.end().Success(ctx) }

func (pg *pinging) fail(ctx context.Context, kind healthchecks.Kind) { pg.end().Fail(ctx, kind) }
