//go:build integration

package ingest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
)

// A delivery id that comes back with another payload is not a redelivery: it goes to
// -error with the reason and is counted, and the row it would have changed stays as the
// first payload left it. The same payload again stays a silent duplicate.
func TestDeliveryIDReusedWithAnotherPayloadIsRejected(t *testing.T) {
	e := newEnv(t)
	m, reg := metricstest.New()
	e.ing.Metrics = m
	reusedCount := func() float64 {
		return metricstest.Value(t, reg, "brokerswitch_delivery_id_reused_total", "queue", queue)
	}
	opened := example(t, "issues.opened.0")
	retitled := edit(t, opened, func(p map[string]any) { object(p, "issue")["title"] = "not the same event" })

	assert.Equal(t, acks(1), e.handle(t, delivery("issues", "d-1", opened)))
	assert.Equal(t, acks(1), e.handle(t, delivery("issues", "d-1", opened)), "a redelivery is a silent duplicate")
	require.InDelta(t, 0, reusedCount(), 0)

	got := e.handle(t, delivery("issues", "d-1", retitled))
	assert.Equal(t, broker.Reject, got[0].Outcome)
	assert.Contains(t, got[0].Reason, "delivery id d-1 was taken before with another payload")
	require.InDelta(t, 1, reusedCount(), 0)
	assert.NotEqual(t, "not the same event", e.issue(t).Title)
	assert.Equal(t, "d-1", e.issue(t).LastDeliveryID)

	// Within one batch: the first copy is applied, the different one rejected.
	got = e.handle(t, delivery("pull_request", "d-2", example(t, "pull_request.opened.0")),
		delivery("pull_request", "d-2", example(t, "pull_request.reopened.0")))
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[0])
	assert.Equal(t, broker.Reject, got[1].Outcome)
	require.InDelta(t, 2, reusedCount(), 0)

	// A row without a hash (written before hashes were kept) cannot tell a reused id from
	// a redelivery: it is taken for a duplicate, acknowledged and not counted as reused.
	require.NoError(t, e.db.Exec("UPDATE github_deliveries SET payload_sha256 = NULL WHERE delivery_id = 'd-1'").Error)
	assert.Equal(t, acks(1), e.handle(t, delivery("issues", "d-1", retitled)))
	require.InDelta(t, 2, reusedCount(), 0)
}
