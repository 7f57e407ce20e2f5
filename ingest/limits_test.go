//go:build integration

package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
)

// A body over MaxMessageBytes is rejected to -error with the limit in its reason, and
// recorded in the ledger; the rest of the batch is applied.
func TestMessageOverTheSizeLimitIsRejected(t *testing.T) {
	e := newEnv(t)
	small := delivery("brand_new_event", "d-1", []byte(`{"action": "x"}`))
	large := delivery("push", "d-2", example(t, "push.none.4"))
	e.ing.MaxMessageBytes = len(large.Body) - 1

	got := e.handle(t, small, large)
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[0])
	assert.Equal(t, broker.Reject, got[1].Outcome)
	want := fmt.Sprintf("body of %d bytes is larger than the limit of %d bytes (MAX_MESSAGE_BYTES)", len(large.Body), len(large.Body)-1)
	assert.Contains(t, got[1].Reason, want)
	assert.Contains(t, e.ledger(t, "d-2").ErrorReason, want)
	assert.Zero(t, e.count(t, "github_pushes"))

	// At the limit, it applies.
	e.ing.MaxMessageBytes = len(large.Body)
	assert.Equal(t, acks(1), e.handle(t, large))
	assert.Equal(t, int64(1), e.count(t, "github_pushes"))
}

// slowIssues makes inserting an issue titled "slow" outlast any statement_timeout of the
// test, the first times of them (times < 0: always).
func slowIssues(t *testing.T, e *env, times int) {
	t.Helper()
	onInsert(t, e, "slow_issue", "github_issues", "NEW.title = 'slow'", "PERFORM pg_sleep(30)", times)
}

// timeoutBatch is a pull request, an issue titled "slow" and a push, on an Ingester whose
// statements time out after 300 ms.
func timeoutBatch(t *testing.T, e *env) (*Ingester, []amqp.Delivery) {
	t.Helper()
	ing := *e.ing
	ing.DB = openPool(t, e.dsn, models.PoolConfig{StatementTimeout: 300 * time.Millisecond})
	ing.transientBackoff = time.Millisecond
	slow := edit(t, example(t, "issues.opened.0"), func(p map[string]any) { object(p, "issue")["title"] = "slow" })
	return &ing, []amqp.Delivery{
		delivery("pull_request", "d-1", example(t, "pull_request.opened.0")),
		delivery("issues", "d-2", slow),
		delivery("push", "d-3", example(t, "push.none.4")),
	}
}

// A message that outlasts statement_timeout each time it is applied alone goes to -error
// at once: the batch that timed out is isolated, the others are applied, and the queue is
// not held by a message that would time out on every attempt (nor sent through -retry).
func TestMessageThatTimesOutAloneIsRejected(t *testing.T) {
	e := newEnv(t)
	slowIssues(t, e, -1)
	ing, batch := timeoutBatch(t, e)

	got, err := ing.ForBroker(0).HandleBatch(context.Background(), queue, batch)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[0])
	assert.Equal(t, broker.Reject, got[1].Outcome, "not Retry: it would time out on every cycle")
	assert.Contains(t, got[1].Reason, "too costly to apply")
	assert.Contains(t, got[1].Reason, "57014")
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[2])
	assert.Equal(t, models.OutcomeError, e.ledger(t, "d-2").Outcome)
	assert.Equal(t, int64(1), e.count(t, "github_pull_requests"))
	assert.Equal(t, int64(1), e.count(t, "github_pushes"))
	assert.Zero(t, e.count(t, "github_issues"))
}

// A timeout that does not come back (the server was busy) loses nothing: the batch is
// isolated, and every message applies on its own.
func TestBatchThatTimesOutOnceIsApplied(t *testing.T) {
	e := newEnv(t)
	slowIssues(t, e, 1)
	ing, batch := timeoutBatch(t, e)

	got, err := ing.ForBroker(0).HandleBatch(context.Background(), queue, batch)
	require.NoError(t, err)
	assert.Equal(t, acks(3), got)
	assert.Equal(t, int64(1), e.count(t, "github_issues"))
}
