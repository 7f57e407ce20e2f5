//go:build integration

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/api"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
	"github.com/brokerswitch/brokerswitch/metrics/temporalmetrics"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// observed is a worker wired the way cmd/brokerswitch wires one: one registry for the
// service's and the Temporal SDK's metrics, served by the API router, and HealthChecks pings.
type observed struct {
	reg   *prometheus.Registry
	m     *metrics.Metrics
	pings *pingCounter
	api   *httptest.Server
}

// pingCounter is a fake healthchecks.io that counts pings by kind.
type pingCounter struct {
	*httptest.Server
	mu     sync.Mutex
	counts map[string]int
}

func newPingCounter(t *testing.T) *pingCounter {
	p := &pingCounter{counts: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := strings.TrimPrefix(r.URL.Path, "/check")
		p.mu.Lock()
		p.counts[map[string]string{"": "success", "/start": "start", "/fail": "fail"}[kind]]++
		p.mu.Unlock()
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *pingCounter) get(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[kind]
}

// startObservedWorker runs a worker with metrics and pings until the test ends.
func (s *stack) startObservedWorker() *observed {
	t := s.t
	o := &observed{reg: prometheus.NewRegistry(), pings: newPingCounter(t)}
	o.m = metrics.New(o.reg)
	require.NoError(t, o.m.WatchState(worker.StateReader(s.Store, s.Config.Queues)))
	handler, err := temporalmetrics.NewHandler(o.reg, func(err error) { t.Errorf("temporal metric refused: %v", err) })
	require.NoError(t, err)
	tc, err := client.Dial(client.Options{
		HostPort: temporalServer.Address(), Namespace: s.Config.TemporalNamespace, MetricsHandler: handler,
		Logger: testenv.QuietLogger{},
	})
	require.NoError(t, err)
	t.Cleanup(tc.Close)

	sqlDB, err := s.DB.DB()
	require.NoError(t, err)
	logger := slog.New(activities.LogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	o.api = httptest.NewServer(api.Router(api.Deps{
		Settings: stacktest.APISettings(s.Config), Temporal: tc, Store: s.Store, Ping: sqlDB.PingContext, Logger: logger,
	}))
	t.Cleanup(o.api.Close)

	pool := broker.NewPool(s.Config.Brokers, logger, worker.PoolSettings(s.Config, o.m))
	pinger := &healthchecks.Pinger{URL: o.pings.URL + "/check", OnFailure: o.m.PingFailed}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, worker.Deps{
			Config: s.Config, Client: tc, Pool: pool, DB: s.WorkerDB, DBPool: s.WorkerPool, Logger: logger, Metrics: o.m, Pings: pinger,
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Error("worker did not stop within a minute")
		}
		pool.Close()
		pinger.Wait()
	})
	return o
}

func (o *observed) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return metricstest.Value(t, o.reg, name, labels...)
}

// requireCount waits until a counter (or a histogram's sample count) reaches want, then
// requires exactly want. The service counts after the effect a test can see (a row
// committed, a state saved, a connection closed), so one read right after the effect may
// come before the count.
func (o *observed) requireCount(s *stack, want float64, name string, labels ...string) {
	s.t.Helper()
	o.waitMetric(s, fmt.Sprintf("%s%v to reach %v", name, labels, want), func(v float64) bool { return v >= want }, name, labels...)
	require.InDelta(s.t, want, o.value(s.t, name, labels...), 0, "%s%v", name, labels)
}

// waitMetric waits until the metric's value (its series matching labels, summed) satisfies ok.
func (o *observed) waitMetric(s *stack, what string, ok func(float64) bool, name string, labels ...string) {
	s.t.Helper()
	s.waitUntil(what, 30*time.Second, func() (bool, string) {
		v := o.value(s.t, name, labels...)
		return ok(v), fmt.Sprintf("%s%v is %v", name, labels, v)
	})
}

func positive(v float64) bool { return v > 0 }

// TestMetricsAndPingsFollowRealWork runs a worker through consumption, a poison message, a
// Leftover Drain, a drained switch, a forced switch and a broker outage, and checks the
// counters, gauges and HealthChecks pings each step leaves.
func TestMetricsAndPingsFollowRealWork(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "2s"})
	events, err := payloads.Lifecycle(4)
	require.NoError(t, err)
	s.Publish(0, events...)
	s.PublishRaw(0, "issues", amqp.Table{"x-github-event": "issues", "x-github-delivery": "poison-json"}, []byte("{not json"))
	s.Proxies[1].Cut() // a spare that is down: a warning, never a failed window or ping

	o := s.startObservedWorker()
	s.waitFor("every event in the ledger", time.Minute, func() bool { return s.deliveries() == int64(len(events))+1 })
	s.waitFor("the poison routed to -error", 30*time.Second, func() bool {
		return o.value(t, "brokerswitch_routed_messages_total", "queue", "issues", "route", "error") == 1
	})
	applied := 0
	for _, ev := range events {
		if ev.Event != "check_run" {
			applied++
		}
	}
	// Counted once the batch's transaction committed: the last rows may show first.
	o.requireCount(s, float64(applied), "brokerswitch_events_total", "outcome", "applied")
	// Counted before the handler returned the verdict that routed it.
	require.InDelta(t, 1, o.value(t, "brokerswitch_events_total", "queue", "issues", "event", "issues", "outcome", "rejected"), 0)
	s.waitFor("windows that ran their length", 30*time.Second, func() bool {
		return o.value(t, "brokerswitch_consumer_window_seconds", "end", "elapsed") >= 4
	})
	require.Positive(t, o.value(t, "brokerswitch_leftover_drain_unreachable_total", "broker", "1"))
	require.Positive(t, o.value(t, "brokerswitch_amqp_dial_failures_total", "broker", "1"))
	s.waitFor("start and success pings", 10*time.Second, func() bool { return o.pings.get("start") >= 4 && o.pings.get("success") >= 4 })
	require.Zero(t, o.pings.get("fail"), "a spare that is down never fails a ping")

	// Leftovers on the spare, once it is back, are taken by the Leftover Drain. The
	// producer never announced broker 1, so only stragglers are: these an operator moved
	// back from -error, as their header says.
	s.Proxies[1].Restore(t)
	leftovers, err := payloads.Lifecycle(1)
	require.NoError(t, err)
	for _, ev := range leftovers {
		s.PublishRaw(1, ev.Queue, amqp.Table{"x-github-event": ev.Event, "x-github-delivery": ev.DeliveryID,
			broker.HeaderRetryCycles: int64(1),
			broker.HeaderErrorQueue:  ev.Queue, broker.HeaderErrorAt: time.Now().UTC().Format(time.RFC3339),
			broker.HeaderErrorReason: "moved back by an operator"}, ev.Body)
	}
	s.waitFor("the leftovers applied", time.Minute, func() bool { return s.deliveries() == int64(len(events)+len(leftovers))+1 })
	// Counted once Pool.DrainWith returned, after the rows committed.
	o.requireCount(s, float64(len(leftovers)), "brokerswitch_leftover_drain_messages_total", "broker", "1")

	// A drained switch: counted, with its lags, and the gauges read from Postgres.
	s.Notify(1, time.Now())
	s.waitFor("the switch to broker 1", 30*time.Second, func() bool { return s.State().ActiveIndex == 1 })
	// Counted once CommitHop's transaction committed, after the state shows the switch.
	o.requireCount(s, 1, "brokerswitch_switches_total", "forced", "false")
	o.requireCount(s, 1, "brokerswitch_switch_commit_lag_seconds")
	o.requireCount(s, 1, "brokerswitch_switch_pending_seconds")
	// Counted by the drain check that CommitHop waited for.
	require.Positive(t, o.value(t, "brokerswitch_drain_checks_total", "broker", "0", "result", "drained"))
	// The state gauges come from a reading that serves one second of scrapes.
	s.waitFor("the active broker gauge at 1", 10*time.Second, func() bool {
		return o.value(t, "brokerswitch_active_broker") == 1
	})
	s.waitFor("the pending switch's age cleared", 10*time.Second, func() bool {
		return o.value(t, "brokerswitch_pending_switch_age_seconds") == 0
	})
	require.InDelta(t, 0, o.value(t, "brokerswitch_drain_check_ready_messages", "broker", "0", "queue", "issues-retry"), 0)
	require.InDelta(t, 1, o.value(t, "brokerswitch_drain_check_reachable", "broker", "0"), 0)
	s.waitFor("windows ended early by the switch", 30*time.Second, func() bool {
		return o.value(t, "brokerswitch_consumer_window_seconds", "end", "cancelled") >= 1
	})
	// Read from the workers' leases: every queue is read again, by one consume attempt.
	s.waitFor("every queue consumed, by the leases", 30*time.Second, func() bool {
		for _, q := range s.Config.Queues {
			if o.value(t, "brokerswitch_windows_consuming", "queue", q) != 1 {
				return false
			}
		}
		return true
	})

	// A Pending Switch that cannot complete (broker 1 is down) ages; a forced switch ends it.
	s.Proxies[1].Cut()
	s.Notify(0, time.Now().Add(time.Minute))
	s.waitFor("an unreachable drain check", 30*time.Second, func() bool {
		return o.value(t, "brokerswitch_drain_checks_total", "broker", "1", "result", "unreachable") >= 1
	})
	s.waitFor("the pending switch ageing", 10*time.Second, func() bool {
		return o.value(t, "brokerswitch_pending_switch_age_seconds") > 0
	})
	s.waitFor("the unreachable drain check in the gauges", 10*time.Second, func() bool {
		return o.value(t, "brokerswitch_pending_switch_hops") == 1 && o.value(t, "brokerswitch_drain_check_timestamp_seconds", "broker", "1") > 0
	})
	require.InDelta(t, 0, o.value(t, "brokerswitch_drain_check_reachable", "broker", "1"), 0)
	// Broker 1 is active and down: its windows fail, and each failure pings /fail.
	s.waitFor("a failed window", 30*time.Second, func() bool {
		return o.value(t, "brokerswitch_consumer_window_seconds", "end", "failed") >= 1
	})
	s.waitFor("a fail ping", 10*time.Second, func() bool { return o.pings.get("fail") >= 1 })
	// Counted by the pool's watcher of the connection, beside the window that failed.
	o.waitMetric(s, "the lost connection counted", positive, "brokerswitch_amqp_connections_lost_total", "broker", "1")

	s.Signal(workflows.SignalForceSwitch, activities.ForceSwitchInput{Index: 0})
	s.waitFor("the forced switch", 30*time.Second, func() bool { return s.Switched(0) })
	s.waitFor("the forced switch counted", 10*time.Second, func() bool {
		return o.value(t, "brokerswitch_switches_total", "forced", "true") == 1
	})
	// The state gauges come from a reading that serves one second of scrapes.
	s.waitFor("the pending switch's age cleared", 10*time.Second, func() bool {
		return o.value(t, "brokerswitch_pending_switch_age_seconds") == 0
	})
	s.Proxies[1].Restore(t)

	// The Temporal SDK's metrics share the registry, and METRICS_ADDR serves it all on /metrics.
	require.Positive(t, o.value(t, "temporal_request_total"))
	// Recorded by the SDK once the activity returned, after its commit: a local activity
	// of the BrokerSwitch workflow, and a window's activity task.
	o.waitMetric(s, "CommitHop's latency recorded", positive, "temporal_local_activity_execution_latency_seconds", "activity_type", "CommitHop")
	o.waitMetric(s, "a window's latency recorded", positive, "temporal_activity_execution_latency_seconds", "activity_type", "PrepareWindow")
	scrape := httptest.NewServer(o.m.Handler())
	defer scrape.Close()
	res, err := http.Get(scrape.URL + "/metrics")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)
	for _, want := range []string{`brokerswitch_switches_total{forced="true"} 1`, "brokerswitch_state_up 1", "temporal_request_total"} {
		require.Contains(t, string(page), want)
	}
	require.NotContains(t, string(page), "poison-json", "no delivery id in a label")
}
