//go:build integration

package ingest

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
)

// senderEnv is an env whose sender is stored and held FOR UPDATE by another session
// (blocker), with an Ingester on a pool whose lock timeout is short and whose logs the
// test reads.
func senderEnv(t *testing.T) (e *env, ing *Ingester, logs *testenv.Buffer, stored models.User, blocker *gorm.DB) {
	t.Helper()
	e = newEnv(t)
	e.handle(t, delivery("issues", "first", example(t, "issues.opened.0")))
	var users []models.User
	require.NoError(t, e.db.Find(&users).Error)
	require.Len(t, users, 1, "the first event's sender")
	ing, logs = lockTimeoutIngester(t, e, 200*time.Millisecond, 20*time.Millisecond, 3)
	blocker = e.db.Begin()
	require.NoError(t, blocker.Error)
	t.Cleanup(func() { blocker.Rollback() })
	require.NoError(t, blocker.Exec("SELECT 1 FROM github_users FOR UPDATE").Error)
	return e, ing, logs, users[0], blocker
}

// Every queue's events carry their sender, and the account seldom changes: a batch that
// leaves the sender's row as it is must not wait for another session that holds it, as
// every queue's batches did for each other's when the read locked it until COMMIT.
func TestABatchDoesNotWaitOnASenderItLeavesAsItIs(t *testing.T) {
	e, ing, logs, _, _ := senderEnv(t)

	verdicts, err := ing.ForBroker(0).HandleBatch(context.Background(), queue,
		[]amqp.Delivery{delivery("issues", "second", example(t, "issues.opened.0"))})
	require.NoError(t, err, "the batch waited on the sender's lock: %s", logs.String())
	assert.Equal(t, acks(1), verdicts)
	assert.NotContains(t, logs.String(), "55P03")
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "second").Outcome)
}

// A sender whose account the batch changes is locked in the write's exchange and must be
// as the batch read it: when another session changed it in between (here a reader's claim,
// which raises processing_version), the batch fails with a serialization failure and is
// applied again from a fresh read, so the other session's change is not written over.
func TestASenderChangedAfterTheReadIsAppliedAgainNotWrittenOver(t *testing.T) {
	e, ing, logs, stored, blocker := senderEnv(t)

	renamed := edit(t, example(t, "issues.opened.0"), func(p map[string]any) { object(p, "sender")["login"] = "renamed-login" })
	type result struct {
		verdicts []broker.Verdict
		err      error
	}
	done := make(chan result, 1)
	go func() {
		v, err := ing.ForBroker(0).HandleBatch(context.Background(), queue, []amqp.Delivery{delivery("issues", "renamed", renamed)})
		done <- result{v, err}
	}()
	// The batch has read the row without a lock and now waits to lock it for its write.
	require.Eventually(t, func() bool {
		var waiting int64
		require.NoError(t, e.db.Raw(`SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%brokerswitch_lock_unchanged%'`).Scan(&waiting).Error)
		return waiting > 0
	}, 10*time.Second, 10*time.Millisecond, "the batch never waited to lock the sender it changes")
	require.NoError(t, blocker.Exec("UPDATE github_users SET processing_state = ?, processing_version = processing_version + 10",
		models.StateProcessing).Error)
	require.NoError(t, blocker.Commit().Error)

	select {
	case res := <-done:
		require.NoError(t, res.err)
		assert.Equal(t, acks(1), res.verdicts)
	case <-time.After(10 * time.Second):
		t.Fatal("the batch did not finish once the sender was free")
	}
	assert.Contains(t, logs.String(), "40001", "the batch was not turned away")
	var user models.User
	require.NoError(t, e.db.Take(&user, stored.ID).Error)
	assert.Equal(t, "renamed-login", user.Login)
	assert.Equal(t, models.StateUpdated, user.ProcessingState)
	assert.Equal(t, stored.ProcessingVersion+10+1, user.ProcessingVersion, "the reader's claim was written over")
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "renamed").Outcome)
}
