//go:build integration

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/simulate"
)

// takeoverBound is the longest a killed worker's queues may stand still at the default
// WORKER_LEASE_TTL: the lease expires, a peer fails the attempts it held, and Temporal
// retries them at once on the peer.
const takeoverBound = 15 * time.Second

// A worker killed with SIGKILL in the middle of a backlog holds its windows' attempts in
// Temporal's eyes; no heartbeat timeout frees them. The survivor sees the dead worker's
// lease expire, fails those attempts by task token, and Temporal retries them on the
// survivor: every queue the killed worker held is read again within takeoverBound, with
// nothing lost, duplicated or reordered. Then the survivor is killed too, and the first
// worker to start takes every queue over as fast. Windows last two hours here, the
// default's order, so nothing but the lease moves them.
func TestAKilledWorkersQueuesAreTakenOverWithinSeconds(t *testing.T) {
	// A small prefetch keeps batches small, so the backlog lasts long enough to be killed
	// in: at the default (200) both workers applied all of it before the kill.
	s := newStack(t, 1, map[string]string{"CONSUMER_WINDOW": "2h", "PREFETCH": "10"})
	p, log := s.producer(nil)
	msgs := s.workload(mixed(150, 93))
	ctx := context.Background()
	a := s.startWorkerProcess("a")
	b := s.startWorkerProcess("b")
	workers := map[string]*process{a.identity(): a, b.identity(): b}
	s.waitFor("every queue consumed", time.Minute, func() bool { return len(s.windowsHeld()) == len(s.Config.Queues) })

	third := len(msgs) / 3
	require.NoError(t, p.Publish(ctx, msgs[:2*third]...))
	// The first event applied is enough: the kill must find most of the backlog still to
	// apply, and the faster the consumers, the less a later mark leaves (at a quarter of a
	// third, a loaded run once found all of it applied by the kill).
	s.waitFor("the backlog being applied", time.Minute, func() bool { return s.deliveries() >= 1 })

	// The worker that holds the most windows dies.
	held := s.windowsHeld()
	victim := a
	if count(held, b.identity()) > count(held, a.identity()) {
		victim = b
	}
	var victimQueues []string
	for q, w := range held {
		if w == victim.identity() {
			victimQueues = append(victimQueues, q)
		}
	}
	require.NotEmpty(t, victimQueues)
	require.Less(t, s.deliveries(), int64(2*third), "the kill comes in the middle of the backlog")
	victim.Kill()
	killed := time.Now()
	var survivor *process
	for id, w := range workers {
		if id != victim.identity() {
			survivor = w
		}
	}
	s.waitAllHeldBy("the survivor", survivor, 2*takeoverBound)
	tookOver := time.Since(killed)
	t.Logf("the survivor took queues %v over %s after the kill", victimQueues, tookOver.Round(100*time.Millisecond))
	require.Less(t, tookOver, takeoverBound)

	// Every worker dies; the next one to start takes the queues over as fast.
	survivor.Kill()
	c := s.startWorkerProcess("c")
	started := time.Now()
	s.waitAllHeldBy("the new worker", c, 2*takeoverBound)
	restarted := time.Since(started)
	t.Logf("a worker started after every worker died took the queues over %s after its start", restarted.Round(100*time.Millisecond))
	require.Less(t, restarted, takeoverBound)

	require.NoError(t, p.Publish(ctx, msgs[2*third:]...))
	s.report(s.verify(log, 2*time.Minute), "-")
	s.requireWindowsRunning()
}

// windowsHeld says, per queue, which live worker (its identity) holds the queue's
// consume attempt, from the workers' leases.
func (s *stack) windowsHeld() map[string]string {
	s.t.Helper()
	var rows []struct{ Queue, Identity string }
	require.NoError(s.t, s.WorkerDB.Raw(`SELECT a.queue, l.identity FROM lease_attempts a JOIN worker_leases l USING (lease_id)
		WHERE a.activity_type = 'Consume' AND l.expires_at > now()`).Scan(&rows).Error)
	out := map[string]string{}
	for _, r := range rows {
		out[r.Queue] = r.Identity
	}
	return out
}

// waitAllHeldBy waits until worker w holds every queue's window.
func (s *stack) waitAllHeldBy(who string, w *process, within time.Duration) {
	s.t.Helper()
	s.waitFor(who+" to hold every window", within, func() bool {
		now := s.windowsHeld()
		for _, q := range s.Config.Queues {
			if now[q] != w.identity() {
				return false
			}
		}
		return true
	})
}

func count(held map[string]string, identity string) int {
	n := 0
	for _, w := range held {
		if strings.EqualFold(w, identity) {
			n++
		}
	}
	return n
}

// stragglerBound is how soon a straggler on a spare the producer left is applied at the
// default SPARE_CHECK_INTERVAL, however long the window reading the active broker lasts.
const stragglerBound = time.Minute

// A straggler lands on the broker the producer left after the switch committed (a message
// an operator moved back from -error, or one back from -retry): the window reading the new broker counts that spare,
// ends, and its successor's Leftover Drain applies it, within a minute. Windows last two
// hours here, so nothing else ends them.
func TestAStragglerOnASpareIsAppliedWithinAMinute(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "2h"})
	p, log := s.producer(nil)
	msgs := s.workload(mixed(4, 94))
	ctx := context.Background()
	s.StartWorker()
	require.NoError(t, p.Publish(ctx, msgs...))
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	s.waitFor("the switch to broker 1", time.Minute, func() bool { return s.Switched(1) })
	s.waitFor("every window on broker 1", time.Minute, func() bool { ok, _ := s.Consumed(1); return ok })
	s.waitFor("the backlog applied", time.Minute, func() bool { return s.deliveries() == int64(len(msgs)) })

	// A consumer's nack put it in broker 0's issues-retry; RETRY_TTL later the broker
	// dead-letters it back to issues, with its x-death: a straggler, older than anything
	// on broker 1.
	straggler := s.workload(simulate.Workload{Issues: 1, RunID: "straggler"})[0]
	straggler.RoutingKey = "issues-retry"
	require.NoError(t, p.PublishTo(ctx, 0, straggler))
	published := time.Now()
	s.waitFor("the straggler applied", 2*stragglerBound, func() bool { return s.deliveries() == int64(len(msgs)+1) })
	took := time.Since(published)
	t.Logf("the straggler on broker 0 was applied %s after its publish to issues-retry (RETRY_TTL %s)", took.Round(100*time.Millisecond), s.Config.RetryTTL)
	require.Less(t, took, stragglerBound)
	s.report(s.verify(log, time.Minute), "-")
}
