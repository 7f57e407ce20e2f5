package activities

import (
	"context"
	"errors"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
)

// A window on a broker the producer has left (a Pending Switch away from it is recorded)
// lets go of its consumer whenever its queue is quiet, and takes it again when something
// comes: retries coming back, or the producer returning. The drain check that lets the
// hop commit can then see each queue idle, nothing ready and no consumer, so that nothing
// of it was in a window's hands; the commit dates it seen empty, and what comes to it
// afterwards is read as the producer's future (brokerstate.DrainCheck.Idle).
const (
	// releaseAfter is how long a leaving window's queue stays quiet before it lets go.
	releaseAfter = 250 * time.Millisecond
	// releasedRecount is how soon a window that let go first counts its queue; the pause
	// doubles up to releasedRecountMax while nothing comes, since a hop may be held for
	// long (UNNOTIFIED_BROKER_GRACE), and each count opens a channel.
	releasedRecount    = 250 * time.Millisecond
	releasedRecountMax = 2 * time.Second
)

// errQuiet ends a leaving window's consumer, not the window.
var errQuiet = errors.New("the broker the producer left is quiet: the window lets go of its consumer")

// release is one window's watch over whether, and when, it lets go of its consumer.
type release struct {
	queue string
	index int
	pool  interface {
		ReadyCounts(ctx context.Context, index int, queues []string) (map[string]int, error)
	}

	mu        sync.Mutex
	isLeaving bool
	changed   chan struct{} // closed and replaced when isLeaving changes
	busy      int           // batches in the handler
	last      time.Time     // when the last batch ended, or the consumer was taken
	// owed is true while a consumer taken because a count showed work has had no batch:
	// a delivery already sent to it is no longer ready, yet may still be on its way (a
	// large body on a slow link), and letting go would send it back, again and again.
	owed bool
}

// watchRelease starts watching the state for in's broker being left, until ctx ends.
func (a *Window) watchRelease(ctx context.Context, in ConsumeInput, planned brokerstate.State) *release {
	r := &release{queue: in.Queue, index: in.BrokerIndex, pool: a.Pool, changed: make(chan struct{})}
	r.set(leaves(planned, in.BrokerIndex))
	go func() {
		var gen uint64
		for {
			st, g, ok := a.Watcher.Next(ctx, gen)
			if !ok {
				return
			}
			gen = g
			r.set(leaves(st, in.BrokerIndex)) // a view that may lag: it only says when to let go
		}
	}()
	return r
}

// leaves tells whether st has the producer gone from broker index: a Pending Switch
// away from it, or another broker active (the window ends then; it takes no consumer
// on the way).
func leaves(st brokerstate.State, index int) bool {
	return st.Pending != nil || st.ActiveIndex != index
}

func (r *release) set(leaving bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.isLeaving != leaving {
		r.isLeaving = leaving
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

func (r *release) leaving() (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isLeaving, r.changed
}

// awaitWork returns once the window should hold a consumer: the producer has not left
// the broker, or the queue has something ready (or cannot be counted: the consumer says
// why); false when ctx ended first.
func (r *release) awaitWork(ctx context.Context) bool {
	for wait := releasedRecount; ; wait = min(2*wait, releasedRecountMax) {
		leaving, changed := r.leaving()
		if !leaving {
			r.mu.Lock()
			r.owed = false
			r.mu.Unlock()
			return true
		}
		if counts, err := r.pool.ReadyCounts(ctx, r.index, []string{r.queue}); err != nil || counts[r.queue] > 0 {
			r.mu.Lock()
			r.owed = err == nil
			r.mu.Unlock()
			return ctx.Err() == nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// consuming is ctx for one consumer, which ends with errQuiet once the producer has left
// the broker and no batch came for releaseAfter, and h, which tells it of each batch.
// stop ends the watch.
func (r *release) consuming(ctx context.Context, h broker.BatchHandler) (_ context.Context, _ broker.BatchHandler, stop func()) {
	ctx, end := context.WithCancelCause(ctx)
	r.mu.Lock()
	r.last = time.Now()
	r.mu.Unlock()
	go tickUntil(ctx, releaseAfter/4, func() bool {
		// Quiet again after the count: a batch that began meanwhile keeps the consumer.
		if r.quiet() && r.empty(ctx) && r.quiet() {
			end(errQuiet)
			return true
		}
		return false
	})
	counted := broker.BatchHandlerFunc(func(ctx context.Context, queue string, ds []amqp.Delivery) ([]broker.Verdict, error) {
		r.mu.Lock()
		r.busy++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.busy--
			r.last, r.owed = time.Now(), false
			r.mu.Unlock()
		}()
		return h.HandleBatch(ctx, queue, ds)
	})
	return ctx, counted, func() { end(nil) }
}

// quiet tells whether a leaving window's consumer has had nothing for releaseAfter.
func (r *release) quiet() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isLeaving && r.busy == 0 && !r.owed && time.Since(r.last) >= releaseAfter
}

// empty tells whether the queue has nothing ready, so that letting go leaves nothing the
// consumer was about to take: a consumer slow to subscribe (a loaded machine, a quorum
// queue) has had no batch for a while, yet the queue holds work for it. A count that fails keeps the consumer; either way the next
// count waits another releaseAfter.
func (r *release) empty(ctx context.Context) bool {
	counts, err := r.pool.ReadyCounts(ctx, r.index, []string{r.queue})
	if err == nil && counts[r.queue] == 0 {
		return true
	}
	r.mu.Lock()
	r.last = time.Now()
	r.mu.Unlock()
	return false
}

// released tells whether ctx, from consuming, ended because the window let go.
func released(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errQuiet)
}
