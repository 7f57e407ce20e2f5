//go:build integration

package broker

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
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
	taken, err := drain(ctx, r.pool, 0, "issues", 10, 4, h)
	require.NoError(t, err)
	assert.Equal(t, 10, taken)
	assert.Equal(t, []int{4, 4, 2}, h.batchSizes())
	assert.Equal(t, 15, r.count("issues"))

	taken, err = drain(ctx, r.pool, 0, "issues", 100, 4, h)
	require.NoError(t, err)
	assert.Equal(t, 15, taken)
	assert.Equal(t, numbered(25), h.bodies())
	for _, d := range h.seen {
		// A message sent beyond the cap and put back would come again as redelivered.
		assert.False(t, d.Redelivered, "message %s was delivered before", d.Body)
	}
	assert.Equal(t, 0, r.count("issues"))
	assert.Equal(t, []string{"3"}, bodies(r.getAll("issues-error")))

	taken, err = drain(ctx, r.pool, 0, "issues", 100, 4, h)
	require.NoError(t, err)
	assert.Equal(t, 0, taken)
}

func TestDrainMissingQueueIsEmpty(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	taken, err := drain(context.Background(), r.pool, 0, "nope", 10, 10, &recorder{})
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
	taken, err := drain(context.Background(), r.pool, 0, "issues", 100, 3, h)
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
		taken, err := drain(context.Background(), r.pool, 0, "issues", limit, 10, h)
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
// exclusively: the window of a worker that has not stopped yet, say. That consumer holds
// a message unsettled, which goes back to the head of the queue should it end; taking
// what follows it would apply later messages first. The drain takes nothing and says why.
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
	taken, err := drain(context.Background(), r.pool, 0, "issues", 5, 3, h)
	require.ErrorIs(t, err, ErrQueueBusy)
	assert.Equal(t, 0, taken)
	assert.Empty(t, h.bodies())
	assert.Equal(t, numbered(1), []string{string(first.Body)})

	// Once that consumer is gone, its message is back at the head and the drain takes
	// the queue in order.
	require.NoError(t, ch.Close())
	r.eventuallyCount("issues", 8)
	taken, err = drain(context.Background(), r.pool, 0, "issues", 100, 3, h)
	require.NoError(t, err)
	assert.Equal(t, 8, taken)
	assert.Equal(t, numbered(8), h.bodies())
}

// A consumer that is not exclusive keeps the drain out as well: RabbitMQ would let the
// drain in beside it, and the two would share the queue out of order.
func TestDrainBesideAnotherConsumer(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(4)...)
	ch := r.channel()
	require.NoError(t, ch.Qos(1, 0, false))
	held, err := ch.Consume("issues", "someone", false, false, false, false, nil)
	require.NoError(t, err)
	<-held

	res, err := r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 10, Batch: 10}, &recorder{})
	require.ErrorIs(t, err, ErrQueueBusy)
	assert.Equal(t, DrainResult{}, res)
}

// Keep stops the drain before the first message it names: what came before is taken,
// that message and everything behind it stay, in order.
func TestDrainStopsBeforeAKeptMessage(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(9)...)
	keep := func(d amqp.Delivery) bool { return string(d.Body) == "5" }
	h := &recorder{}
	res, err := r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 100, Batch: 4, Keep: keep}, h)
	require.NoError(t, err)
	assert.Equal(t, DrainResult{Taken: 5, Kept: true}, res)
	assert.Equal(t, numbered(5), h.bodies())
	r.eventuallyCount("issues", 4)
	assert.Equal(t, numbered(9)[5:], bodies(r.getAll("issues")))

	// A kept message at the head: nothing is taken, and only one was delivered to look.
	r.publish("issues", "x", "y")
	res, err = r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 100, Batch: 4, Keep: func(amqp.Delivery) bool { return true }}, h)
	require.NoError(t, err)
	assert.Equal(t, DrainResult{Kept: true}, res)
	r.eventuallyCount("issues", 2)

	// Nothing to keep: the queue is seen empty.
	res, err = r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 100, Batch: 4, Keep: func(amqp.Delivery) bool { return false }}, h)
	require.NoError(t, err)
	assert.Equal(t, DrainResult{Taken: 2, Empty: true}, res)
}

// A round over a slow link waits for the first delivery its ready count promised, and a
// round that ends early, having taken some, goes on over a new channel: the drain takes
// everything, in order, and sees the spare empty only at its end. A round that ended early
// used to end the drain, and a large body behind it was never read.
func TestADrainOverASlowLinkTakesEverythingInOrder(t *testing.T) {
	t.Parallel()
	r, pool := slowDrainRabbit(t, 2*drainIdle)
	h := &recorder{}
	res, err := pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 100, Batch: 2}, h)
	require.NoError(t, err)
	assert.True(t, res.Empty, "the drain read the spare to its end: %+v", res)
	assert.Equal(t, 3, res.Taken)
	got := h.bodies()
	require.Len(t, got, 3)
	assert.Equal(t, []string{"small", "last"}, []string{got[0], got[2]})
	assert.Len(t, got[1], 64<<10, "the large body, second")
	r.eventuallyCount("issues", 0)
}

// slowDrainRabbit is a vhost with "small", a large body (one frame) and "last" on issues,
// and a pool that reads it through a proxy holding frames from the broker larger than a
// few kilobytes (the large body) for delay.
func slowDrainRabbit(t *testing.T, delay time.Duration) (*rabbit, *Pool) {
	t.Helper()
	url := testenv.NewVhost(t)
	proxy, err := testenv.ListenProxy(testenv.RabbitAddr(), testenv.SlowLargeFrames(delay))
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	eps, err := ParseEndpoints(strings.Replace(url, testenv.RabbitAddr(), proxy.Addr(), 1))
	require.NoError(t, err)
	pool := NewPool(eps, nil, PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })
	direct, err := ParseEndpoints(url)
	require.NoError(t, err)
	r := &rabbit{t: t, url: url, pool: NewPool(direct, nil, PoolSettings{})}
	t.Cleanup(func() { _ = r.pool.Close() })
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", "small")
	pub := r.channel()
	require.NoError(t, pub.PublishWithContext(context.Background(), "", "issues", false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: bytes.Repeat([]byte("x"), 64<<10)}))
	r.publish("issues", "last")
	return r, pool
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
	r.pool.settings.MaxBatchBytes = 200

	h := &recorder{}
	taken, err := drain(context.Background(), r.pool, 0, "issues", 10, 10, h)
	require.NoError(t, err)
	assert.Equal(t, 5, taken)
	assert.Equal(t, sent, h.bodies())
	assert.Equal(t, []int{2, 1, 1, 1}, h.batchSizes())
	assert.Equal(t, 0, r.count("issues"))
}

// A drain that starts as soon as a consumer has gone takes the queue whole and in order:
// a quorum queue still counts that consumer for a moment, and returns its unsettled
// messages with it, so the drain waits for the count rather than call the queue busy.
func TestDrainRightAfterTheConsumerLeaves(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(8)...)
	ch := r.channel()
	require.NoError(t, ch.Qos(3, 0, false))
	held, err := ch.Consume("issues", "other-window", false, false, false, false, nil)
	require.NoError(t, err)
	for range 3 {
		<-held
	}
	require.NoError(t, ch.Close())

	h := &recorder{}
	res, err := r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 100, Batch: 3}, h)
	require.NoError(t, err)
	assert.Equal(t, 8, res.Taken)
	assert.True(t, res.Empty)
	assert.Equal(t, numbered(8), h.bodies())
}

// The drain trusts a passive declare's count to be ready messages only, on both types:
// messages delivered and not settled are not counted.
func TestPassiveDeclareCountsReadyMessagesOnly(t *testing.T) {
	t.Parallel()
	for _, qt := range []QueueType{Classic, Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			r := newRabbit(t)
			r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: qt})
			r.publish("issues", numbered(5)...)
			ch := r.channel()
			require.NoError(t, ch.Qos(2, 0, false))
			held, err := ch.Consume("issues", "holder", false, false, false, false, nil)
			require.NoError(t, err)
			<-held
			<-held
			r.eventuallyCount("issues", 3)
			// Polled here, not in assert.Never: its condition runs on a goroutine that can
			// outlive the test, and a count in flight then meets the pool the cleanup closed.
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				require.Equal(t, 3, r.count("issues"), "messages delivered and not settled are not counted")
			}
		})
	}
}

// A drain keeps its consumer while it applies a batch: a second drain (a successor, while
// the first one's worker is paused mid-batch) finds the queue busy, where a ready count
// without the batch would have it read past it and apply the messages behind first.
func TestADrainMidBatchKeepsTheQueueBusy(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(6)...)
	inBatch, resume := make(chan struct{}), make(chan struct{})
	first := BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		close(inBatch)
		<-resume
		return make([]Verdict, len(ds)), nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 3, Batch: 3}, first)
		done <- err
	}()
	<-inBatch

	successor := &recorder{}
	res, err := r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 100, Batch: 3}, successor)
	close(resume)
	require.ErrorIs(t, err, ErrQueueBusy)
	assert.Zero(t, res.Taken)
	assert.Empty(t, successor.bodies())
	require.NoError(t, waitDone(t, done))

	res, err = r.pool.DrainWith(context.Background(), 0, "issues", DrainOptions{Max: 100, Batch: 3}, successor)
	require.NoError(t, err)
	assert.Equal(t, numbered(6)[3:], successor.bodies())
	assert.True(t, res.Empty)
}
