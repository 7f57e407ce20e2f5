//go:build integration

package broker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

func TestConsumeAcksInOrderAcrossBatches(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(50)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &recorder{}
	var settled settleCounter
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: 10, MaxBatch: 7, OnSettled: settled.add}, h)
	require.Eventually(t, func() bool { return settled.get(Ack) == 50 }, waitFor, 10*time.Millisecond)
	cancel()
	require.NoError(t, waitDone(t, done)) // a wrong ack tag would have closed the channel

	assert.Equal(t, numbered(50), h.bodies())
	sizes := h.batchSizes()
	t.Logf("batch sizes: %v", sizes)
	assert.LessOrEqual(t, slices.Max(sizes), 7)
	// Everything was acknowledged exactly once: nothing went back to the queue.
	assert.Equal(t, 0, r.count("issues"))
	assert.Equal(t, 50, settled.get(Ack))
}

func TestConsumeSettlesMixedVerdictsInOrder(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(6)...)

	verdicts := map[string]Verdict{"2": {Outcome: Retry, Reason: "db busy"}, "4": {Outcome: Reject, Reason: "bad payload", RetryCycles: 10}}
	h := &recorder{verdict: func(d amqp.Delivery) Verdict { return verdicts[string(d.Body)] }}
	var settled settleCounter
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch, OnSettled: settled.add}, h)
	require.Eventually(t, func() bool { return settled.get(Ack)+settled.get(Retry)+settled.get(Reject) == 6 },
		waitFor, 10*time.Millisecond)
	cancel()
	require.NoError(t, waitDone(t, done))

	assert.Equal(t, []int{4, 1, 1}, []int{settled.get(Ack), settled.get(Retry), settled.get(Reject)})
	assert.Equal(t, 0, r.count("issues"))
	// RabbitMQ dead-letters the nacked message into issues-retry on its own time.
	r.eventuallyCount("issues-retry", 1)
	assert.Equal(t, []string{"2"}, bodies(r.getAll("issues-retry")))

	rejected := r.getAll("issues-error")
	require.Len(t, rejected, 1)
	d := rejected[0]
	assert.Equal(t, "4", string(d.Body))
	assert.Equal(t, "bad payload", d.Headers[HeaderErrorReason])
	assert.Equal(t, "issues", d.Headers[HeaderErrorQueue])
	assert.EqualValues(t, 10, d.Headers[HeaderRetryCycles], "the count survives a broker that ignores a client's x-death")
	at, err := time.Parse(time.RFC3339, d.Headers[HeaderErrorAt].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), at, time.Minute)
	assert.Equal(t, "issues", d.Headers["x-github-event"])
	assert.Equal(t, "d-4", d.Headers["x-github-delivery"])
	assert.Equal(t, "d-4", d.MessageId)
	assert.Equal(t, "application/json", d.ContentType)
	assert.Equal(t, amqp.Persistent, d.DeliveryMode)
}

func TestConsumeRetryComesBackAfterTheTTL(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Second})
	r.publish("issues", "once-more")

	h := &recorder{verdict: func(d amqp.Delivery) Verdict {
		if d.Headers["x-death"] == nil {
			return Verdict{Outcome: Retry, Reason: "try later"}
		}
		return Verdict{Outcome: Ack}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, h)
	require.Eventually(t, func() bool { return h.count() == 2 }, waitFor, 20*time.Millisecond)
	cancel()
	require.NoError(t, waitDone(t, done))

	h.mu.Lock()
	second := h.seen[1]
	h.mu.Unlock()
	assert.Equal(t, "once-more", string(second.Body))
	deaths, ok := second.Headers["x-death"].([]any)
	require.True(t, ok, "x-death header: %#v", second.Headers["x-death"])
	var reasons []string
	for _, x := range deaths {
		death := x.(amqp.Table)
		reasons = append(reasons, death["queue"].(string)+":"+death["reason"].(string))
	}
	assert.ElementsMatch(t, []string{"issues:rejected", "issues-retry:expired"}, reasons)
	assert.Equal(t, 0, r.count("issues")+r.count("issues-retry"))
}

func TestConsumeHandlerErrorLeavesMessagesInOrder(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(10)...)

	errDB := errors.New("database unreachable")
	var mu sync.Mutex
	calls, acked := 0, 0
	h := BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls > 1 {
			return nil, errDB
		}
		acked = len(ds)
		return make([]Verdict, len(ds)), nil
	})
	err := waitDone(t, r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: 3}, h))
	require.ErrorIs(t, err, errDB)
	assert.Contains(t, err.Error(), "consume issues on #0 ")

	r.eventuallyCount("issues", 10-acked)
	assert.Equal(t, numbered(10)[acked:], bodies(r.getAll("issues")))
}

func TestConsumeBadVerdictsSettleNothing(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", "a")
	h := BatchHandlerFunc(func(context.Context, string, []amqp.Delivery) ([]Verdict, error) {
		return []Verdict{{Outcome: Ack}, {Outcome: Ack}}, nil
	})
	err := waitDone(t, r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: testPrefetch}, h))
	assert.ErrorContains(t, err, "handler returned 2 verdicts for 1 deliveries")
	r.eventuallyCount("issues", 1)
}

func TestConsumeRejectWithoutErrorQueueKeepsTheMessage(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	_, err := r.channel().QueueDeclare("solo", true, false, false, false, nil)
	require.NoError(t, err)
	r.publish("solo", "a")

	h := &recorder{verdict: func(amqp.Delivery) Verdict { return Verdict{Outcome: Reject, Reason: "bad"} }}
	err = waitDone(t, r.consume(context.Background(), "solo", ConsumeOptions{Prefetch: testPrefetch}, h))
	require.ErrorContains(t, err, "solo-error")
	require.ErrorContains(t, err, "NOT_FOUND")
	r.eventuallyCount("solo", 1)
}

func TestConsumeIsExclusive(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, &recorder{})
	require.Eventually(t, func() bool { return consumers(r, "issues") == 1 }, waitFor, 20*time.Millisecond)
	if testenv.QueueType() == string(Quorum) {
		t.Skip("quorum queues ignore exclusive: TestASecondConsumerOfAQuorumQueueWaits")
	}

	err := waitDone(t, r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: testPrefetch}, &recorder{}))
	require.ErrorIs(t, err, ErrExclusiveConsumer)
	t.Log(err)
	assert.Contains(t, err.Error(), "consume issues on #0 ")

	cancel()
	require.NoError(t, waitDone(t, first))
}

func TestConsumeStopsPromptlyWhenIdle(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, &recorder{})
	require.Eventually(t, func() bool { return consumers(r, "issues") == 1 }, waitFor, 20*time.Millisecond)

	cancel()
	start := time.Now()
	require.NoError(t, waitDone(t, done))
	// A consumer that never saw the cancel hangs until waitDone gives up; this bound
	// catches a slow poll, with room for two RPCs to a broker on a loaded machine.
	assert.Less(t, time.Since(start), 3*time.Second)
	// A quorum queue forgets the consumer a moment after the channel closed.
	require.Eventually(t, func() bool { return consumers(r, "issues") == 0 }, waitFor, 20*time.Millisecond)
}

func TestConsumeCancelReturnsUnhandledMessages(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(20)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var handled []string
	h := BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, bodies(ds)...)
		cancel() // the consumer must still settle this batch
		return make([]Verdict, len(ds)), nil
	})
	require.NoError(t, waitDone(t, r.consume(ctx, "issues", ConsumeOptions{Prefetch: 5, MaxBatch: 2}, h)))

	mu.Lock()
	n := len(handled)
	mu.Unlock()
	require.Equal(t, numbered(20)[:n], handled)
	r.eventuallyCount("issues", 20-n)
	assert.Equal(t, numbered(20)[n:], bodies(r.getAll("issues")))
}

func TestConsumeOptionsValidation(t *testing.T) {
	_, err := ConsumeOptions{Prefetch: 1000}.withDefaults()
	assert.Error(t, err)
	_, err = ConsumeOptions{}.withDefaults()
	assert.ErrorContains(t, err, "prefetch 0: must be between 1 and 500", "a prefetch is required")
	o, err := ConsumeOptions{Prefetch: testPrefetch}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, testPrefetch, o.Prefetch)
	assert.Equal(t, testPrefetch, o.MaxBatch)
	assert.Contains(t, o.ConsumerTag, "brokerswitch-")
	o, err = ConsumeOptions{Prefetch: 10, MaxBatch: 50}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 10, o.MaxBatch)
}

// A batch has no deadline while its consumer runs: isolating a costly message can take
// several statement timeouts, and a deadline would fail that batch at every attempt and
// hold the queue. (Once the consumer is told to stop, handleTimeout bounds it.)
func TestConsumeSetsNoDeadlineOnABatchWhileRunning(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(1)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadlines := make(chan bool, 1)
	h := BatchHandlerFunc(func(hctx context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		_, has := hctx.Deadline()
		deadlines <- has
		cancel()
		return make([]Verdict, len(ds)), nil
	})
	require.NoError(t, waitDone(t, r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, h)))
	assert.False(t, <-deadlines, "the batch had a deadline while its consumer ran")
}

// A fence stops Consume at once, the handler's context cancelled and nothing of the
// batch in hand settled: it goes back to the head of the queue, in order.
func TestAFenceGivesTheBatchInHandBack(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(5)...)
	inHand := make(chan struct{})
	h := BatchHandlerFunc(func(ctx context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		close(inHand)
		<-ctx.Done() // a database that does not answer
		return nil, ctx.Err()
	})
	fence := make(chan struct{})
	done := r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: 10, Fence: fence}, h)
	<-inHand
	close(fence)
	require.ErrorIs(t, waitDone(t, done), ErrFenced)
	r.eventuallyCount("issues", 5)
	assert.Equal(t, numbered(5), bodies(r.getAll("issues")))
}

// On the quorum queues brokerswitch declares, single active consumer keeps one reader: a
// second consumer is accepted but waits, and reads only once the first has gone, from
// the head of the queue, with the first's unsettled messages back in place.
func TestASecondConsumerOfAQuorumQueueWaits(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: Quorum})
	r.publish("issues", numbered(6)...)

	holding, fence := make(chan struct{}), make(chan struct{})
	first := r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: 3, Fence: fence}, BatchHandlerFunc(func(ctx context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		close(holding)
		<-ctx.Done() // holds its batch until fenced
		return nil, ctx.Err()
	}))
	<-holding
	second := &recorder{}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	done2 := r.consume(ctx2, "issues", ConsumeOptions{Prefetch: testPrefetch}, second)
	// declare-ok counts the active consumer only; the broker's listing shows both.
	vhost := r.url[strings.LastIndex(r.url, "/")+1:]
	require.Eventually(t, func() bool { return len(testenv.Consumers(t, vhost)["issues"]) == 2 }, waitFor, 100*time.Millisecond)
	assert.Equal(t, 1, consumers(r, "issues"))
	r.publish("issues", "6")
	assert.Never(t, func() bool { return second.count() > 0 }, time.Second, 20*time.Millisecond, "the waiting consumer read beside the active one")

	close(fence)
	require.ErrorIs(t, waitDone(t, first), ErrFenced)
	require.Eventually(t, func() bool { return second.count() == 7 }, waitFor, 20*time.Millisecond)
	assert.Equal(t, numbered(7), second.bodies())
	cancel2()
	require.NoError(t, waitDone(t, done2))
}
