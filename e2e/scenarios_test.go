//go:build integration

package e2e

// The scenarios that prove no event is lost, applied twice or reordered across broker
// switches and faults. Each drives the producer simulator, lets the real service consume,
// and hands the simulator's log to the oracle (oracle_test.go), which compares it with
// Postgres and every broker's queues; each prints one SUMMARY line, and TestMain prints
// them all as a table at the end.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// mixed is a workload across the four queues, about 25 messages per unit of n.
func mixed(n int, seed uint64) simulate.Workload {
	return simulate.Workload{PullRequests: n, Issues: n, Pushes: 3 * n, Branches: n / 2, Installations: n / 2, Ignored: n / 2, Seed: seed}
}

// Scenario 1. Steady state on one broker: thousands of events across the four queues,
// published while the worker consumes; every one applied once, in publish order.
func TestScenario01SteadyStateOnOneBroker(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, nil)
	p, log := s.producer(nil)
	msgs := s.workload(simulate.Workload{PullRequests: 60, Issues: 80, Pushes: 400, Branches: 60, Installations: 60, Ignored: 60, Seed: 1})
	ctx := context.Background()
	s.StartWorker()
	require.NoError(t, p.Publish(ctx, msgs[:len(msgs)/2]...))
	require.NoError(t, p.Publish(ctx, msgs[len(msgs)/2:]...))
	s.report(s.verify(log, 2*time.Minute), "-")
}

// Scenario 2. The producer rotates with a backlog on the old broker: nothing from the new
// broker is applied before the old one is drained, and the flip follows within seconds.
func TestScenario02RotationWithABacklog(t *testing.T) {
	s := newStack(t, 2, nil)
	p, log := s.producer(nil)
	msgs := s.workload(mixed(40, 2))
	ctx := context.Background()
	backlog := len(msgs) * 2 / 3
	require.NoError(t, p.Publish(ctx, msgs[:backlog]...))
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)

	s.StartWorker()
	require.NoError(t, p.Publish(ctx, msgs[backlog:]...)) // the new broker fills while the old drains
	s.waitFor("the switch to broker 1", time.Minute, func() bool { return s.Switched(1) })
	v := s.verify(log, time.Minute)
	s.requireFlipAfterDrain(0, 1)
	// The windows on broker 0 let go of their consumers once its backlog was read, so the
	// drain check that let the hop commit saw every queue idle, and the commit dated them
	// seen empty: an unannounced return to 0 would wait for its word.
	check := s.State().LastDrainCheck
	require.NotNil(t, check)
	require.Equal(t, 0, check.BrokerIndex)
	require.ElementsMatch(t, s.Config.Queues, check.Idle, "the queues of broker 0 seen idle at the committing check")
	lag := s.lagOf()
	s.report(v, lag)
	requireLagUnder(t, lag, 10*time.Second)
}

// Scenario 3. A message waiting in the old broker's -retry queue holds the switch until it
// has come back and been applied from the old broker.
func TestScenario03RetryTailHoldsTheSwitch(t *testing.T) {
	t.Parallel()
	const retryTTL = 4 * time.Second
	s := newStack(t, 2, map[string]string{"RETRY_TTL": retryTTL.String()})
	p, log := s.producer(nil)
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(4, 3))...))
	// The tail: as if a consumer had nacked it just before the rotation.
	tail := s.workload(simulate.Workload{Issues: 1, RunID: "tail"})[0]
	tail.RoutingKey = "issues-retry"
	require.NoError(t, p.PublishTo(ctx, 0, tail))
	tailAt := time.Now()
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 4))...))

	s.StartWorker()
	sawTail := false
	s.waitFor("the switch once the tail is applied", time.Minute, func() bool {
		st := s.State()
		if c := st.LastDrainCheck; c != nil && c.Counts["issues-retry"] == 1 && st.ActiveIndex == 0 {
			sawTail = true
		}
		return st.ActiveIndex == 1
	})
	t.Logf("a drain check saw the tail in issues-retry: %v", sawTail)

	v := s.verify(log, time.Minute)
	var tailRow models.Delivery
	require.NoError(t, s.DB.First(&tailRow, "delivery_id = ?", tail.DeliveryID).Error)
	last := s.State().LastSwitch
	require.Equal(t, 0, tailRow.BrokerIndex, "the tail was read from the old broker")
	require.True(t, last.CompletedAt.After(tailAt.Add(retryTTL)), "the switch waited for the tail to come back from -retry")
	// A drain check counts ready messages, so the switch may commit while the tail is in
	// the old window's last batch, or, when it expires between the reads of issues and
	// issues-retry, while it waits in issues for the Leftover Drain. Either way it is
	// applied before anything from the new broker on its queue: that is the promise.
	var firstNew *time.Time
	require.NoError(t, s.DB.Raw("SELECT min(applied_at) FROM github_deliveries WHERE broker_index = 1 AND queue = ? AND outcome <> 'error'",
		tailRow.Queue).Scan(&firstNew).Error)
	require.NotNil(t, firstNew, "broker 1's events on %s were applied", tailRow.Queue)
	t.Logf("tail applied at %s, switch committed at %s, first event from broker 1 on %s applied at %s",
		tailRow.AppliedAt.Format("15:04:05.000"), last.CompletedAt.Format("15:04:05.000"), tailRow.Queue, firstNew.Format("15:04:05.000"))
	require.True(t, tailRow.AppliedAt.Before(*firstNew), "the tail was applied before the new broker's events on its queue")
	s.requireFlipAfterDrain(0, 1)
	s.report(v, s.lagOf())
}

// Scenario 4. A message nacked into the old broker's -retry queue after the flip comes
// back to the old queue, where the Leftover Drain of a later window collects it.
func TestScenario04LeftoverDrainCollectsAStraggler(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "3s"})
	p, log := s.producer(nil)
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 5))...))
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	s.StartWorker()
	s.waitFor("the switch to broker 1", 30*time.Second, func() bool { return s.State().ActiveIndex == 1 })
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 6))...))

	straggler := s.workload(simulate.Workload{Issues: 1, RunID: "straggler"})[0]
	straggler.RoutingKey = "issues-retry"
	require.NoError(t, p.PublishTo(ctx, 0, straggler))
	v := s.verify(log, time.Minute)
	var row models.Delivery
	require.NoError(t, s.DB.First(&row, "delivery_id = ?", straggler.DeliveryID).Error)
	require.Equal(t, 0, row.BrokerIndex, "the straggler was taken from the old broker")
	require.True(t, row.AppliedAt.After(s.State().LastSwitch.CompletedAt), "after the flip")
	s.report(v, s.lagOf())
}

// Scenario 5. The producer rotates twice (A→B→C) before the first switch completes: the
// switch goes hop by hop and every broker's events are applied in turn.
func TestScenario05DoubleRotationHopByHop(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3, nil)
	msgs := s.workload(mixed(40, 7))
	p, log := s.producer(func(c *simulate.Config) { c.RotateAfter = len(msgs)/3 + 1; c.Notify = simulate.NotifyNow })
	require.NoError(t, p.Publish(context.Background(), msgs...))
	require.Equal(t, 2, p.Active())

	s.StartWorker()
	s.waitFor("both hops", time.Minute, func() bool { return s.Switched(2) })
	v := s.verify(log, time.Minute)
	s.requireFlipAfterDrain(0, 1)
	s.requireFlipAfterDrain(1, 2)
	require.Equal(t, 1, s.State().LastSwitch.From, "the last hop left broker 1")
	s.report(v, s.lagOf())
}

// Scenario 6. Duplicate, stale and out-of-order notifications, and one for an endpoint
// nobody configured, move nothing.
func TestScenario06NotificationsThatMoveNothing(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3, nil)
	p, log := s.producer(func(c *simulate.Config) { c.Notify = simulate.NotifyTwice; c.NotifyUnknown = true })
	ctx := context.Background()
	s.StartWorker()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 8))...))
	before := time.Now().Add(-time.Minute)
	toB, err := p.Rotate(ctx, 1) // notified twice, then an unknown endpoint: 202, 200 stale, 404
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 9))...))
	s.waitFor("the switch to broker 1", 30*time.Second, func() bool { return s.Switched(1) })
	notes := p.Log().Notifications
	require.Len(t, notes, 3)
	require.Equal(t, []string{"recorded", "stale", ""}, []string{notes[0].Outcome, notes[1].Outcome, notes[2].Outcome})
	require.Equal(t, http.StatusNotFound, notes[2].Status)

	settled := s.State()
	for _, n := range []simulate.Notice{
		toB,                         // a late duplicate from the producer's retry queue
		p.NoticeFor(2, before),      // out of order: older than the switch on record
		p.NoticeFor(0, before),      // back to the start, older still
		p.UnknownNotice(time.Now()), // an endpoint nobody configured
	} {
		_, err := p.Notify(ctx, n)
		require.NoError(t, err)
	}
	st := s.State()
	require.Equal(t, settled.ActiveIndex, st.ActiveIndex)
	require.Nil(t, st.Pending)
	require.Equal(t, settled.LastSwitch, st.LastSwitch)
	require.True(t, settled.SeenUntil.Equal(st.SeenUntil), "stale notifications do not advance what was seen")
	for _, n := range p.Log().Notifications[3:6] {
		require.Equal(t, "stale", n.Outcome, "notification for %s", n.Vhost)
	}
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 10))...))
	s.report(s.verify(log, time.Minute), s.lagOf())
}

// Scenario 7. The operator forces a switch while the old broker still drains, over HTTP
// and from the Temporal CLI, and cancels a Pending Switch: the Leftover Drain still
// applies the old broker's backlog before anything newer on its queue.
func TestScenario07ForcedSwitchMidDrainAndCancel(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3, map[string]string{"CONSUMER_WINDOW": "3s"})
	p, log := s.producer(nil)
	ctx := context.Background()

	// Forced by HTTP while broker 0 still has a backlog.
	require.NoError(t, p.Publish(ctx, s.workload(mixed(24, 11))...))
	backlog := int64(len(p.Records()))
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 12))...))
	s.StartWorker()
	s.waitFor("broker 0 draining", 30*time.Second, func() bool { return s.AppliedFrom(0) >= 50 })
	// The ledger is held while the operator forces, so that the force is mid-drain
	// however fast the rest of the backlog would otherwise go.
	release := s.holdLedger()
	status, body := s.Call(http.MethodPost, "/api/v1/broker/switch/1", stacktest.ProducerToken, "")
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = s.Call(http.MethodPost, "/api/v1/broker/switch/1", stacktest.OperatorToken, "")
	release()
	require.Equal(t, http.StatusOK, status, body)
	st := s.State()
	require.Equal(t, 1, st.ActiveIndex, "answered once committed")
	require.True(t, st.LastSwitch.Forced)
	require.Nil(t, st.Pending)
	// Broker 0's windows go on until they hear of the switch, and the Leftover Drain takes
	// the rest: what shows the switch came mid-drain is what was applied when it committed.
	atSwitch := s.appliedFromUntil(0, st.LastSwitch.CompletedAt)
	t.Logf("forced after %d of broker 0's %d messages", atSwitch, backlog)
	require.Less(t, atSwitch, backlog, "the switch was forced mid-drain")

	// Forced from the Temporal CLI, as an operator types it, while broker 1 still drains.
	require.NoError(t, p.Publish(ctx, s.workload(mixed(16, 13))...))
	n, err = p.Rotate(ctx, 2)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(6, 14))...))
	s.temporalCLI("workflow", "signal", "--workflow-id", workflows.BrokerSwitchWorkflowID,
		"--name", workflows.SignalForceSwitch, "--input", `{"index": 2}`)
	s.waitFor("the forced switch to 2", 30*time.Second, func() bool { return s.Switched(2) })

	// Cancelled, over HTTP and from the CLI: the producer went back to 0, broker 2 cannot be
	// checked meanwhile, and the operator drops the Pending Switch; nothing moves, and the
	// Leftover Drain reads broker 0, which is no longer on a route. A cancel gives up on
	// following the producer, so the order holds only because broker 2 was drained first:
	// after a cancel, the Leftover Drain reads the producer's newest messages first.
	s.waitFor("broker 2 drained", 30*time.Second, func() bool {
		return s.drained(2) && s.AppliedFrom(0)+s.AppliedFrom(1)+s.AppliedFrom(2) == int64(len(p.Records()))
	})
	s.Proxies[2].Cut()
	n, err = p.Rotate(ctx, 0)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(6, 15))...))
	s.waitFor("the pending switch to 0", 30*time.Second, func() bool { return s.State().Pending != nil })
	for range 2 { // idempotent
		status, body = s.Call(http.MethodDelete, "/api/v1/broker/pending-switch", stacktest.OperatorToken, "")
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	}
	s.waitFor("the cancel", 30*time.Second, func() bool { return s.State().Pending == nil })
	_, err = p.Notify(ctx, p.NoticeFor(0, time.Now())) // the producer's word again, newer
	require.NoError(t, err)
	s.waitFor("another pending switch to 0", 30*time.Second, func() bool { return s.State().Pending != nil })
	s.temporalCLI("workflow", "signal", "--workflow-id", workflows.BrokerSwitchWorkflowID, "--name", workflows.SignalCancelPendingSwitch)
	s.waitFor("the CLI's cancel", 30*time.Second, func() bool { return s.State().Pending == nil })
	require.Equal(t, 2, s.State().ActiveIndex, "a cancel does not move")
	s.Proxies[2].Restore(t)

	v := s.verify(log, time.Minute)
	s.report(v, "forced")
}

// Scenario 8. A spare broker is unreachable for the whole run; the active broker becomes
// unreachable while a switch is pending and comes back: the switch waits for it, and
// nothing it held is left behind.
func TestScenario08UnreachableBrokers(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3, map[string]string{"CONSUMER_WINDOW": "2s"})
	s.Proxies[2].Cut() // the spare, for the whole run
	p, log := s.producer(nil)
	ctx := context.Background()
	s.StartWorker()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 16))...))
	s.waitFor("several windows past the dead spare", 30*time.Second, func() bool { return s.windowRuns("issues") >= 3 })

	s.Proxies[0].Cut()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 17))...)) // published while we cannot see it
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 18))...))
	s.waitFor("a drain check that finds broker 0 unreachable", 30*time.Second, func() bool {
		c := s.State().LastDrainCheck
		return c != nil && !c.Reachable
	})
	require.Equal(t, 0, s.State().ActiveIndex)
	// The activity records the check in Postgres before the workflow sees its result.
	s.waitUntil("the workflow to say it waits for the unreachable broker", 30*time.Second, func() (bool, string) {
		waiting := s.switchStatus().Waiting
		return strings.Contains(waiting, "unreachable"), "waiting: " + waiting
	})

	s.Proxies[0].Restore(t)
	s.waitFor("the switch once broker 0 is back and drained", time.Minute, func() bool { return s.State().ActiveIndex == 1 })
	v := s.verify(log, time.Minute)
	s.requireFlipAfterDrain(0, 1)
	require.Empty(t, s.failedWindowRuns(), "no window failed")
	s.report(v, s.lagOf())
}

// Scenario 9. The worker process is killed (SIGKILL) in the middle of a window and
// started again: the batch in flight returns to the queue, nothing is lost and nothing
// applied twice.
func TestScenario09WorkerKilledMidWindow(t *testing.T) {
	t.Parallel() // it mostly waits for the dead worker's heartbeat to time out
	// Small batches, so that the backlog is many of them: at the default prefetch the
	// worker could apply all of it between two looks at the ledger.
	s := newStack(t, 1, map[string]string{"PREFETCH": "10"})
	p, log := s.producer(nil)
	ctx := context.Background()
	msgs := s.workload(mixed(44, 19))
	require.NoError(t, p.Publish(ctx, msgs...))
	first := s.startWorkerProcess("worker-1")
	s.waitFor("the worker into its window", time.Minute, func() bool { return s.AppliedFrom(0) >= 50 })
	// With the ledger held, the kill finds a batch in its transaction and the rest of the
	// backlog still to apply, however fast the worker is.
	release := s.holdLedger()
	s.waitFor("a batch waiting for the ledger", time.Minute, s.ledgerWaitedOn)
	first.Kill()
	release()
	applied := s.AppliedFrom(0)
	require.Less(t, applied, int64(len(msgs)), "killed mid-window")
	t.Logf("killed after %d of %d deliveries", applied, len(msgs))

	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 20))...))
	s.startWorkerProcess("worker-2")
	s.report(s.verify(log, 2*time.Minute), "-")
}

// Scenario 10. Postgres goes away mid-window (its connections cut, as a restart does):
// consuming pauses, nothing is pushed into -retry, and the order holds once it is back.
func TestScenario10PostgresRestartedMidWindow(t *testing.T) {
	t.Parallel()
	s := newStackWith(t, stacktest.Options{Brokers: 1, PGProxy: true})
	p, log := s.producer(nil)
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(36, 21))...))
	s.StartWorker()
	s.waitFor("the worker consuming", time.Minute, func() bool { return s.AppliedFrom(0) >= 150 })

	s.PGProxy.Cut() // closes every connection of the worker: its backends end as in a restart
	// A COMMIT a backend had already read still lands; once the backends are gone, nothing can.
	s.waitUntil("the worker's Postgres backends to end", 30*time.Second, func() (bool, string) {
		n := s.workerBackends()
		return n == 0, fmt.Sprintf("%d left", n)
	})
	during := s.AppliedFrom(0)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		require.Zero(t, s.retryAndErrorCount(0), "nothing is pushed into -retry or -error while Postgres is away")
		time.Sleep(250 * time.Millisecond)
	}
	require.Equal(t, during, s.AppliedFrom(0), "consuming pauses")
	s.PGProxy.Restore(t)

	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 22))...))
	v := s.verify(log, 2*time.Minute)
	require.Zero(t, s.retryAndErrorCount(0))
	s.report(v, "-")
}

// Scenario 11. The Temporal server restarts while a switch is pending: consuming goes on
// meanwhile, and the switch completes afterwards.
//
// The test decides that Temporal is down before broker 0 can be drained: one event waits
// in broker 0's issues-retry, which the drain check counts and no consumer reads, until
// the test lets it out after the stop. The rest of the backlog drains as fast as it can
// (with batches near 100, before the stop), and the switch still cannot commit first.
func TestScenario11TemporalRestartedWhileASwitchIsPending(t *testing.T) {
	t.Parallel() // it mostly waits for its own dev server
	dev := startDedicatedTemporal(t)
	// The held event goes back through -retry only when the test says: RETRY_TTL is the
	// service's default, not the tests' second. A worker consumes without Temporal until
	// three quarters of its lease are gone: a minute leaves room for a loaded machine's
	// slow stop.
	env := map[string]string{"RETRY_TTL": "10m", "WORKER_LEASE_TTL": "1m"}
	s := newStackWith(t, stacktest.Options{Brokers: 2, Temporal: dev.target(t), Env: env})
	p, log := s.producer(nil)
	ctx := context.Background()
	held := s.workload(simulate.Workload{Issues: 1, RunID: "held"})[0]
	held.RoutingKey = "issues-retry"
	require.NoError(t, p.PublishTo(ctx, 0, held))
	require.NoError(t, p.Publish(ctx, s.workload(mixed(40, 23))...))
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(10, 24))...))
	s.StartWorker()
	// Every queue's window must be consuming before Temporal goes: one that has not
	// started by then cannot start until Temporal is back, which a loaded machine showed.
	s.waitFor("every queue's window draining broker 0 under a pending switch", time.Minute, func() bool {
		var queues int64
		require.NoError(t, s.DB.Raw("SELECT count(DISTINCT queue) FROM github_deliveries WHERE broker_index = 0").Scan(&queues).Error)
		return s.State().Pending != nil && queues == int64(len(s.Config.Queues))
	})

	dev.stop(t)
	require.Equal(t, 0, s.State().ActiveIndex, "broker 0 holds the held event: nothing could commit the switch")
	require.Zero(t, s.deliveriesOf(held.DeliveryID), "the held event waits in issues-retry")
	s.letOutOfRetry(0, "issues-retry")
	s.waitFor("the held event applied without Temporal", 30*time.Second, func() bool { return s.deliveriesOf(held.DeliveryID) == 1 })
	s.waitFor("broker 0 drained without Temporal", 30*time.Second, func() bool { return s.drained(0) })
	require.Equal(t, 0, s.State().ActiveIndex, "nothing commits a switch while Temporal is down")
	dev.start(t)

	s.waitFor("the switch after the restart", 90*time.Second, func() bool { return s.Switched(1) })
	v := s.verify(log, time.Minute)
	s.requireFlipAfterDrain(0, 1)
	s.report(v, s.lagOf())
}

// deliveriesOf counts the ledger's rows of one delivery.
func (s *stack) deliveriesOf(id string) int64 {
	var n int64
	require.NoError(s.t, s.DB.Model(&models.Delivery{}).Where("delivery_id = ?", id).Count(&n).Error)
	return n
}

// letOutOfRetry sends the one message waiting in a -retry queue of broker index on along
// its dead-letter route to its queue, as its TTL running out would.
func (s *stack) letOutOfRetry(index int, retryQueue string) {
	s.t.Helper()
	ch, err := s.Direct.Channel(context.Background(), index)
	require.NoError(s.t, err)
	defer ch.Close()
	msg, ok, err := ch.Get(retryQueue, false)
	require.NoError(s.t, err)
	require.True(s.t, ok, "%s on broker %d holds a message", retryQueue, index)
	require.NoError(s.t, msg.Nack(false, false))
}

// Scenario 12. Poison messages (invalid JSON, a missing header) among good ones land in
// -error with a reason, and the stream goes on around them.
func TestScenario12PoisonAmongGoodMessages(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, nil)
	p, log := s.producer(nil)
	w := mixed(16, 25)
	w.Poison = 30
	require.NoError(t, p.Publish(context.Background(), s.workload(w)...))
	s.StartWorker()
	v := s.verify(log, time.Minute)
	require.Equal(t, 30, v.Poison)
	s.report(v, "-")
}

// Scenario 19. GitHub delivers one entity's events swapped: every pull request
// and issue has two consecutive events of its own published in reverse, their payloads
// keeping their true clocks, across a rotation with a backlog. Every delivery is in the
// ledger exactly once, and every row is what delivering the events in clock order leaves.
func TestScenario19GitHubDeliveredOutOfOrder(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, nil)
	p, log := s.producer(nil)
	w := mixed(30, 28)
	w.Swapped = w.PullRequests
	msgs := s.workload(w)
	ctx := context.Background()
	backlog := len(msgs) / 2
	require.NoError(t, p.Publish(ctx, msgs[:backlog]...))
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	s.StartWorker()
	require.NoError(t, p.Publish(ctx, msgs[backlog:]...))
	s.waitFor("the switch to broker 1", time.Minute, func() bool { return s.Switched(1) })
	v := s.verify(log, time.Minute)

	// The oracle applied its clock rule to the publish order; the rows must also be those
	// of the events replayed in clock order, where no event is older than its row.
	f, err := os.Open(log)
	require.NoError(t, err)
	defer f.Close()
	l, err := simulate.ReadLog(f)
	require.NoError(t, err)
	byClock := append([]simulate.Record(nil), l.Published...)
	slices.SortStableFunc(byClock, func(a, b simulate.Record) int {
		return cmp.Or(a.Clock.Compare(b.Clock), cmp.Compare(a.Seq, b.Seq))
	})
	for i := range byClock {
		byClock[i].Seq = int64(i + 1)
	}
	swappedOnWire, inClockOrder := expect(l.Published), expect(byClock)
	require.Equal(t, inClockOrder.rows, swappedOnWire.rows, "rows by the clock rule differ from clock order")
	swaps := 0
	last := map[string]simulate.Record{}
	for _, r := range l.Published {
		if prev, ok := last[r.Entity]; ok && r.Clock.Before(prev.Clock) {
			swaps++
		}
		last[r.Entity] = r
	}
	t.Logf("%d events published behind a newer event of their entity", swaps)
	require.Greater(t, swaps, w.PullRequests+w.Issues, "the late events, and the swaps")
	s.requireFlipAfterDrain(0, 1)
	s.report(v, s.lagOf())
}

// Scenario 13. Two worker processes at once: each queue still has exactly one consumer,
// across a rotation, and the order holds.
func TestScenario13TwoWorkerProcesses(t *testing.T) {
	t.Parallel()
	twoWorkerProcesses(t, newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "3s"}))
}

// On quorum queues the producer declared, without single active consumer, RabbitMQ
// would let two consumers read a queue at once (quorum queues ignore exclusive). What
// keeps one reader is the window's singleton workflow and its fence; two workers switch
// with nothing lost or reordered. Runs in the quorum pass of make test-rabbitmq4.
func TestScenario13bTwoWorkersOnAProducersQuorumQueues(t *testing.T) {
	t.Parallel()
	if testenv.QueueType() != "quorum" {
		t.Skip("BROKERSWITCH_TEST_QUEUE_TYPE is not quorum")
	}
	twoWorkerProcesses(t, newStackWith(t, stacktest.Options{Brokers: 2, Env: map[string]string{"CONSUMER_WINDOW": "3s"}, Predeclare: declareProducersQuorumQueues}))
}

func twoWorkerProcesses(t *testing.T, s *stack) {
	p, log := s.producer(nil)
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(20, 26))...))
	s.startWorkerProcess("worker-1")
	s.startWorkerProcess("worker-2")
	n, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	_, err = p.Notify(ctx, n)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(20, 27))...))

	// Each window ends every CONSUMER_WINDOW and the next one takes the queue again, so
	// on a loaded machine the four queues are rarely all consumed at one instant: each
	// queue of broker 1 must be seen with its one consumer, never with two.
	consumed := map[string]bool{}
	requireOneConsumer := func() (all bool) {
		for b := range 2 {
			consumers := s.consumers(b)
			for q, tags := range consumers {
				require.LessOrEqual(t, len(tags), 1, "broker %d queue %s has consumers %v", b, q, tags)
				if b == 1 && len(tags) == 1 {
					consumed[q] = true
				}
			}
		}
		for _, q := range s.Config.Queues {
			if !consumed[q] {
				return false
			}
		}
		return true
	}
	s.waitFor("the switch to broker 1", time.Minute, func() bool {
		requireOneConsumer()
		return s.Switched(1)
	})
	clear(consumed) // consumed since the switch
	s.waitFor("one consumer on every queue of broker 1", 30*time.Second, requireOneConsumer)
	v := s.verify(log, time.Minute)
	s.requireFlipAfterDrain(0, 1)
	s.report(v, s.lagOf())
}

// appliedFromUntil counts the deliveries from broker index applied or ignored no later than until.
func (s *stack) appliedFromUntil(index int, until time.Time) int64 {
	s.t.Helper()
	var n int64
	require.NoError(s.t, s.DB.Raw("SELECT count(*) FROM github_deliveries WHERE broker_index = ? AND outcome <> 'error' AND applied_at <= ?",
		index, until).Scan(&n).Error)
	return n
}

// retryAndErrorCount adds up the messages in the -retry and -error queues of broker index.
func (s *stack) retryAndErrorCount(index int) int {
	s.t.Helper()
	var names []string
	for _, q := range s.Config.Queues {
		names = append(names, q+"-retry", q+"-error")
	}
	total, err := s.Ready(index, names...)
	require.NoError(s.t, err)
	return total
}

// requireFlipAfterDrain checks a switch from one broker to the next, queue by queue:
// every delivery from `from` was applied before every delivery from `to` (the order the
// design keeps: queues are independent, and a queue's last batch from the old broker may
// still be in flight while another queue already reads the new one). The switch was
// committed after a drain check, not forced, and nothing from `to` was applied before it
// was: every hop of a route is checked, not only the last.
func (s *stack) requireFlipAfterDrain(from, to int) {
	s.t.Helper()
	s.requireBrokerOrder(from, to)
	commit := s.switchCommitted(from, to)
	var first *time.Time
	require.NoError(s.t, s.DB.Raw("SELECT min(applied_at) FROM github_deliveries WHERE broker_index = ? AND outcome <> 'error'", to).Scan(&first).Error)
	require.NotNil(s.t, first, "broker %d's events were applied", to)
	require.False(s.t, first.Before(commit.CompletedAt),
		"an event from broker %d was applied at %s, before the switch to it was committed at %s", to, first, commit.CompletedAt)
}

// switchCommitted is the first switch from one broker to the next that a drain check
// committed; the test fails without one.
func (s *stack) switchCommitted(from, to int) brokerstate.LastSwitch {
	s.t.Helper()
	var values []string
	require.NoError(s.t, s.DB.Raw("SELECT value FROM test_switches ORDER BY id").Scan(&values).Error)
	var seen []string
	for _, v := range values {
		var ls brokerstate.LastSwitch
		require.NoError(s.t, json.Unmarshal([]byte(v), &ls), "broker.last_switch %s", v)
		if ls.From == from && ls.To == to && !ls.Forced {
			return ls
		}
		seen = append(seen, fmt.Sprintf("%d→%d forced=%v", ls.From, ls.To, ls.Forced))
	}
	s.t.Fatalf("no switch from broker %d to %d was committed after a drain check; switches: %v", from, to, seen)
	return brokerstate.LastSwitch{}
}

// requireLagUnder fails when the summary's switch lag is not below limit.
func requireLagUnder(t *testing.T, lag string, limit time.Duration) {
	t.Helper()
	d, err := time.ParseDuration(lag)
	require.NoError(t, err, "switch lag %q", lag)
	require.Less(t, d, limit, "the flip follows the drain within seconds")
}

// dedicatedTemporal is a Temporal dev server of one test, which the test stops and starts
// again on the same port with its workflows intact. It is testenv's: its database sits in
// a file, its errors reach the test's output, and a database that sticks is restarted
// (internal/testenv/devserver.go says why).
type dedicatedTemporal struct{ *testenv.Temporal }

func startDedicatedTemporal(t *testing.T) *dedicatedTemporal {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testenv.StartTemporal(ctx)
	require.NoError(t, err, "start the dedicated Temporal dev server")
	t.Cleanup(func() { _ = srv.Stop() })
	return &dedicatedTemporal{srv}
}

func (d *dedicatedTemporal) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, d.StartServer(ctx), "start the dedicated Temporal dev server again")
}

func (d *dedicatedTemporal) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, d.StopServer())
}

// target is the server's default namespace and a client for it that outlives restarts.
func (d *dedicatedTemporal) target(t *testing.T) *stacktest.Target {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: d.Address(), Namespace: "default", Logger: testenv.QuietLogger{}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &stacktest.Target{Address: d.Address(), Namespace: "default", Client: c}
}
