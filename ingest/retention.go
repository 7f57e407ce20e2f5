package ingest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// errRetentionUnset keeps a Retention built without After from deleting every row.
var errRetentionUnset = errors.New("ledger retention: After is not set")

// Small batches keep every row lock the sweep holds to a few milliseconds, so a
// redelivery of a row being deleted waits no longer than that.
const (
	// retentionBatch is the most rows one DELETE removes, unless Retention.Batch says less.
	retentionBatch = 1000
	// retentionEvery is the pause between sweeps.
	retentionEvery = 10 * time.Minute
)

// Retention deletes the ledger rows whose last attempt (received_at) is older than After.
// A delivery that comes back after its row is gone is applied again: After must outlast
// every way a delivery comes back (the configuration refuses a shorter LEDGER_RETENTION).
type Retention struct {
	DB *gorm.DB
	// After is LEDGER_RETENTION.
	After time.Duration
	// Batch is the most rows one DELETE removes, for the tests; retentionBatch when zero.
	Batch int
	// Now is the clock; time.Now when nil.
	Now     func() time.Time
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// BatchDone, when set, is told how long each DELETE took and how many rows it removed.
	BatchDone func(took time.Duration, rows int64)
}

// Run sweeps at once, then every retentionEvery, until ctx ends; with no After it does nothing. A failed sweep is logged and
// tried again at the next one; the brokerswitch_ledger_oldest_row_timestamp_seconds
// alert tells when sweeps fall behind.
func (r *Retention) Run(ctx context.Context) {
	if r.After <= 0 {
		// Without LEDGER_RETENTION every row is kept, rather than a guess deleting them.
		return
	}
	r.Metrics.LedgerRetention(r.After)
	for {
		deleted, err := r.sweep(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.logger().WarnContext(ctx, "ledger retention sweep failed", "error", err, "deleted", deleted)
		case deleted > 0:
			r.logger().InfoContext(ctx, "ledger retention sweep", "deleted", deleted, "retention", r.After.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retentionEvery):
		}
	}
}

// sweep deletes the rows older than After, a batch per statement, and returns how many
// went. Each DELETE is its own transaction and skips rows another transaction holds (a
// batch claiming a redelivery of one): those go at the next sweep. After each batch it
// pauses as long as the batch took, so that the sweep of a large backlog takes at most
// half of one connection's time and leaves Postgres' I/O to ingestion.
func (r *Retention) sweep(ctx context.Context) (int64, error) {
	if r.After <= 0 {
		return 0, errRetentionUnset
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	batch := r.Batch
	if batch <= 0 {
		batch = retentionBatch
	}
	cutoff := now().Add(-r.After)
	var total int64
	for {
		start := time.Now()
		// By ctid: the rows are locked, so they stay where they are until the DELETE, and
		// a TID scan needs no index on the key.
		res := r.DB.WithContext(ctx).Exec(`DELETE FROM github_deliveries WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM github_deliveries WHERE received_at < ? ORDER BY received_at LIMIT ?
			FOR UPDATE SKIP LOCKED))`, cutoff, batch)
		if res.Error != nil {
			return total, fmt.Errorf("delete ledger rows older than %s: %w", cutoff.Format(time.RFC3339), res.Error)
		}
		took := time.Since(start)
		total += res.RowsAffected
		r.Metrics.LedgerDeleted(res.RowsAffected)
		if r.BatchDone != nil {
			r.BatchDone(took, res.RowsAffected)
		}
		if res.RowsAffected < int64(batch) {
			break
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(took):
		}
	}
	reading, err := readLedger(ctx, r.DB)
	if err != nil {
		return total, err
	}
	r.Metrics.LedgerSwept(reading, now())
	return total, nil
}

// readLedger reads the ledger's size and its oldest row without counting it: a count of
// millions of rows is a scan, the estimate and the index's first entry are not.
func readLedger(ctx context.Context, db *gorm.DB) (metrics.LedgerReading, error) {
	var row struct {
		Rows   int64
		Bytes  int64
		Oldest sql.NullTime
	}
	err := db.WithContext(ctx).Raw(`SELECT
		(SELECT coalesce(n_live_tup, 0) FROM pg_stat_user_tables WHERE relid = 'github_deliveries'::regclass) AS rows,
		pg_total_relation_size('github_deliveries') AS bytes,
		(SELECT min(received_at) FROM github_deliveries) AS oldest`).Scan(&row).Error
	if err != nil {
		return metrics.LedgerReading{}, fmt.Errorf("read the ledger's size: %w", err)
	}
	return metrics.LedgerReading{Rows: row.Rows, Bytes: row.Bytes, Oldest: row.Oldest.Time}, nil
}

func (r *Retention) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}
