//go:build integration

package broker

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

var testQueues = []string{"issues", "pull_request", "push", "release"}

func TestDeclareTopologyIsIdempotent(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	topo := Topology{Queues: testQueues, RetryTTL: 30 * time.Second}
	r.declare(topo)
	r.declare(topo)

	var all []string
	for _, q := range testQueues {
		all = append(all, q, RetryQueue(q), ErrorQueue(q))
	}
	require.Len(t, all, 12)
	ch := r.channel()
	for _, q := range all {
		_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		require.NoError(t, err, q)
	}

	// The producer's own declaration, with an int32 TTL, is equivalent.
	args := declsOf("push", QueueType(testenv.QueueType()), 30000)[1].args
	args["x-message-ttl"] = int32(30000)
	_, err := ch.QueueDeclare("push-retry", true, false, false, false, args)
	require.NoError(t, err)
}

func TestDeclareTopologyMismatchNamesQueueAndArgument(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	_, err := r.channel().QueueDeclare("issues-retry", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "issues",
		"x-message-ttl":             int64(5000),
	})
	require.NoError(t, err)

	err = r.pool.DeclareTopology(context.Background(), 0, Topology{Queues: testQueues, RetryTTL: time.Second})
	require.ErrorIs(t, err, ErrTopologyMismatch)
	assert.Contains(t, err.Error(), "declare queue issues-retry on #0 "+testenv.RabbitAddr()+"/bs-test-")
	assert.Contains(t, err.Error(), "inequivalent arg 'x-message-ttl'")
	assert.NotContains(t, err.Error(), "guest:guest")
	var ae *amqp.Error
	require.ErrorAs(t, err, &ae)
	t.Log(err)
	assert.Equal(t, amqp.PreconditionFailed, ae.Code)

	// The pool survives the refused declaration.
	require.NoError(t, r.pool.DeclareTopology(context.Background(), 0, Topology{Queues: []string{"push"}, RetryTTL: time.Second}))
}

func TestDeclareTopologyValidates(t *testing.T) {
	t.Parallel()
	eps, err := ParseEndpoints("amqp://u:p@127.0.0.1:1/")
	require.NoError(t, err)
	pool := NewPool(eps, nil, PoolSettings{})
	assert.ErrorContains(t, pool.DeclareTopology(context.Background(), 0, Topology{Queues: []string{"q"}}), "retry TTL")
	assert.ErrorContains(t, pool.DeclareTopology(context.Background(), 0, Topology{Queues: []string{""}, RetryTTL: time.Second}), "empty queue name")
}

func TestReadyCounts(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", "a", "b", "c")
	r.publish("issues-retry", "d", "e")

	counts, err := r.pool.ReadyCounts(context.Background(), 0, []string{"issues", "missing", "issues-retry", "issues-error"})
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"issues": 3, "missing": 0, "issues-retry": 2, "issues-error": 0}, counts)
}

// A delivery a consumer holds unsettled is not ready, and RabbitMQ does not count it in a
// passive declare: its consumer is what says the queue may not be empty. It comes back
// when the consumer's connection goes.
func TestQueueCountsSeeTheConsumerThatHoldsADelivery(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", "a")
	conn, err := amqp.Dial(r.url)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Qos(1, 0, false))
	ds, err := ch.Consume("issues", "holder", false, false, false, false, nil)
	require.NoError(t, err)
	<-ds

	counts, err := r.pool.QueueCounts(context.Background(), 0, []string{"issues", "missing"})
	require.NoError(t, err)
	assert.Equal(t, map[string]QueueCount{"issues": {Ready: 0, Consumers: 1}, "missing": {}}, counts)
	assert.False(t, counts["issues"].Idle())
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool {
		counts, err := r.pool.QueueCounts(context.Background(), 0, []string{"issues"})
		return err == nil && counts["issues"] == QueueCount{Ready: 1}
	}, 10*time.Second, 50*time.Millisecond)
}

func TestReadyCountsFailsWithoutBroker(t *testing.T) {
	t.Parallel()
	eps, err := ParseEndpoints("amqp://u:p@127.0.0.1:1/")
	require.NoError(t, err)
	pool := NewPool(eps, nil, PoolSettings{})
	_, err = pool.ReadyCounts(context.Background(), 0, []string{"issues"})
	assert.ErrorContains(t, err, "connect to #0 127.0.0.1:1/")
}

// TestDeclareTopologyOncePerConnection deletes a declared queue behind the pool's back:
// a second declaration on the same connection does not notice (it sends nothing), a
// consume that finds the queue missing makes the next one declare again, and so does a
// new connection.
func TestDeclareTopologyOncePerConnection(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	topo := Topology{Queues: []string{"issues"}, RetryTTL: time.Minute}
	exists := func(q string) bool {
		_, err := r.channel().QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	}
	deleteQueue := func(q string) {
		_, err := r.channel().QueueDelete(q, false, false, false)
		require.NoError(t, err)
	}
	r.declare(topo)
	deleteQueue("issues-error")
	r.declare(topo)
	assert.False(t, exists("issues-error"), "declared again on the same connection")

	deleteQueue("issues")
	err := r.pool.Consume(context.Background(), 0, "issues", ConsumeOptions{Prefetch: testPrefetch}, &recorder{})
	require.Error(t, err)
	r.declare(topo)
	assert.True(t, exists("issues"), "a consume that found the queue missing did not make the pool declare again")
	assert.True(t, exists("issues-error"))

	deleteQueue("issues-error")
	b, err := r.pool.broker(0)
	require.NoError(t, err)
	require.NoError(t, b.conn.Close())
	r.declare(topo)
	assert.True(t, exists("issues-error"), "a new connection did not declare again")
	assert.Equal(t, 2, r.connections())
}

func TestDeclareTopologyOfTheOtherTypeNamesQueueTypeAndSetting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ found, want QueueType }{{Quorum, Classic}, {Classic, Quorum}} {
		t.Run(string(c.want), func(t *testing.T) {
			t.Parallel()
			r := newRabbit(t)
			// The producer's queues, of the other type.
			r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: c.found})

			err := r.pool.DeclareTopology(context.Background(), 0, Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: c.want})
			require.ErrorIs(t, err, ErrQueueType)
			require.ErrorIs(t, err, ErrTopologyMismatch)
			t.Log(err)
			assert.Contains(t, err.Error(), "queue issues is a "+string(c.found)+" queue, but QUEUE_TYPE is "+string(c.want))
		})
	}
}

func TestDeclareTopologyFindsTheTypeBehindAProducersOwnQuorumArguments(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	ch := r.channel()
	// Declared by a producer with the least docs/design.md asks ("The topology, for producers"): no single active consumer.
	_, err := ch.QueueDeclare("issues", true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "issues-retry",
	})
	require.NoError(t, err)
	require.NoError(t, r.pool.DeclareTopology(context.Background(), 0, Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: Quorum}))

	// As classic queues, the same arguments are the other type, found at the second try.
	r2 := newRabbit(t)
	_, err = r2.channel().QueueDeclare("issues", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "issues-retry",
	})
	require.NoError(t, err)
	err = r2.pool.DeclareTopology(context.Background(), 0, Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: Quorum})
	require.ErrorIs(t, err, ErrQueueType)
	assert.Contains(t, err.Error(), "queue issues is a classic queue, but QUEUE_TYPE is quorum")

	// Other arguments than the producer's minimum are a mismatch, not a type.
	r3 := newRabbit(t)
	_, err = r3.channel().QueueDeclare("issues", true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "elsewhere",
	})
	require.NoError(t, err)
	err = r3.pool.DeclareTopology(context.Background(), 0, Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: Quorum})
	require.ErrorIs(t, err, ErrTopologyMismatch)
	assert.NotErrorIs(t, err, ErrQueueType)
}

func TestParseQueueType(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"classic", "quorum"} {
		got, err := ParseQueueType(s)
		require.NoError(t, err)
		assert.Equal(t, QueueType(s), got)
	}
	_, err := ParseQueueType("stream")
	assert.ErrorContains(t, err, `"stream": must be "classic" or "quorum"`)
}
