//go:build integration

package errorqueue

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

// A poison message fixed by a release: an issue whose title the schema of the day
// refuses (a check constraint standing for a column too narrow) is rejected to -error by
// the real apply path; the release relaxes the schema; the requeued message is applied
// by the same path, once, and -error is empty.
func TestARequeuedPoisonMessageIsAppliedOnceTheReleaseFixedIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, e.db.Exec("ALTER TABLE github_issues ADD CONSTRAINT title_fits CHECK (length(title) <= 20)").Error)
	title := "a title longer than the old release's twenty characters"
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "issues", true, false, amqp.Publishing{
		Headers:   amqp.Table{ingest.HeaderEvent: "issues", ingest.HeaderDelivery: "poison-1"},
		MessageId: "poison-1", DeliveryMode: amqp.Persistent, Body: issueBody(t, title),
	})
	require.NoError(t, err)
	require.True(t, dc.Wait())
	ch.Close()

	apply := (&ingest.Ingester{DB: modelstest.NewPool(t, e.dsn), MaxRetryCycles: 3}).ForBroker(0)
	drained, err := e.pool.DrainWith(ctx, 0, "issues", broker.DrainOptions{Max: 1, Batch: 1}, apply)
	require.NoError(t, err)
	require.Equal(t, 1, drained.Taken)

	l := mustList(t, e)
	require.Equal(t, []string{"poison-1"}, ids(l.Messages))
	require.Equal(t, "data", l.Messages[0].ReasonKind, l.Messages[0].Reason)
	require.False(t, l.Messages[0].AppliedSince)

	// The release: the schema takes the title now.
	require.NoError(t, e.db.Exec("ALTER TABLE github_issues DROP CONSTRAINT title_fits").Error)
	run, err := e.svc.Requeue(ctx, Filter{Reason: "data"}, RequeueOptions{})
	require.NoError(t, err)
	require.Equal(t, []Outcome{{Queue: "issues", Kind: "data", Requeued: 1}}, run.Outcomes)

	deadline := time.Now().Add(30 * time.Second)
	for e.held("issues") == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	drained, err = e.pool.DrainWith(ctx, 0, "issues", broker.DrainOptions{Max: 1, Batch: 1}, apply)
	require.NoError(t, err)
	require.Equal(t, 1, drained.Taken)

	var row models.Delivery
	require.NoError(t, e.db.Where("delivery_id = ?", "poison-1").Take(&row).Error)
	require.Equal(t, models.OutcomeApplied, row.Outcome)
	var got string
	require.NoError(t, e.db.Raw("SELECT title FROM github_issues").Scan(&got).Error)
	require.Equal(t, title, got)
	require.Equal(t, 0, e.held("issues-error"))
	_, err = e.svc.Requeue(ctx, Filter{}, RequeueOptions{})
	require.ErrorIs(t, err, ErrNothingMatched, "nothing left to requeue")
}
