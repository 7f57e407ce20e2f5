package broker

import (
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
