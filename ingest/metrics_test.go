//go:build integration

package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
)

// Each delivery's outcome is counted once, by queue and event, after its transaction
// committed; an event type outside GitHub's set is "other".
func TestOutcomesAreCountedPerQueueAndEvent(t *testing.T) {
	e := newEnv(t)
	m, reg := metricstest.New()
	e.ing.Metrics = m
	value := func(event, outcome string) float64 {
		return metricstest.Value(t, reg, "brokerswitch_events_total", "queue", queue, "event", event, "outcome", outcome)
	}

	opened := delivery("pull_request", "pr-1", example(t, "pull_request.opened.0"))
	e.handle(t,
		opened,
		delivery("check_run", "cr-1", example(t, "check_run.created.0")),
		delivery("brand_new_event", "new-1", []byte(`{"action": "x"}`)),
		delivery("issues", "bad-1", []byte(`{"action": "opened"`)),
	)
	require.InDelta(t, 1, value("pull_request", "applied"), 0)
	require.InDelta(t, 1, value("check_run", "ignored"), 0)
	require.InDelta(t, 1, value("other", "ignored"), 0)
	require.InDelta(t, 1, value("issues", "rejected"), 0)

	e.handle(t, opened)
	require.InDelta(t, 1, value("pull_request", "duplicate"), 0)
	require.InDelta(t, 1, value("pull_request", "applied"), 0, "a redelivery is no second application")

	injectFault(t, e, "github_comments", "P0001", -1)
	bad := delivery("issue_comment", "bad-2", example(t, "issue_comment.created.0"))
	e.handle(t, bad)
	e.handle(t, withDeaths(bad, queue, 2))
	require.InDelta(t, 1, value("issue_comment", "retried"), 0)
	require.InDelta(t, 1, value("issue_comment", "rejected"), 0)
}

// A failed delivery is logged with its queue, broker and delivery id.
func TestAFailedDeliveryIsLoggedWithItsDeliveryID(t *testing.T) {
	e := newEnv(t)
	var logs bytes.Buffer
	e.ing.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	_, err := e.ing.ForBroker(1).HandleBatch(context.Background(), queue, nil)
	require.NoError(t, err)
	e.handle(t, delivery("issue_comment", "bad-3", nulComment(t)))

	var rec map[string]any
	for line := range strings.Lines(logs.String()) {
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec["msg"] == "delivery failed" {
			break
		}
	}
	require.Equal(t, "delivery failed", rec["msg"], logs.String())
	require.Equal(t, "bad-3", rec["delivery_id"])
	require.Equal(t, queue, rec["queue"])
	require.InDelta(t, 0, rec["broker"], 0)
}

// A delivery that a quorum queue dead-lettered for its delivery limit came back behind
// later ones: it is applied, and counted.
func TestADeliveryBackFromItsDeliveryLimitIsCounted(t *testing.T) {
	e := newEnv(t)
	m, reg := metricstest.New()
	e.ing.Metrics = m
	d := delivery("pull_request", "pr-1", example(t, "pull_request.opened.0"))
	d.Headers["x-death"] = []any{
		amqp.Table{"queue": queue + "-retry", "reason": "expired", "count": int64(1)},
		amqp.Table{"queue": queue, "reason": "delivery_limit", "count": int64(1)},
	}
	e.handle(t, d, delivery("pull_request", "pr-2", example(t, "pull_request.closed.0")))
	require.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_delivery_limit_returns_total", "queue", queue), 0)
}
