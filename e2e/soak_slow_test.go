//go:build integration

package e2e

// The soak's faults of a world that is slow rather than dead: a worker paused, a
// worker's link gone silent without closing, and the first word of a double rotation
// arriving after the second hop committed or while it waits for that word.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// workerLinks are the proxies of one worker's own links, each in front of the stack's
// shared proxy (which the schedule's cuts act on) or the Temporal dev server: a silence
// here is this worker's alone.
type workerLinks struct {
	postgres *testenv.Proxy
	brokers  []*testenv.Proxy
	temporal *testenv.Proxy
}

// newWorkerLinks puts a proxy of the worker's own in front of each service it reaches
// (stack.proxiedLinks: every broker, then Postgres, then Temporal) and returns them with
// the environment that sends it through them.
func (r *soakRun) newWorkerLinks() (workerLinks, map[string]string) {
	t := r.t
	t.Helper()
	links, env := r.s.proxiedLinks()
	n := len(links) - 2
	l := workerLinks{brokers: links[:n], postgres: links[n], temporal: links[n+1]}
	require.Contains(t, env["DATABASE_URL"], l.postgres.Addr(), "the links come brokers first, then Postgres")
	require.Equal(t, env["TEMPORAL_ADDRESS"], l.temporal.Addr(), "the links end with Temporal")
	return l, env
}

// pauseWorker plays stepPauseWorker: the worker stops without dying (SIGSTOP), its
// sockets open, its transaction and consumers held in its own eyes; the producer publishes
// a burst its peers must read, and it wakes (SIGCONT) st.pause after it stopped, when
// what it still does must be refused or harmless.
func (r *soakRun) pauseWorker(st step) {
	w := r.workers[st.worker]
	w.proc.Pause()
	defer w.proc.Resume()
	r.slowFor(st, time.Now())
}

// silenceLink plays stepSilenceLink: the worker's links of the step stop forwarding,
// both ways, without closing, for st.pause, while the producer publishes a burst.
func (r *soakRun) silenceLink(st step) {
	links := r.workers[st.worker].links.silenced(st)
	for _, l := range links {
		l.Silence()
	}
	defer func() {
		for _, l := range links {
			l.Speak()
		}
	}()
	r.slowFor(st, time.Now())
}

// silenced are the links of stepSilenceLink's kind.
func (l workerLinks) silenced(st step) []*testenv.Proxy {
	switch st.link {
	case linkPostgres:
		return []*testenv.Proxy{l.postgres}
	case linkBroker:
		return []*testenv.Proxy{l.brokers[st.broker]}
	case linkTemporal:
		return []*testenv.Proxy{l.temporal}
	}
	return append(slices.Clone(l.brokers), l.postgres, l.temporal)
}

// slowFor publishes the step's burst and lets the fault that began at began last for
// st.pause: nothing is awaited, the fault is what the step is about.
func (r *soakRun) slowFor(st step, began time.Time) {
	require.NoError(r.t, r.p.Publish(context.Background(), r.s.workload(st.burst)...))
	time.Sleep(time.Until(began.Add(st.pause)))
}

// rotateReversedLate plays stepRotateReversedLate: the producer rotates to st.active
// (publishing half the burst there, rounded up, unless firstEmpty) and on to st.broker, publishing the
// rest, and notifies st.broker; the first word is sent only once the hop to st.broker
// committed or a drain check shows it held for st.active's messages.
func (r *soakRun) rotateReversedLate(st step) {
	t, s, p := r.t, r.s, r.p
	ctx := context.Background()
	msgs := s.workload(st.burst)
	first := r.rotateUnannounced(st.active)
	if !st.firstEmpty {
		// At least one message, so that the first broker holds what the hop must wait for.
		half := (len(msgs) + 1) / 2
		require.NoError(t, p.Publish(ctx, msgs[:half]...))
		msgs = msgs[half:]
	}
	second := r.rotateUnannounced(st.broker)
	require.NoError(t, p.Publish(ctx, msgs...))
	r.notify(second)
	s.waitUntil(fmt.Sprintf("the hop to broker %d committed, or held for broker %d", st.broker, st.active), 2*time.Minute, func() (bool, string) {
		r.supervise()
		state := s.State()
		if state.ActiveIndex == st.broker && state.Pending == nil {
			return true, ""
		}
		var held []int
		if c := state.LastDrainCheck; c != nil {
			for _, h := range c.HeldBy {
				if h.Broker == st.active {
					return true, ""
				}
				held = append(held, h.Broker)
			}
		}
		return false, fmt.Sprintf("active %d, pending %v, held by %v", state.ActiveIndex, state.Pending != nil, held)
	})
	state := s.State()
	t.Logf("broker %d's word sent late: active %d, pending %v", st.active, state.ActiveIndex, state.Pending != nil)
	r.notify(first)
}
