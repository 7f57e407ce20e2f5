//go:build integration

package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
)

// injectFault makes Postgres itself raise SQLSTATE code on the first times inserts into
// table, then let them through (times < 0: raise on every insert).
func injectFault(t *testing.T, e *env, table, code string, times int) {
	t.Helper()
	onInsert(t, e, "inject_fault", table, "true", fmt.Sprintf("RAISE EXCEPTION 'injected fault' USING ERRCODE = '%s'", code), times)
}

// onInsert installs a trigger on table that runs action on the first times inserts for
// which cond holds (times < 0: on all of them). A sequence, name_seq, counts them: a
// rolled-back transaction does not undo it.
func onInsert(t *testing.T, e *env, name, table, cond, action string, times int) {
	t.Helper()
	limit := int64(times)
	if times < 0 {
		limit = 1 << 62
	}
	for _, stmt := range []string{
		"CREATE SEQUENCE " + name + "_seq",
		fmt.Sprintf(`CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF %[2]s AND nextval('%[1]s_seq') <= %[3]d THEN
					%[4]s;
				END IF;
				RETURN NEW;
			END $$`, name, cond, limit, action),
		fmt.Sprintf("CREATE TRIGGER %[1]s BEFORE INSERT ON %[2]s FOR EACH ROW EXECUTE FUNCTION %[1]s()", name, table),
	} {
		require.NoError(t, e.db.Exec(stmt).Error)
	}
}

// threeEvents is a batch whose middle event writes github_pushes.
func threeEvents(t *testing.T) []amqp.Delivery {
	return []amqp.Delivery{
		delivery("pull_request", "d-1", example(t, "pull_request.opened.0")),
		delivery("push", "d-2", example(t, "push.none.4")),
		delivery("issues", "d-3", example(t, "issues.opened.0")),
	}
}

// lockTimeoutIngester is e's Ingester on a pool of its own whose statements wait at most
// lockTimeout for a lock, pausing backoff between its attempts, with logs the test reads.
func lockTimeoutIngester(t *testing.T, e *env, lockTimeout, backoff time.Duration, attempts int) (*Ingester, *testenv.Buffer) {
	t.Helper()
	db := openPool(t, e.dsn, models.PoolConfig{LockTimeout: lockTimeout})
	logs := &testenv.Buffer{}
	ing := *e.ing
	ing.DB, ing.Logger, ing.transientBackoff, ing.transientAttempts = db, slog.New(slog.NewTextHandler(logs, nil)), backoff, attempts
	return &ing, logs
}

// A serialization failure, a deadlock, a lock timeout or a full connection table says
// nothing about the messages: the batch is applied again, whole and in order, and no
// message goes through -retry.
func TestTransientErrorsApplyTheBatchAgain(t *testing.T) {
	for _, code := range []string{"40001", "40P01", "55P03", "53300"} {
		t.Run(code, func(t *testing.T) {
			e := newEnv(t)
			e.ing.transientBackoff = time.Millisecond
			injectFault(t, e, "github_pushes", code, 2)

			assert.Equal(t, acks(3), e.handle(t, threeEvents(t)...))
			for _, id := range []string{"d-1", "d-2", "d-3"} {
				d := e.ledger(t, id)
				assert.Equal(t, models.OutcomeApplied, d.Outcome, id)
				assert.Empty(t, d.ErrorReason, id)
			}
			assert.Equal(t, int64(1), e.count(t, "github_pushes"))
		})
	}
}

// A transient error that outlasts the attempts stops the consumer with the whole batch
// unsettled, so it comes back to the head of the queue in order; it is never isolated.
func TestTransientErrorThatLastsLeavesTheBatchUnsettled(t *testing.T) {
	e := newEnv(t)
	e.ing.transientBackoff = time.Millisecond
	e.ing.transientAttempts = 3
	injectFault(t, e, "github_pushes", "40P01", -1)

	verdicts, err := e.ing.ForBroker(0).HandleBatch(context.Background(), queue, threeEvents(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "40P01")
	assert.Nil(t, verdicts, "nothing is settled")
	assert.Zero(t, e.count(t, "github_deliveries"), "nothing committed, not even a failure row")
	var attempts int64
	require.NoError(t, e.db.Raw("SELECT last_value FROM inject_fault_seq").Scan(&attempts).Error)
	assert.Equal(t, int64(3), attempts, "the batch was applied transientAttempts times, never one by one")
}

// Ledger rows are claimed in delivery id order, not queue order. Here the test's
// transaction holds d-a and then wants d-b, while a batch of d-b, d-a waits: had the
// batch claimed d-b first, as the queue has it, each would wait for the other.
func TestLedgerClaimsInIDOrder(t *testing.T) {
	e := newEnv(t)
	second := victim(t, e)
	da := delivery("issues", "d-a", example(t, "issues.opened.0"))
	db := delivery("push", "d-b", example(t, "push.none.4"))
	rowsOf := func(d amqp.Delivery) []models.Delivery {
		msg := decodeMessage(queue, d, 0)
		require.NoError(t, msg.malformed)
		rows, _ := (&batchHandler{ingester: e.ing}).ledgerRows(queue, []message{msg}, e.clock.Now())
		return rows
	}

	first := e.begin(t)
	// A wait shorter than deadlock_timeout (1s): a wait on the batch fails here, before
	// Postgres would break the deadlock by aborting one side.
	_, err := first.Exec(context.Background(), "SET LOCAL lock_timeout = '500ms'")
	require.NoError(t, err)
	_, err = claimLedger(context.Background(), first, rowsOf(da))
	require.NoError(t, err)

	wait := handleBlocked(t, e, second, []amqp.Delivery{db, da}, "the batch never waited for d-a")
	_, err = claimLedger(context.Background(), first, rowsOf(db))
	require.NoError(t, err, "d-b was held by the batch waiting for d-a")
	require.NoError(t, first.Commit(context.Background()))
	assert.Equal(t, acks(2), wait(), "both claimed by the other transaction: duplicates")
	assert.Equal(t, 0, e.ledger(t, "d-b").BrokerIndex)
}

// A real lock_timeout: another transaction holds the pull request's row. The batch is
// applied again until the lock is released, then acknowledged whole; nothing is isolated
// and nothing goes through -retry.
func TestLockTimeoutAppliesTheBatchOnceTheLockIsFree(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery("pull_request", "pr-1", example(t, "pull_request.opened.0")))
	ing, logs := lockTimeoutIngester(t, e, 100*time.Millisecond, 50*time.Millisecond, 1000)

	blocker := e.db.Begin()
	require.NoError(t, blocker.Error)
	defer blocker.Rollback()
	require.NoError(t, blocker.Exec("SELECT 1 FROM github_pull_requests WHERE node_id = ? FOR UPDATE", prNode).Error)

	steps := prLifecycle(t)
	batch := []amqp.Delivery{delivery("push", "push-1", example(t, "push.none.4")), steps[1], steps[2]}
	type result struct {
		verdicts []broker.Verdict
		err      error
	}
	done := make(chan result, 1)
	go func() {
		v, err := ing.ForBroker(0).HandleBatch(context.Background(), queue, batch)
		done <- result{v, err}
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "55P03") }, 10*time.Second, 10*time.Millisecond,
		"the batch never hit lock_timeout")
	require.NoError(t, blocker.Rollback().Error)

	select {
	case res := <-done:
		require.NoError(t, res.err)
		assert.Equal(t, acks(3), res.verdicts)
	case <-time.After(10 * time.Second):
		t.Fatal("the batch did not finish once the lock was free")
	}
	assert.NotContains(t, logs.String(), "applying its deliveries one by one", "the batch was isolated")
	assert.Equal(t, "closed", e.pullRequest(t).State)
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "pr-3").Outcome)
}
