//go:build integration

package liveness_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/timestamppb"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

const ttl = 2 * time.Second

// runKeeper runs a keeper with a short TTL until the test ends.
func runKeeper(t *testing.T, db *gorm.DB, reach *testenv.TemporalReach, identity string) *liveness.Keeper {
	t.Helper()
	k := &liveness.Keeper{DB: db, Temporal: reach, Identity: identity, TTL: ttl, Logger: slog.New(slog.DiscardHandler)}
	testenv.RunInBackground(t, k.Run)
	return k
}

// hold runs an activity that registers itself under k and reports its lease's Lost
// channel, then returns without releasing it (as a worker killed mid-attempt would).
func hold(t *testing.T, k *liveness.Keeper) (<-chan struct{}, []byte) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	var lost <-chan struct{}
	var token []byte
	env.RegisterActivityWithOptions(func(ctx context.Context) error {
		_, h, err := k.Hold(ctx, liveness.What{Queue: "issues"})
		if err != nil {
			return err
		}
		lost = h.Lost()
		token = activity.GetInfo(ctx).TaskToken
		return nil
	}, activity.RegisterOptions{Name: "Consume"})
	_, err := env.ExecuteActivity("Consume")
	require.NoError(t, err)
	return lost, token
}

// A worker cut off from Temporal stops renewing; it gives its lease up while Postgres
// still counts the lease live, so its windows stop before any peer can retry them. A peer
// then fails the attempt it held, by its task token, and deletes the lease.
func TestACutOffHolderGivesUpBeforeAPeerReapsIt(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	cut := &testenv.TemporalReach{}
	a := runKeeper(t, db, cut, "a")
	lost, token := hold(t, a)
	require.NotEmpty(t, token)

	cut.Down.Store(true)
	select {
	case <-lost:
	case <-time.After(5 * ttl):
		t.Fatal("the cut-off holder never gave its lease up")
	}
	var live bool
	require.NoError(t, db.Raw(`SELECT expires_at > now() FROM worker_leases WHERE identity = 'a'`).Scan(&live).Error)
	require.True(t, live, "the holder gave up while Postgres still counted the lease live")

	peer := &testenv.TemporalReach{}
	runKeeper(t, db, peer, "b")
	require.Eventually(t, func() bool { return len(peer.Failed()) == 1 }, 5*ttl, 50*time.Millisecond,
		"the peer fails the dead lease's attempt")
	require.Equal(t, token, peer.Failed()[0])
	// The lease itself stays a while, its identity swept at every scan (a worker paused
	// rather than dead may still be handed retries).
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.Raw(`SELECT count(*) FROM lease_attempts a JOIN worker_leases l USING (lease_id)
			WHERE l.identity = 'a'`).Scan(&n).Error)
		return n == 0
	}, 5*ttl, 50*time.Millisecond, "the expired lease's attempts are deleted once failed")
}

// An expired lease is final: a holder that comes back takes a new one rather than
// renewing a lease whose attempts a peer may already have failed.
func TestAnExpiredLeaseIsNotRenewed(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	reach := &testenv.TemporalReach{}
	k := runKeeper(t, db, reach, "a")
	lost, _ := hold(t, k)
	var first string
	require.NoError(t, db.Raw(`SELECT lease_id FROM worker_leases WHERE identity = 'a'`).Scan(&first).Error)
	require.NoError(t, db.Exec(`UPDATE worker_leases SET expires_at = now() - interval '1 second'`).Error)
	select {
	case <-lost:
	case <-time.After(5 * ttl):
		t.Fatal("the holder did not notice its lease expired")
	}
	require.Eventually(t, func() bool {
		var ids []string
		require.NoError(t, db.Raw(`SELECT lease_id FROM worker_leases WHERE identity = 'a' AND expires_at > now()`).Scan(&ids).Error)
		return len(ids) == 1 && ids[0] != first
	}, 5*ttl, 50*time.Millisecond, "a new lease is taken")
}

// started is a pending attempt of identity's that Temporal started at at.
func started(activityID, identity string, at time.Time) *workflowpb.PendingActivityInfo {
	return &workflowpb.PendingActivityInfo{
		ActivityId: activityID, State: enumspb.PENDING_ACTIVITY_STATE_STARTED,
		LastWorkerIdentity: identity, LastStartedTime: timestamppb.New(at),
	}
}

// A worker restarted in place (a container keeps its host name, and pid 1) has the
// identity of the process it replaces: peers pass that identity's attempts over, since
// its lease is live again, so the new process fails those its predecessor left before it
// takes its first lease. An attempt Temporal started after the process began is its own.
func TestARestartedWorkerFailsWhatItsPredecessorLeftUnderItsIdentity(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	reach := &testenv.TemporalReach{Pending: []*workflowpb.PendingActivityInfo{
		started("left-behind", "1@pod@", time.Now().Add(-time.Minute)),
		started("its-own", "1@pod@", time.Now().Add(time.Hour)),
		started("a-peers", "2@other@", time.Now().Add(-time.Minute)),
	}}
	k := &liveness.Keeper{DB: db, Temporal: reach, Identity: "1@pod@", TTL: ttl, Logger: slog.New(slog.DiscardHandler),
		Workflows: []string{"queue-window-issues"}}
	testenv.RunInBackground(t, k.Run)
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.Raw(`SELECT count(*) FROM worker_leases WHERE identity = '1@pod@'`).Scan(&n).Error)
		return n == 1
	}, 5*ttl, 20*time.Millisecond, "no lease taken")
	require.Equal(t, []string{"left-behind"}, reach.FailedIDs())
}

// A worker that stops has no attempt running: one that Temporal still sees on it lost its
// answer in the stop, and is failed before the lease is deleted, since no scan would find
// it without the lease.
func TestAStoppingWorkerFailsWhatTemporalStillSeesRunningOnIt(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	reach := &testenv.TemporalReach{Pending: []*workflowpb.PendingActivityInfo{
		started("answer-lost", "a", time.Now().Add(time.Hour)),
		started("a-peers", "b", time.Now().Add(time.Hour)),
	}}
	k := &liveness.Keeper{DB: db, Temporal: reach, Identity: "a", TTL: ttl, Logger: slog.New(slog.DiscardHandler),
		Workflows: []string{"queue-window-issues"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx) }()
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.Raw(`SELECT count(*) FROM worker_leases WHERE identity = 'a'`).Scan(&n).Error)
		return n == 1
	}, 5*ttl, 20*time.Millisecond, "no lease taken")
	require.Empty(t, reach.FailedIDs(), "a running worker's attempts are its own")
	cancel()
	<-done
	require.Equal(t, []string{"answer-lost"}, reach.FailedIDs())
	var n int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM worker_leases WHERE identity = 'a'`).Scan(&n).Error)
	require.Zero(t, n, "the lease is deleted")
}

// A paused worker keeps its long polls to Temporal open, and Temporal hands them the retry
// of an attempt a peer failed when the worker's lease expired: the retry would wait there
// until the worker wakes. The peer goes on sweeping the identity of an expired lease, and
// fails that retry too.
func TestARetryHandedToAPausedWorkerIsFailedToo(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	require.NoError(t, db.Exec(`INSERT INTO worker_leases (lease_id, identity, expires_at) VALUES ('paused', '9@frozen@', now())`).Error)
	require.NoError(t, db.Exec(`INSERT INTO lease_attempts (lease_id, workflow_id, activity_id, attempt, activity_type, task_token)
		VALUES ('paused', 'queue-window-issues', 'retry', 1, 'Consume', 'token-1')`).Error)
	reach := &testenv.TemporalReach{}
	k := &liveness.Keeper{DB: db, Temporal: reach, Identity: "1@peer@", TTL: ttl, Logger: slog.New(slog.DiscardHandler),
		Workflows: []string{"queue-window-issues"}}
	testenv.RunInBackground(t, k.Run)
	require.Eventually(t, func() bool { return len(reach.Failed()) == 1 }, 5*ttl, 20*time.Millisecond,
		"the attempt the paused worker listed was never failed")
	reach.SetPending([]*workflowpb.PendingActivityInfo{started("retry", "9@frozen@", time.Now())})
	require.Eventually(t, func() bool { return slices.Contains(reach.FailedIDs(), "retry") }, 5*ttl, 20*time.Millisecond,
		"the retry handed to the paused worker was never failed")
}
