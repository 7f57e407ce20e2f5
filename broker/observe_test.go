//go:build integration

package broker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
)

// Dial failures are logged as JSON with the broker's index and host, and never with its
// password: neither a refused TCP connection nor a refused login shows it.
func TestDialFailureLogsNeverCarryThePassword(t *testing.T) {
	t.Parallel()
	const closedPortPassword, wrongPassword = "Cl0sed-P0rt-pw%2Csecret", "Wr0ng-L0gin-pw"
	vhost := testenv.NewVhost(t)
	eps, err := ParseEndpoints("amqp://user:" + closedPortPassword + "@127.0.0.1:1/nowhere," +
		strings.Replace(vhost, "guest:guest", "guest:"+wrongPassword, 1))
	require.NoError(t, err)
	logs := &testenv.Buffer{}
	m, reg := metricstest.New()
	pool := NewPool(eps, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), PoolSettings{Metrics: m})
	defer pool.Close()

	for i := range eps {
		_, err := pool.Channel(t.Context(), i)
		require.ErrorIs(t, err, ErrUnreachable)
	}

	out := logs.String()
	for _, secret := range []string{closedPortPassword, "Cl0sed-P0rt-pw,secret", wrongPassword} {
		require.NotContains(t, out, secret)
	}
	var hosts []string
	for line := range strings.Lines(out) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec["msg"] == "broker dial failed" {
			hosts = append(hosts, rec["broker"].(string))
			require.NotEmpty(t, rec["error"])
		}
	}
	require.Len(t, hosts, 2, out)
	require.Equal(t, "#0 127.0.0.1:1/nowhere", hosts[0])
	require.True(t, strings.HasPrefix(hosts[1], "#1 "+testenv.RabbitAddr()+"/bs-test-"), hosts[1])
	require.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_amqp_dial_failures_total", "broker", "0"), 0)
	require.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_amqp_dial_failures_total", "broker", "1"), 0)
}

// A connection the broker closes is counted as lost, and the redial as a reconnect; a
// Retry and a Reject are counted as routed once the broker took them.
func TestPoolMetricsCountReconnectsAndRoutes(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	m, reg := metricstest.New()
	r.pool.settings.Metrics = m
	ctx := t.Context()
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Hour})
	require.Zero(t, metricstest.Value(t, reg, "brokerswitch_amqp_reconnects_total"), "the first connection is no reconnect")

	r.publish("issues", "ok", "retry", "reject")
	h := &recorder{verdict: func(d amqp.Delivery) Verdict {
		switch string(d.Body) {
		case "retry":
			return Verdict{Outcome: Retry, Reason: "transient"}
		case "reject":
			return Verdict{Outcome: Reject, Reason: "poison"}
		}
		return Verdict{Outcome: Ack}
	}}
	consumeCtx, stop := context.WithCancel(ctx)
	done := r.consume(consumeCtx, "issues", ConsumeOptions{Prefetch: testPrefetch}, h)
	r.eventuallyCount("issues-error", 1)
	r.eventuallyCount("issues-retry", 1)
	stop()
	require.NoError(t, waitDone(t, done))
	require.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_routed_messages_total", "queue", "issues", "route", "retry"), 0)
	require.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_routed_messages_total", "queue", "issues", "route", "error"), 0)

	testenv.CloseConnections(t, r.url)
	// The shared connection and the one of the queue's consumer.
	require.Eventually(t, func() bool {
		return metricstest.Value(t, reg, "brokerswitch_amqp_connections_lost_total", "broker", "0") == 2
	}, waitFor, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		ch, err := r.pool.Channel(ctx, 0)
		if err != nil {
			return false
		}
		ch.Close()
		return true
	}, waitFor, 20*time.Millisecond)
	require.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_amqp_reconnects_total", "broker", "0"), 0)
}

// A producer's quorum queue declared with only the arguments a producer must declare is
// used as it is, and what in it can lose order or messages is said: at-most-once
// dead-lettering on every version, and on 4.x the default delivery limit of 20. One
// declared as brokerswitch declares it is not.
func TestAProducersRiskyQuorumQueueIsCounted(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	m, reg := metricstest.New()
	r.pool.settings.Metrics = m
	conn, err := amqp.Dial(r.url)
	require.NoError(t, err)
	version, _ := conn.Properties["version"].(string)
	require.NoError(t, conn.Close())
	_, err = r.channel().QueueDeclare("issues", true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "issues-retry",
	})
	require.NoError(t, err)
	topo := Topology{Queues: []string{"issues", "pushes"}, RetryTTL: time.Minute, Type: Quorum}
	require.NoError(t, r.pool.DeclareTopology(context.Background(), 0, topo))

	risk := func(queue, risk string) float64 {
		return metricstest.Value(t, reg, "brokerswitch_quorum_queue_risk", "broker", "0", "queue", queue, "risk", risk)
	}
	require.InDelta(t, 1, risk("issues", RiskAtMostOnce), 0)
	limit := 0.0
	if version >= "4" {
		limit = 1
	}
	require.InDelta(t, limit, risk("issues", RiskDeliveryLimit), 0, "RabbitMQ %s", version)
	require.InDelta(t, 0, risk("issues-retry", RiskAtMostOnce), 0, "declared by brokerswitch")
	require.InDelta(t, 0, risk("pushes", RiskDeliveryLimit), 0)
	require.InDelta(t, 0, risk("pushes", RiskAtMostOnce), 0)
}
