//go:build integration

package models_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
)

// A session that sits in an open transaction past IdleInTransactionTimeout (its worker
// paused or cut off between a batch's two exchanges) is ended by Postgres, and its locks
// go with it: another session takes them within the bound, not when the worker wakes.
func TestASessionIdleInATransactionLosesItsLocks(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	// The paused one is opened as the service opens its pool: gorm on pgx's pool.
	pool, err := models.Connect(ctx, dsn, models.PoolConfig{
		IdleInTransactionTimeout: time.Second, DeadPeerTimeout: 6 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	paused, err := models.OnPool(pool)
	require.NoError(t, err)
	sqlDB, err := paused.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	live, err := models.OpenPool(ctx, dsn, models.PoolConfig{LockTimeout: 5 * time.Second})
	require.NoError(t, err)
	liveDB, err := live.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = liveDB.Close() })

	var settings struct{ Idle, KeepalivesIdle, UserTimeout string }
	require.NoError(t, paused.Raw(`SELECT current_setting('idle_in_transaction_session_timeout') AS idle,
		current_setting('tcp_keepalives_idle') AS keepalives_idle, current_setting('tcp_user_timeout') AS user_timeout`).Scan(&settings).Error)
	require.Equal(t, "1s", settings.Idle)
	// Over TCP, as the tests reach Postgres; a Unix socket has no keepalives.
	require.Equal(t, "2", settings.KeepalivesIdle)
	require.Equal(t, "6000", settings.UserTimeout)

	tx := paused.Begin()
	require.NoError(t, tx.Exec(`SELECT pg_advisory_xact_lock(42)`).Error)
	// The worker stops here: nothing more is sent on its transaction. The live session's
	// 5 s lock timeout is the bound: it gets the lock only once Postgres ended the other.
	require.NoError(t, live.Exec(`SELECT pg_advisory_xact_lock(42)`).Error, "the live session waited past its lock timeout")
	require.Error(t, tx.Commit().Error, "the paused session's late commit is refused")
}

// The pgx pool takes the cap and the session settings of PoolConfig, and gorm on it stays
// within the cap.
func TestConnectBoundsThePoolAndItsSessions(t *testing.T) {
	ctx := context.Background()
	pool, err := models.Connect(ctx, testenv.NewDatabase(t), models.PoolConfig{
		MaxOpenConns: 2, StatementTimeout: 3 * time.Second, LockTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.EqualValues(t, 2, pool.Config().MaxConns)
	var statement, lock string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('statement_timeout'), current_setting('lock_timeout')`).Scan(&statement, &lock))
	require.Equal(t, "3s", statement)
	require.Equal(t, "2s", lock)

	db, err := models.OnPool(pool)
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer held.Release()
	var one int
	require.NoError(t, db.WithContext(ctx).Raw("SELECT 1").Scan(&one).Error)
	require.EqualValues(t, 2, pool.Stat().TotalConns(), "gorm took the pool's second connection")
	tx := db.WithContext(ctx).Begin()
	require.NoError(t, tx.Error)
	defer tx.Rollback()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	require.Error(t, db.WithContext(short).Raw("SELECT 1").Scan(&one).Error, "a third connection past the cap")
}
