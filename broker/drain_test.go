package broker

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDrainRespectsMaxThenEmptiesTheQueue(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(25)...)
	ctx := context.Background()

	h := &recorder{verdict: func(d amqp.Delivery) Verdict {
		if string(d.Body) == "3" {
			return Verdict{Outcome: Reject, Reason: "bad"}
		}
		return Verdict{Outcome: Ack}
	}}
	taken, err := r.pool.Drain(ctx, 0, "issues", 10, 4, h)
	require.NoError(t, err)
	assert.Equal(t, 10, taken)
	assert.Equal(t, []int{4, 4, 2}, h.batchSizes())
	assert.Equal(t, 15, r.count("issues"))

	taken, err = r.pool.Drain(ctx, 0, "issues", 100, 4, h)
	require.NoError(t, err)
	assert.Equal(t, 15, taken)
	assert.Equal(t, numbered(25), h.bodies())
	for _, d := range h.seen {
		// A message sent beyond the cap and put back would come again as redelivered.
		assert.False(t, d.Redelivered, "message %s was delivered before", d.Body)
	}
	assert.Equal(t, 0, r.count("issues"))
	assert.Equal(t, []string{"3"}, bodies(r.getAll("issues-error")))

	taken, err = r.pool.Drain(ctx, 0, "issues", 100, 4, h)
	require.NoError(t, err)
	assert.Equal(t, 0, taken)
}

func TestDrainMissingQueueIsEmpty(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	taken, err := r.pool.Drain(context.Background(), 0, "nope", 10, 10, &recorder{})
	require.NoError(t, err)
	assert.Equal(t, 0, taken)
}

func TestDrainHandlerErrorKeepsTheBatch(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(7)...)

	errDB := errors.New("database unreachable")
	calls := 0
	h := BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		calls++
		if calls == 2 {
			return nil, errDB
		}
		return make([]Verdict, len(ds)), nil
	})
	taken, err := r.pool.Drain(context.Background(), 0, "issues", 100, 3, h)
	require.ErrorIs(t, err, errDB)
	assert.Equal(t, 3, taken)
	r.eventuallyCount("issues", 4)
	assert.Equal(t, numbered(7)[3:], bodies(r.getAll("issues")))
}

// TestDrainCapInsideAPrefetchWindowKeepsOrder stops drains at caps that fall inside a
// batch, many times over, while the queue holds more than a batch: each drain must take
// exactly its cap, and together they must see the queue in order, each message once.
func TestDrainCapInsideAPrefetchWindowKeepsOrder(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(120)...)
	h := &recorder{}
	for _, limit := range []int{7, 1, 13, 50, 3} {
		taken, err := r.pool.Drain(context.Background(), 0, "issues", limit, 10, h)
		require.NoError(t, err)
		require.Equal(t, limit, taken)
	}
	assert.Equal(t, numbered(120)[:74], h.bodies())
	assert.Equal(t, 46, r.count("issues"))
	for _, d := range h.seen {
		assert.False(t, d.Redelivered, "message %s was delivered before", d.Body)
	}
}

// TestDrainBesideAnExclusiveConsumer drains a queue that another client consumes
// exclusively: RabbitMQ refuses a second consumer there, so the drain falls back to
// basic.get and still takes, in order, what that consumer was not sent.
func TestDrainBesideAnExclusiveConsumer(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(8)...)
	ch := r.channel()
	require.NoError(t, ch.Qos(1, 0, false))
	held, err := ch.Consume("issues", "other-window", false, true, false, false, nil)
	require.NoError(t, err)
	first := <-held

	h := &recorder{}
	taken, err := r.pool.Drain(context.Background(), 0, "issues", 5, 3, h)
	require.NoError(t, err)
	assert.Equal(t, 5, taken)
	assert.Equal(t, numbered(8)[1:6], h.bodies())
	assert.Equal(t, numbered(1), []string{string(first.Body)})
}

// A batch is bounded in bytes as well as in count: the handler gets parts of at most
// MaxBatchBytes, in order, and a message larger than that alone.
func TestBatchesAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	sized := func(n int, c byte) string { return string(bytes.Repeat([]byte{c}, n)) }
	sent := []string{sized(90, 'a'), sized(90, 'b'), sized(90, 'c'), sized(240, 'd'), sized(50, 'e')}
	r.publish("issues", sent...)
	r.pool.MaxBatchBytes = 200

	h := &recorder{}
	taken, err := r.pool.Drain(context.Background(), 0, "issues", 10, 10, h)
	require.NoError(t, err)
	assert.Equal(t, 5, taken)
	assert.Equal(t, sent, h.bodies())
	assert.Equal(t, []int{2, 1, 1, 1}, h.batchSizes())
	assert.Equal(t, 0, r.count("issues"))
}
