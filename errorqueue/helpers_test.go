//go:build integration

package errorqueue

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// env is a test's own vhost with the issues and pushes topology, a database at the
// newest schema, and the Service over both.
type env struct {
	t    *testing.T
	url  string
	pool *broker.Pool
	db   *gorm.DB
	// dsn is db's, for a pool of its own.
	dsn  string
	svc  *Service
	conn *amqp.Connection
	logs *testenv.Buffer
}

var queues = []string{"issues", "pushes"}

func newEnv(t *testing.T, extraURLs ...string) *env {
	t.Helper()
	url := testenv.NewVhost(t)
	raw := url
	for _, u := range extraURLs {
		raw += "," + u
	}
	eps, err := broker.ParseEndpoints(raw)
	require.NoError(t, err)
	logs := &testenv.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	pool := broker.NewPool(eps, logger, broker.PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })
	topo := broker.Topology{Queues: queues, RetryTTL: time.Minute, Type: broker.QueueType(testenv.QueueType())}
	require.NoError(t, pool.DeclareTopology(context.Background(), 0, topo))
	db, dsn := modelstest.NewDB(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &env{t: t, url: url, pool: pool, db: db, dsn: dsn, conn: conn, logs: logs,
		svc: &Service{Brokers: pool, DB: db, Queues: queues, Logger: logger}}
}

// reject puts a message into {queue}-error as a worker's rejection leaves it.
func (e *env) reject(queue, id, reason string, at time.Time, body []byte) {
	e.t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(e.t, err)
	defer ch.Close()
	require.NoError(e.t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", broker.ErrorQueue(queue), true, false, amqp.Publishing{
		Headers: amqp.Table{
			"x-github-event": "issues", "x-github-delivery": id,
			broker.HeaderErrorReason: reason, broker.HeaderErrorAt: at.UTC().Format(time.RFC3339),
			broker.HeaderErrorQueue: queue, broker.HeaderRetryCycles: int64(3),
		},
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: id, Body: body,
	})
	require.NoError(e.t, err)
	ok, err := dc.WaitContext(context.Background())
	require.NoError(e.t, err)
	require.True(e.t, ok)
}

// takeAll takes every message of queue (this destroys them) and returns their delivery
// ids in order. It consumes rather than gets: quorum queues with a single active consumer
// refuse basic.get.
func (e *env) takeAll(queue string) []string {
	e.t.Helper()
	n := e.held(queue)
	ch, err := e.conn.Channel()
	require.NoError(e.t, err)
	defer ch.Close()
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(e.t, err)
	var ids []string
	for range n {
		select {
		case d := <-deliveries:
			ids = append(ids, headerString(d.Headers, "x-github-delivery"))
		case <-time.After(30 * time.Second):
			e.t.Fatalf("%s: %d of %d messages consumed", queue, len(ids), n)
		}
	}
	return ids
}

// held is how many messages queue holds, as the broker counts them.
func (e *env) held(queue string) int {
	e.t.Helper()
	ch, err := e.conn.Channel()
	require.NoError(e.t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(e.t, err)
	return q.Messages
}

// ledger writes the ledger row of delivery id with outcome and body.
func (e *env) ledger(id string, outcome models.DeliveryOutcome, body []byte) {
	e.t.Helper()
	sum := sha256.Sum256(body)
	now := time.Now()
	row := models.Delivery{DeliveryID: id, Event: "issues", Queue: "issues", Outcome: outcome, ReceivedAt: now, PayloadSHA256: sum[:]}
	if outcome != models.OutcomeError {
		row.AppliedAt = &now
	} else {
		row.ErrorReason = "failed"
	}
	require.NoError(e.t, e.db.Create(&row).Error)
}

// issueBody is the vendored issues.opened example with its title replaced.
func issueBody(t *testing.T, title string) []byte {
	t.Helper()
	for _, p := range payloads.All() {
		if p.Name == "issues.opened.0" {
			var v map[string]any
			require.NoError(t, json.Unmarshal(p.Body, &v))
			v["issue"].(map[string]any)["title"] = title
			out, err := json.Marshal(v)
			require.NoError(t, err)
			return out
		}
	}
	t.Fatal("no issues.opened.0 payload")
	return nil
}

func ids(msgs []Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func body(i int) []byte { return fmt.Appendf(nil, `{"action":"opened","n":%d}`, i) }
