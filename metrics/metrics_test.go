package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestNilMetricsIsANoOp(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.Event("issues", "issues", OutcomeApplied)
	m.Routed("issues", RouteRetry)
	m.LeftoverDrained("issues", 1, 3)
	m.LeftoverUnreachable("issues", 1)
	m.DrainCheck(0, DrainDrained)
	m.SwitchCommitted(time.Second, time.Minute)
	m.SwitchForced()
	m.Window("issues", WindowElapsed, time.Minute)
	m.Reconnected(0)
	m.DialFailed(0)
	m.ConnectionLost(0)
	m.PingFailed()
	m.Blocked(0, true)
	m.DeliveryIDReused("issues")
	m.ClockFallback("github_issues", ClockMissing)
	m.StartAtZero([]string{"issues"}, 2)
	require.NoError(t, m.WatchState(nil))

	rec := get(t, m.Handler())
	require.Equal(t, http.StatusOK, rec.code)
}

func TestCountersCarryTheirLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Event("issues", "issues", OutcomeApplied)
	m.Event("issues", "issues", OutcomeApplied)
	m.Event("pushes", "other", OutcomeRejected)
	m.Routed("pushes", RouteError)
	m.LeftoverDrained("issues", 1, 7)
	m.DrainCheck(0, DrainNotDrained)
	m.DrainCheck(0, DrainDrained)
	m.SwitchCommitted(20*time.Millisecond, -1)
	m.SwitchForced()
	m.Window("issues", WindowCancelled, 3*time.Second)
	m.Reconnected(1)
	m.ClockFallback("github_comments", ClockUnparseable)

	require.InDelta(t, 2, testutil.ToFloat64(m.events.WithLabelValues("issues", "issues", OutcomeApplied)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.events.WithLabelValues("pushes", "other", OutcomeRejected)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.routed.WithLabelValues("pushes", RouteError)), 0)
	require.InDelta(t, 7, testutil.ToFloat64(m.leftover.WithLabelValues("issues", "1")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.switches.WithLabelValues("false")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.switches.WithLabelValues("true")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.reconnects.WithLabelValues("1")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.clockFallback.WithLabelValues("github_comments", ClockUnparseable)), 0)
	require.Equal(t, 1, testutil.CollectAndCount(m.commitLag))
	// An unknown pending time is not observed.
	require.NoError(t, testutil.CollectAndCompare(m.pendingFor, strings.NewReader(""), "brokerswitch_switch_pending_seconds_count"))

	page := get(t, m.Handler()).body
	for _, want := range []string{
		`brokerswitch_events_total{event="issues",outcome="applied",queue="issues"} 2`,
		`brokerswitch_drain_checks_total{broker="0",result="not_drained"} 1`,
		`brokerswitch_consumer_window_seconds_count{end="cancelled",queue="issues"} 1`,
		`brokerswitch_switch_commit_lag_seconds_count 1`,
	} {
		require.Contains(t, page, want)
	}
}

// Every series with known label values is served at 0 before its first event, so that
// increase() sees that event.
func TestKnownSeriesStartAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.StartAtZero([]string{"issues", "pushes"}, 2)

	page := get(t, m.Handler()).body
	for _, want := range []string{
		`brokerswitch_routed_messages_total{queue="issues",route="retry"} 0`,
		`brokerswitch_routed_messages_total{queue="pushes",route="error"} 0`,
		`brokerswitch_consumer_window_seconds_count{end="failed",queue="pushes"} 0`,
		`brokerswitch_consumer_window_seconds_count{end="elapsed",queue="issues"} 0`,
		`brokerswitch_switches_total{forced="false"} 0`,
		`brokerswitch_switches_total{forced="true"} 0`,
		`brokerswitch_amqp_dial_failures_total{broker="1"} 0`,
		`brokerswitch_amqp_reconnects_total{broker="0"} 0`,
		`brokerswitch_amqp_connections_lost_total{broker="1"} 0`,
		`brokerswitch_amqp_blocked{broker="1"} 0`,
		`brokerswitch_drain_checks_total{broker="0",result="unreachable"} 0`,
		`brokerswitch_leftover_drain_messages_total{broker="1",queue="pushes"} 0`,
		`brokerswitch_leftover_drain_unreachable_total{broker="0",queue="issues"} 0`,
		`brokerswitch_healthchecks_ping_failures_total 0`,
		`brokerswitch_delivery_id_reused_total{queue="pushes"} 0`,
		`brokerswitch_clock_fallbacks_total{reason="missing",table="github_pull_requests"} 0`,
		`brokerswitch_clock_fallbacks_total{reason="unparseable",table="github_repositories"} 0`,
	} {
		require.Contains(t, page, want)
	}
	require.NotContains(t, page, `broker="2"`, "only the configured brokers")

	// The first event then counts from 0, and the gauge follows the broker's word.
	m.Routed("issues", RouteRetry)
	m.Blocked(1, true)
	require.InDelta(t, 1, testutil.ToFloat64(m.routed.WithLabelValues("issues", RouteRetry)), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.blocked.WithLabelValues("1")), 0)
	m.Blocked(1, false)
	require.InDelta(t, 0, testutil.ToFloat64(m.blocked.WithLabelValues("1")), 0)
}

func TestStateGaugesAreReadAtScrapeTime(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	New(reg) // the state gauges live beside the counters
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	reading := StateReading{
		ActiveIndex:  1,
		PendingSince: now.Add(-90 * time.Second),
		PendingHops:  2,
		LastCheck:    &DrainCheckReading{Broker: 1, Counts: map[string]int{"issues": 3, "issues-retry": 1}, Reachable: true, At: now},
	}
	var fail bool
	clock := now
	c := newStateCollector(func(context.Context) (StateReading, error) {
		if fail {
			return StateReading{}, errors.New("postgres is down")
		}
		return reading, nil
	}, func() time.Time { return clock })
	require.NoError(t, reg.Register(c))

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP brokerswitch_active_broker Index of the active broker, the one the windows consume.
# TYPE brokerswitch_active_broker gauge
brokerswitch_active_broker 1
# HELP brokerswitch_pending_switch_age_seconds Seconds since the Pending Switch was recorded; 0 when nothing is pending.
# TYPE brokerswitch_pending_switch_age_seconds gauge
brokerswitch_pending_switch_age_seconds 90
# HELP brokerswitch_pending_switch_hops Hops left on the Pending Switch's route; 0 when nothing is pending.
# TYPE brokerswitch_pending_switch_hops gauge
brokerswitch_pending_switch_hops 2
# HELP brokerswitch_drain_check_ready_messages Ready messages the last drain check counted, by queue (-retry queues included) and the broker it checked.
# TYPE brokerswitch_drain_check_ready_messages gauge
brokerswitch_drain_check_ready_messages{broker="1",queue="issues"} 3
brokerswitch_drain_check_ready_messages{broker="1",queue="issues-retry"} 1
# HELP brokerswitch_state_up 1 when the broker state could be read from Postgres for this scrape, else 0 (and the other state gauges are absent).
# TYPE brokerswitch_state_up gauge
brokerswitch_state_up 1
`), "brokerswitch_active_broker", "brokerswitch_pending_switch_age_seconds", "brokerswitch_pending_switch_hops",
		"brokerswitch_drain_check_ready_messages", "brokerswitch_state_up"))

	reading = StateReading{ActiveIndex: 2}
	clock = clock.Add(stateCacheFor) // a reading serves the scrapes of one second
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP brokerswitch_pending_switch_age_seconds Seconds since the Pending Switch was recorded; 0 when nothing is pending.
# TYPE brokerswitch_pending_switch_age_seconds gauge
brokerswitch_pending_switch_age_seconds 0
`), "brokerswitch_pending_switch_age_seconds", "brokerswitch_drain_check_ready_messages"))

	fail = true
	clock = clock.Add(stateCacheFor)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP brokerswitch_state_up 1 when the broker state could be read from Postgres for this scrape, else 0 (and the other state gauges are absent).
# TYPE brokerswitch_state_up gauge
brokerswitch_state_up 0
`), "brokerswitch_state_up", "brokerswitch_active_broker"))
}

// A burst of scrapes reads Postgres once a second, whatever its size, and the scrapes
// beyond the in-flight limit are refused at once instead of piling up.
func TestABurstOfScrapesSharesOneStateReading(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	release := make(chan struct{})
	m := New(prometheus.NewRegistry())
	require.NoError(t, m.WatchState(func(context.Context) (StateReading, error) {
		reads.Add(1)
		<-release // Postgres is slow: every scrape arrives while the first read is in flight
		return StateReading{ActiveIndex: 1}, nil
	}))
	h := m.Handler()
	const scrapes = 200
	codes := make(chan int, scrapes)
	var wg sync.WaitGroup
	for range scrapes {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			codes <- rec.Code
		})
	}
	// The scrapes beyond the limit are answered while the others wait on the read.
	refused := 0
	deadline := time.After(10 * time.Second)
	for refused < scrapes-maxScrapesInFlight {
		select {
		case code := <-codes:
			require.Equal(t, http.StatusServiceUnavailable, code)
			refused++
		case <-deadline:
			close(release)
			t.Fatalf("only %d of %d scrapes were refused while the read was in flight", refused, scrapes)
		}
	}
	close(release)
	wg.Wait()
	close(codes)
	for code := range codes {
		require.Equal(t, http.StatusOK, code)
	}
	require.EqualValues(t, 1, reads.Load(), "one read served every scrape of that second")
}

func TestWatchStateOnlyOnce(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	read := func(context.Context) (StateReading, error) { return StateReading{}, nil }
	require.NoError(t, m.WatchState(read))
	require.Error(t, m.WatchState(read))
}

func TestServeAnswersMetricsUntilContextEnds(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	m.Reconnected(0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.serve(ctx, ln, nil, nil) }()

	res, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), `brokerswitch_amqp_reconnects_total{broker="0"} 1`)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the metrics server did not stop")
	}
	require.ErrorContains(t, m.Serve(t.Context(), "256.0.0.1:1", nil, nil), "METRICS_ADDR")
}

type recorded struct {
	code int
	body string
}

func get(t *testing.T, h http.Handler) recorded {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))
	return recorded{code: rec.Code, body: rec.Body.String()}
}

// A client that sends a request's headers and dribbles its body, or never sends it, is cut
// once the read timeout has passed, as the API cuts it: it holds no goroutine and no
// descriptor beyond that.
func TestServeCutsAClientThatNeverSendsItsBody(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = m.serve(t.Context(), ln, nil, nil) }()

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab"))
	require.NoError(t, err)
	started := time.Now()
	require.NoError(t, conn.SetReadDeadline(started.Add(serverReadTimeout+10*time.Second)))
	_, err = io.Copy(io.Discard, conn) // the answer, then the end of the connection
	require.NoError(t, err, "the server did not close the connection within its read timeout")
	require.Less(t, time.Since(started), serverReadTimeout+5*time.Second)
}
