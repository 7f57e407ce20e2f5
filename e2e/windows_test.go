//go:build integration

package e2e

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// A committed switch asks every window to end while its batch in hand cannot be settled,
// for 25 s. Windows used to stop heartbeating at the cancel, time out, and leave their
// queue unread for good. A window settles its batch in hand, however long it takes, ends
// itself, and the queue is read again without a restart.
func TestAWindowStuckSettlingIsReadAgain(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, nil)
	p, log := s.producer(nil)
	msgs := s.workload(mixed(8, 91))
	ctx := context.Background()
	s.StartWorker()
	require.NoError(t, p.Publish(ctx, msgs[:4]...))
	s.waitFor("the first events applied", time.Minute, func() bool { return s.deliveries() == 4 })

	// Hold the ledger so that the next batch cannot be settled.
	release := s.holdLedger()
	half := len(msgs) / 2
	require.NoError(t, p.Publish(ctx, msgs[4:half]...))
	s.waitFor("the windows to hold their batch", time.Minute, func() bool {
		total := 0
		for _, n := range s.Counts(0, s.Config.Queues...) {
			total += n
		}
		return total == 0
	})
	_, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	status, answer := s.Call(http.MethodPost, "/api/v1/broker/switch/1", stacktest.OperatorToken, "")
	require.Equal(t, http.StatusOK, status, answer)

	// The fault lasts three lease TTLs: the worker's lease, renewed beside the stuck
	// batch, must keep its windows alive.
	time.Sleep(25 * time.Second)
	release()

	require.NoError(t, p.Publish(ctx, msgs[half:]...))
	s.report(s.verify(log, 2*time.Minute), "-")
	s.requireWindowsRunning()
}

// A rolling restart of two worker processes under load: each stops gracefully (SIGTERM),
// its windows settle their batch in hand and return, and the other worker takes the queues
// over within seconds, long before the one-minute heartbeat timeout would have passed.
// Nothing is lost, duplicated or reordered, and a normal stop logs no activity error.
func TestARollingRestartOfTwoWorkersLosesNothing(t *testing.T) {
	s := newStack(t, 1, nil)
	p, log := s.producer(nil)
	msgs := s.workload(mixed(30, 92))
	ctx := context.Background()
	third := len(msgs) / 3

	a := s.startWorkerProcess("a")
	b := s.startWorkerProcess("b")
	require.NoError(t, p.Publish(ctx, msgs[:third]...))
	s.waitFor("the first third applied", time.Minute, func() bool { return s.deliveries() >= int64(third) })

	a.Stop()
	stopped := time.Now()
	require.NoError(t, a.Err(), "worker a stops cleanly on SIGTERM")
	require.NoError(t, p.Publish(ctx, msgs[third:2*third]...))
	s.waitFor("worker b to take the queues over", time.Minute, func() bool { return s.deliveries() >= int64(2*third) })
	// The heartbeat timeout is a minute: taking over sooner means nobody waited for it.
	// Measured, not left to the wait's deadline, which patience stretches.
	tookOver := time.Since(stopped)
	t.Logf("worker b took the queues over %s after worker a stopped", tookOver.Round(100*time.Millisecond))
	require.Less(t, tookOver, time.Minute, "worker b took the queues over before a heartbeat timeout")

	c := s.startWorkerProcess("c")
	b.Stop()
	require.NoError(t, b.Err(), "worker b stops cleanly on SIGTERM")
	require.NoError(t, p.Publish(ctx, msgs[2*third:]...))
	s.report(s.verify(log, 2*time.Minute), "-")
	s.requireWindowsRunning()

	c.Stop()
	for _, w := range []*process{a, b, c} {
		out, err := os.ReadFile(w.Log)
		require.NoError(t, err)
		require.NotContains(t, string(out), "Activity error", "worker %s logged an activity error on a normal stop", w.name)
	}
}

// requireWindowsRunning checks that no window workflow has ended: a window that failed
// would leave its queue unread.
func (s *stack) requireWindowsRunning() {
	s.t.Helper()
	for _, q := range s.Config.Queues {
		desc, err := s.Temporal.DescribeWorkflowExecution(context.Background(), workflows.QueueWindowWorkflowID(q), "")
		require.NoError(s.t, err)
		require.Equal(s.t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.GetWorkflowExecutionInfo().GetStatus(),
			"window workflow of %s", q)
	}
}

// A worker cut off from Temporal while its batch in hand waits on Postgres. It cannot renew
// its lease (renewing asks Temporal too), and a peer fails its attempts once the lease
// expires, so the window fences itself before that: it stops consuming and gives its
// batch back unsettled within three quarters of the lease's TTL, instead of settling it
// beside its successor.
func TestAWindowCutOffFromTemporalGivesItsBatchBack(t *testing.T) {
	const leaseTTL = 8 * time.Second
	s := newStack(t, 1, map[string]string{"WORKER_LEASE_TTL": leaseTTL.String(), "CONSUMER_WINDOW": "1m"})
	p, log := s.producer(nil)
	msgs := s.workload(mixed(8, 92))
	ctx := context.Background()
	toTemporal := testenv.NewProxy(t, temporalServer.Address())
	cutOff := s.startWorkerProcessWith("cut-off", map[string]string{"TEMPORAL_ADDRESS": toTemporal.Addr()})
	require.NoError(t, p.Publish(ctx, msgs[:4]...))
	s.waitFor("the first events applied", time.Minute, func() bool { return s.deliveries() == 4 })

	release := s.holdLedger()
	half := len(msgs) / 2
	require.NoError(t, p.Publish(ctx, msgs[4:half]...))
	inHand := func() int {
		total := 0
		for _, n := range s.Counts(0, s.Config.Queues...) {
			total += n
		}
		return half - 4 - total
	}
	s.waitFor("the windows to hold their batch", time.Minute, func() bool { return inHand() == half-4 })
	toTemporal.Cut()
	cut := time.Now()
	s.waitFor("the batches back in their queues", 2*time.Minute, func() bool { return inHand() == 0 })
	back := time.Since(cut)
	// The earliest a successor may start is when the lease expires and a peer fails the
	// attempts: they were given back before that.
	require.True(t, s.leaseLive(cutOff.identity()), "the batches came back only after the lease had expired")
	require.Less(t, back, 2*leaseTTL, "the cut-off window gave its batch back after %s", back)
	for q, tags := range s.consumers(0) {
		require.Empty(t, tags, "queue %s still has a consumer", q)
	}

	release()
	s.StartWorker() // the successor
	require.NoError(t, p.Publish(ctx, msgs[half:]...))
	s.report(s.verify(log, 2*time.Minute), "-")
	t.Logf("the cut-off worker's windows gave their batches back %s after the cut", back.Round(100*time.Millisecond))
}

// leaseLive tells whether the worker's lease is still live on Postgres' clock: until it
// expires, no peer may fail the attempts it holds.
func (s *stack) leaseLive(identity string) bool {
	s.t.Helper()
	var live bool
	require.NoError(s.t, s.WorkerDB.Raw(`SELECT coalesce(bool_or(expires_at > now()), false) FROM worker_leases WHERE identity = ?`, identity).Scan(&live).Error)
	return live
}

// The same for a Leftover Drain: a worker cut off from Temporal while its drain of a spare
// holds a batch that waits on Postgres. A drain cancels its consumer before it handles a
// batch, so the successor's busy guard would see nobody; what keeps the successor from
// reading behind that batch is the fence: the drain gives its batch back to the head of
// the spare's queue before the lease expires.
func TestALeftoverDrainCutOffFromTemporalGivesItsBatchBack(t *testing.T) {
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "1m", "PREFETCH": "10"})
	p, log := s.producer(nil)
	msgs := s.workload(mixed(8, 95))
	ctx := context.Background()
	// Broker 0 holds the backlog; an operator's force made 1 active, so that backlog is
	// left for the Leftover Drain.
	require.NoError(t, p.Publish(ctx, msgs...))
	_, err := s.Store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
		return st.Force(1, time.Time{}, time.Now()), nil
	})
	require.NoError(t, err)
	ready := func() int {
		total := 0
		for _, n := range s.Counts(0, s.Config.Queues...) {
			total += n
		}
		return total
	}
	backlog := ready()
	require.Equal(t, len(msgs), backlog)

	release := s.holdLedger()
	toTemporal := testenv.NewProxy(t, temporalServer.Address())
	cutOff := s.startWorkerProcessWith("cut-off", map[string]string{"TEMPORAL_ADDRESS": toTemporal.Addr()})
	s.waitFor("a drain to hold a batch of the spare", time.Minute, func() bool { return ready() < backlog })
	toTemporal.Cut()
	cut := time.Now()
	s.waitFor("the drained batches back at the spare", 2*time.Minute, func() bool { return ready() == backlog })
	back := time.Since(cut)
	require.True(t, s.leaseLive(cutOff.identity()), "the batches came back only after the lease had expired")
	t.Logf("the cut-off worker's drains gave their batches back %s after the cut", back.Round(100*time.Millisecond))

	release()
	s.StartWorker() // the successor
	s.report(s.verify(log, 2*time.Minute), "-")
}
