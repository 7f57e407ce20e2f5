//go:build integration

package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/worker"
)

// scrapesPerWave are the concurrent unauthenticated scrapes fired at once, again and
// again while the worker consumes.
const scrapesPerWave = 500

// TestABurstOfScrapesDuringConsumption fires waves of 500 concurrent scrapes at a
// process's /metrics, whose state gauges read Postgres, while its worker consumes: the
// process stays within its connection cap, every event is applied and nothing goes
// through -retry.
func TestABurstOfScrapesDuringConsumption(t *testing.T) {
	s := newStack(t, 1, nil)
	ctx := t.Context()
	// The process's pool as `brokerswitch worker` opens it, tagged so that its
	// connections can be counted apart from the test's own.
	pool, err := models.Connect(ctx, s.Env["DATABASE_URL"]+"&application_name=capped-process", models.PoolConfig{
		MaxOpenConns: s.Config.DBMaxOpenConns, StatementTimeout: s.Config.DBStatementTimeout, LockTimeout: s.Config.DBLockTimeout,
	})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db, err := models.OnPool(pool)
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	s.WorkerPool, s.WorkerDB = pool, db
	m := metrics.New(prometheus.NewRegistry())
	require.NoError(t, m.WatchState(worker.StateReader(brokerstate.NewStore(db, s.Config.Brokers), s.Config.Queues)))
	scrape := httptest.NewServer(m.Handler())
	t.Cleanup(scrape.Close)

	events, err := payloads.Lifecycle(30)
	require.NoError(t, err)
	s.Publish(0, events...)

	var peak atomic.Int64
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			var n int64
			if s.DB.WithContext(watchCtx).Raw(`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'capped-process'`).Scan(&n).Error == nil && n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	s.StartWorker()
	var ok, refused, waves atomic.Int64
	for waves.Load() == 0 || s.deliveries() < int64(len(events)) {
		var wg sync.WaitGroup
		for range scrapesPerWave {
			wg.Go(func() {
				res, err := http.Get(scrape.URL) //nolint:noctx // a scrape as Prometheus sends it
				if err != nil {
					return
				}
				_ = res.Body.Close()
				switch res.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusServiceUnavailable:
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		waves.Add(1)
		require.Less(t, waves.Load(), int64(120), "the events were not applied under the scrapes")
	}
	stopWatching()
	<-watched

	require.EqualValues(t, len(events), s.deliveries(), "every event applied")
	var notApplied int64
	require.NoError(t, s.DB.Model(&models.Delivery{}).Where("outcome NOT IN ?", []string{"applied", "ignored"}).Count(&notApplied).Error)
	require.Zero(t, notApplied)
	var retried int64
	require.NoError(t, s.DB.Model(&models.Delivery{}).Where("retry_cycles > 0").Count(&retried).Error)
	require.Zero(t, retried, "nothing went through -retry")
	for q, n := range s.Counts(0, "pull_requests-retry", "issues-retry", "pushes-retry", "installations-retry") {
		require.Zero(t, n, q)
	}
	require.Positive(t, ok.Load(), "some scrapes were served")
	require.LessOrEqual(t, peak.Load(), int64(s.Config.DBMaxOpenConns), "the process stayed within DB_MAX_OPEN_CONNS")
	t.Logf("%d waves of %d scrapes: %d served, %d refused (in flight limit); peak %d connections (cap %d)",
		waves.Load(), scrapesPerWave, ok.Load(), refused.Load(), peak.Load(), s.Config.DBMaxOpenConns)
}
