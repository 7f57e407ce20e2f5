//go:build integration

package ingest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// seedLedger writes n ledger rows named prefix-1 ... prefix-n directly in SQL, the newest
// received age before now and each one a second older than the one before.
func seedLedger(t *testing.T, e *env, prefix string, n int, now time.Time, age time.Duration) {
	t.Helper()
	require.NoError(t, e.db.Exec(`INSERT INTO github_deliveries (delivery_id, event, queue, broker_index, outcome, received_at, applied_at)
		SELECT ? || g, 'push', ?, 0, 'applied', ?::timestamptz - g * interval '1 second', ?::timestamptz - g * interval '1 second'
		  FROM generate_series(1, ?) g`, prefix+"-", queue, now.Add(-age), now.Add(-age), n).Error)
}

// TestRetentionDeletesOldRowsWhileIngesting sweeps a ledger of old and recent rows while
// a consumer applies batches that redeliver the old deliveries being deleted: the old rows
// go, the recent ones stay, every DELETE is small and quick, and the consumer goes on.
func TestRetentionDeletesOldRowsWhileIngesting(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := e.clock.now
	const oldRows, recentRows, batch = 100_000, 1000, 2000
	seedLedger(t, e, "old", oldRows, now, 8*24*time.Hour)
	seedLedger(t, e, "recent", recentRows, now, 6*24*time.Hour)

	var mu sync.Mutex
	var longestDelete time.Duration
	var deletes int
	r := &Retention{DB: e.db, After: 7 * 24 * time.Hour, Batch: batch, Now: func() time.Time { return now },
		BatchDone: func(took time.Duration, rows int64) {
			mu.Lock()
			defer mu.Unlock()
			require.LessOrEqual(t, rows, int64(batch))
			longestDelete, deletes = max(longestDelete, took), deletes+1
		}}

	// The consumer redelivers old deliveries, oldest first as the sweep deletes them, and
	// adds a new delivery to each batch, until the sweep ends.
	push := example(t, "push.none.4")
	swept := make(chan struct{})
	type ingestion struct {
		batches int
		slowest time.Duration
		fresh   []string
		err     error
	}
	done := make(chan ingestion)
	go func() {
		var in ingestion
		h := e.ing.ForBroker(0)
		for k := oldRows; ; k -= 50 {
			select {
			case <-swept:
				done <- in
				return
			default:
			}
			fresh := fmt.Sprintf("fresh-%d", in.batches)
			ds := []amqp.Delivery{delivery("push", fresh, push)}
			for j := range 20 {
				ds = append(ds, delivery("push", fmt.Sprintf("old-%d", max(1, k-j)), push))
			}
			start := time.Now()
			if _, err := h.HandleBatch(ctx, queue, ds); err != nil {
				in.err = err
				done <- in
				return
			}
			in.batches++
			in.slowest = max(in.slowest, time.Since(start))
			in.fresh = append(in.fresh, fresh)
		}
	}()
	deleted, err := r.sweep(ctx)
	close(swept)
	in := <-done
	require.NoError(t, err)
	require.NoError(t, in.err)

	var left struct{ Old, Recent, Fresh int64 }
	require.NoError(t, e.db.Raw(`SELECT
		count(*) FILTER (WHERE delivery_id LIKE 'old-%' AND received_at < ?) AS old,
		count(*) FILTER (WHERE delivery_id LIKE 'recent-%') AS recent,
		count(*) FILTER (WHERE delivery_id LIKE 'fresh-%') AS fresh
		FROM github_deliveries`, now.Add(-7*24*time.Hour)).Scan(&left).Error)
	require.Zero(t, left.Old, "every row older than the retention is gone")
	require.EqualValues(t, recentRows, left.Recent, "every row younger than the retention stays")
	require.EqualValues(t, len(in.fresh), left.Fresh, "every delivery applied during the sweep is in the ledger")
	require.Greater(t, deleted, int64(oldRows-21*in.batches), "the sweep deleted the old rows the consumer did not claim first")
	t.Logf("deleted %d rows in %d DELETEs, the longest %s; %d batches applied meanwhile, the slowest in %s",
		deleted, deletes, longestDelete, in.batches, in.slowest)
	require.GreaterOrEqual(t, deletes, oldRows/batch, "the sweep deletes in batches")
	require.Less(t, longestDelete, time.Second, "no DELETE holds its row locks for long")
	require.GreaterOrEqual(t, in.batches, deletes/4, "the consumer kept applying while the sweep ran")
	require.Less(t, in.slowest, 2*time.Second, "no batch waited long on the sweep's locks")

	reading, err := readLedger(ctx, e.db)
	require.NoError(t, err)
	require.False(t, reading.Oldest.Before(now.Add(-7*24*time.Hour)), "the oldest row left is within the retention")
	require.Positive(t, reading.Bytes)
}

// A Retention built without After deletes nothing rather than everything.
func TestRetentionWithoutAfterDeletesNothing(t *testing.T) {
	e := newEnv(t)
	seedLedger(t, e, "old", 10, e.clock.now, time.Hour)
	_, err := (&Retention{DB: e.db}).sweep(context.Background())
	require.ErrorIs(t, err, errRetentionUnset)
	require.EqualValues(t, 10, e.count(t, "github_deliveries"))
}
