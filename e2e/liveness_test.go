//go:build integration

package e2e

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// takeoverBound is the longest a killed worker's queues may stand still at the default
// WORKER_LEASE_TTL: the lease expires, a peer fails the attempts it held, and Temporal
// retries them at once on the peer.
const takeoverBound = 15 * time.Second

// outlastEveryTimeout is how long a paused or cut-off worker stays so before it wakes: about
// three times the longest of what it must outlast, its lease (WORKER_LEASE_TTL, 8 s), RabbitMQ's
// drop of its silent connections (about 9 s at AMQP_HEARTBEAT's 3 s) and Postgres' end of
// its session (DB_IDLE_IN_TRANSACTION_TIMEOUT and the silent-link timeouts, 5 s).
const outlastEveryTimeout = 30 * time.Second

// A worker killed with SIGKILL in the middle of a backlog holds its windows' attempts in
// Temporal's eyes; no heartbeat timeout frees them. The survivor sees the dead worker's
// lease expire, fails those attempts by task token, and Temporal retries them on the
// survivor: every queue the killed worker held is read again within takeoverBound, with
// nothing lost, duplicated or reordered. Then the survivor is killed too, and the first
// worker to start takes every queue over as fast. Windows last two hours here, the
// default's order, so nothing but the lease moves them.
func TestAKilledWorkersQueuesAreTakenOverWithinSeconds(t *testing.T) {
	r := startBacklog(t, 93, nil)
	s, a, b := r.s, r.a, r.b
	victim := r.busier()
	victimQueues := r.heldBy(victim)
	require.Less(t, s.deliveries(), int64(2*len(r.msgs)/3), "the kill comes in the middle of the backlog")
	victim.Kill()
	killed := time.Now()
	survivor := a
	if victim == a {
		survivor = b
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

	r.publishRest()
	s.report(s.verify(r.log, 2*time.Minute), "-")
	s.requireWindowsRunning()
}

// backlogRun is two worker processes, a and b, reading a stack's queues, with two thirds
// of a workload published and its first event applied.
type backlogRun struct {
	s    *stack
	p    *simulate.Producer
	log  string
	msgs []simulate.Message
	a, b *process
}

// startBacklog starts a backlogRun of mixed(150, seed), worker a with the environment
// envA returns (nil: none) over the stack's. A small prefetch keeps batches small, so the backlog lasts long
// enough to be cut into: at the default (200) both workers applied all of it first.
// Windows last two hours, the default's order, so nothing but the lease moves them.
func startBacklog(t *testing.T, seed uint64, envA func(*stack) map[string]string) *backlogRun {
	s := newStack(t, 1, map[string]string{"CONSUMER_WINDOW": "2h", "PREFETCH": "10"})
	p, log := s.producer(nil)
	r := &backlogRun{s: s, p: p, log: log, msgs: s.workload(mixed(150, seed))}
	var env map[string]string
	if envA != nil {
		env = envA(s)
	}
	r.a = s.startWorkerProcessWith("a", env)
	// a holds windows before b starts: a test may need a fault of a's to cut something.
	s.waitFor("worker a reading", time.Minute, func() bool { return count(s.windowsHeld(), r.a.identity()) > 0 })
	r.b = s.startWorkerProcess("b")
	s.waitFor("every queue consumed", time.Minute, func() bool { return len(s.windowsHeld()) == len(s.Config.Queues) })
	require.NoError(t, p.Publish(context.Background(), r.msgs[:2*len(r.msgs)/3]...))
	// The first event applied is enough: the fault must find most of the backlog still
	// to apply, and the faster the consumers, the less a later mark leaves.
	s.waitFor("the backlog being applied", time.Minute, func() bool { return s.deliveries() >= 1 })
	return r
}

// publishRest publishes the last third of the workload.
func (r *backlogRun) publishRest() {
	require.NoError(r.s.t, r.p.Publish(context.Background(), r.msgs[2*len(r.msgs)/3:]...))
}

// busier is the worker that holds the most windows.
func (r *backlogRun) busier() *process {
	held := r.s.windowsHeld()
	if count(held, r.b.identity()) > count(held, r.a.identity()) {
		return r.b
	}
	return r.a
}

// heldBy lists the queues whose window w holds.
func (r *backlogRun) heldBy(w *process) []string {
	var queues []string
	for q, id := range r.s.windowsHeld() {
		if id == w.identity() {
			queues = append(queues, q)
		}
	}
	require.NotEmpty(r.s.t, queues)
	return queues
}

// readAgainWithin waits until every queue of queues has a delivery applied by an attempt
// that started after since, and requires it within takeoverBound.
func (r *backlogRun) readAgainWithin(queues []string, since time.Time, what string) {
	r.s.waitFor("the survivor to read every queue the "+what+" worker held", 2*takeoverBound, func() bool {
		return len(r.s.readSince(since, queues)) == len(queues)
	})
	tookOver := time.Since(since)
	r.s.t.Logf("the survivor read queues %v of the %s worker again %s after", queues, what, tookOver.Round(100*time.Millisecond))
	require.Less(r.s.t, tookOver, takeoverBound)
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

// A worker paused with SIGSTOP in the middle of a backlog (a frozen VM, a container
// throttled to nothing) dies in nobody's eyes: its sockets stay open, its Postgres
// transaction may sit between a batch's two exchanges with its ledger claims and row
// locks, and RabbitMQ keeps its exclusive consumers. Postgres ends its idle transaction,
// RabbitMQ drops its silent connections a few heartbeats later, and the survivor reaps its
// lease and reads every queue it held again within takeoverBound, as for a killed worker.
// When it wakes, its late batches are refused (the queues' fencing tokens advanced), and
// nothing is lost, duplicated or reordered.
func TestAPausedWorkersQueuesAreTakenOverWithinSeconds(t *testing.T) {
	r := startBacklog(t, 94, nil)
	victim := r.busier()
	victimQueues := r.heldBy(victim)
	victim.Pause()
	paused := time.Now()
	t.Cleanup(victim.Resume)
	r.publishRest() // every queue has something to read after the pause
	r.readAgainWithin(victimQueues, paused, "paused")

	// Paused for longer than its lease, its transaction and its connections last: when it
	// wakes, what it still holds is given back or refused.
	r.s.waitFor("the pause to outlast every timeout", time.Minute, func() bool { return time.Since(paused) > outlastEveryTimeout })
	victim.Resume()
	r.s.report(r.s.verify(r.log, 2*time.Minute), "-")
	r.s.requireWindowsRunning()
}

// readSince lists those of queues that have a delivery applied by an attempt that started
// after since (the ledger's received_at).
func (s *stack) readSince(since time.Time, queues []string) []string {
	s.t.Helper()
	var read []string
	require.NoError(s.t, s.DB.Raw(`SELECT DISTINCT queue FROM github_deliveries WHERE received_at > ? AND queue IN ?`,
		since, queues).Scan(&read).Error)
	return read
}

// A worker whose links to Postgres, to RabbitMQ and to Temporal all go silent without
// closing (a partition, a lost NAT entry) keeps its sockets, its transaction and its
// consumers in its own eyes. Postgres' keepalives and idle-transaction timeout end its
// session, RabbitMQ's heartbeat drops its connection, its lease expires, and the survivor
// reads every queue it held again within takeoverBound. When the links speak again, its
// late batches are refused or find their channel gone, and nothing is lost, duplicated or
// reordered.
func TestACutOffWorkersQueuesAreTakenOverWithinSeconds(t *testing.T) {
	var links []*testenv.Proxy
	r := startBacklog(t, 95, func(s *stack) (env map[string]string) {
		links, env = s.proxiedLinks()
		return env
	})
	cutQueues := r.heldBy(r.a)
	for _, l := range links {
		l.Silence()
	}
	silenced := time.Now()
	r.publishRest()
	r.readAgainWithin(cutQueues, silenced, "cut-off")

	r.s.waitFor("the silence to outlast every timeout", time.Minute, func() bool { return time.Since(silenced) > outlastEveryTimeout })
	for _, l := range links {
		l.Speak()
	}
	r.s.report(r.s.verify(r.log, 2*time.Minute), "-")
	r.s.requireWindowsRunning()
}

// proxiedLinks puts a proxy of its own in front of each service a worker reaches
// (Postgres, every broker, Temporal), and returns them with the environment that sends a
// worker through them.
func (s *stack) proxiedLinks() ([]*testenv.Proxy, map[string]string) {
	s.t.Helper()
	var links []*testenv.Proxy
	through := func(hostPort string) string {
		p := testenv.NewProxy(s.t, hostPort)
		links = append(links, p)
		return p.Addr()
	}
	viaURL := func(raw string) string {
		u, err := url.Parse(raw)
		require.NoError(s.t, err)
		u.Host = through(u.Host)
		return u.String()
	}
	var brokers []string
	for _, raw := range strings.Split(s.Env["RABBITMQ_CONNECTION_STRINGS"], ",") {
		brokers = append(brokers, viaURL(raw))
	}
	env := map[string]string{
		"DATABASE_URL":                viaURL(s.Env["DATABASE_URL"]),
		"RABBITMQ_CONNECTION_STRINGS": strings.Join(brokers, ","),
		"TEMPORAL_ADDRESS":            through(s.Env["TEMPORAL_ADDRESS"]),
	}
	return links, env
}
