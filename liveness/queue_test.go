//go:build integration

package liveness_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

// holdQueue runs an activity that registers itself under k for queue, and returns the
// check its batches end their transactions with. It releases its attempt (the test
// environment gives every attempt the same id), which leaves the queue taken.
func holdQueue(t *testing.T, k *liveness.Keeper, queue string) models.Check {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	var check models.Check
	env.RegisterActivityWithOptions(func(ctx context.Context) error {
		_, h, err := k.Hold(ctx, liveness.What{Queue: queue})
		if err != nil {
			return err
		}
		checks := h.Checks()
		h.Release()
		if len(checks) != 1 {
			return errors.New("no queue check")
		}
		check = checks[0]
		return nil
	}, activity.RegisterOptions{Name: "Consume"})
	_, err := env.ExecuteActivity("Consume")
	require.NoError(t, err)
	return check
}

// commitWith runs a batch's transaction: a write, then check, then the COMMIT.
func commitWith(db *gorm.DB, check models.Check, key string) error {
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`INSERT INTO settings (key, value) VALUES (?, 'x')`, key).Error; err != nil {
			return err
		}
		return tx.Exec(check.Query, check.Args...).Error
	})
	if refused := check.Refused(err); refused != nil {
		return refused
	}
	return err
}

// An attempt that takes a queue over fences every attempt before it: a worker paused
// mid-window that wakes after its successor started commits nothing more, and the
// successor's batches, and another queue's, commit as before.
func TestATakeOverRefusesTheLateCommitsOfTheAttemptBefore(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	k := runKeeper(t, db, &testenv.TemporalReach{}, "a")
	paused := holdQueue(t, k, "issues")
	other := holdQueue(t, k, "pushes")
	require.NoError(t, commitWith(db, paused, "before the take-over"))

	successor := holdQueue(t, k, "issues")
	err := commitWith(db, paused, "after the take-over")
	require.ErrorIs(t, err, liveness.ErrQueueTaken)
	var n int64
	require.NoError(t, db.Raw(`SELECT count(*) FROM settings WHERE key = 'after the take-over'`).Scan(&n).Error)
	require.Zero(t, n, "the refused batch's write rolled back")

	require.NoError(t, commitWith(db, successor, "the successor's batch"))
	require.NoError(t, commitWith(db, other, "another queue's batch"))
}

// A take-over waits for a batch that passed its check to commit, rather than let it
// commit after the successor started.
func TestATakeOverWaitsForABatchThatPassedItsCheck(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	k := runKeeper(t, db, &testenv.TemporalReach{}, "a")
	first := holdQueue(t, k, "issues")
	tx := db.Begin()
	require.NoError(t, tx.Exec(first.Query, first.Args...).Error)
	took := make(chan struct{})
	go func() {
		defer close(took)
		holdQueue(t, k, "issues")
	}()
	select {
	case <-took:
		t.Fatal("the take-over did not wait for the batch that passed its check")
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, tx.Commit().Error)
	<-took
}
