//go:build integration

package quarantine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
)

// vhost is a test's own vhost on the tests' RabbitMQ, with a connection to publish and
// inspect.
type vhost struct {
	t   *testing.T
	url string
	ch  *amqp.Channel
}

// newVhost declares queues, of the tests' queue type, on a vhost of the test's own.
func newVhost(t *testing.T, queues ...string) *vhost {
	url := testenv.NewVhost(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	for _, q := range queues {
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": testenv.QueueType()})
		require.NoError(t, err)
	}
	return &vhost{t: t, url: url, ch: ch}
}

func (v *vhost) publish(queue string, msgs ...amqp.Publishing) {
	for _, m := range msgs {
		require.NoError(v.t, v.ch.PublishWithContext(v.t.Context(), "", queue, false, false, m))
	}
}

// getAll takes the n messages of queue, in order, once the queue has no consumer and holds
// them all. A move's connection is closed when it returns, but a quorum queue hands the
// deliveries it held back in its own time: a get before that reads the rest first.
func (v *vhost) getAll(queue string, n int) []amqp.Delivery {
	require.NoError(v.t, testenv.WaitUntil(v.t.Context(), 30*time.Second, fmt.Sprintf("%s to hold %d messages and no consumer", queue, n),
		func() (bool, error) {
			q, err := v.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			if err != nil {
				return false, err
			}
			return q.Consumers == 0 && q.Messages == n, fmt.Errorf("%d messages, %d consumers", q.Messages, q.Consumers)
		}))
	var out []amqp.Delivery
	for range n {
		d, ok, err := v.ch.Get(queue, true)
		require.NoError(v.t, err)
		require.True(v.t, ok, "%s emptied under the test", queue)
		out = append(out, d)
	}
	return out
}

// target is queue's Target, its consumer's prefetch prefetch.
func (v *vhost) target(queue string, prefetch int) Target {
	uri, err := amqp.ParseURI(v.url)
	require.NoError(v.t, err)
	return Target{
		Queue: queue, ErrorQueue: queue + "-error", Broker: testBroker(uri.Host), Prefetch: prefetch,
		Dial: func(ctx context.Context) (*rawamqp.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return rawamqp.Dial(ctx, uri, func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
			})
		},
	}
}

type testBroker string

func (b testBroker) String() string { return string(b) }

// The header check follows amqp091-go's own limits: what it reads passes, what it refuses
// does not. The headers are written by the library and read back by the raw client.
func TestCheckContentHeaderFollowsTheClientsLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		headers  amqp.Table
		frameMax int
		want     string
	}{
		{amqp.Table{"a": make([]any, 8192), "t": testenv.NestedTable(31), "x": []byte("b"), "d": amqp.Decimal{Scale: 1, Value: 2},
			"f": 1.5, "n": nil, "ts": time.Unix(1, 0), "i": int32(1), "l": int64(2), "b": true, "at": []any{amqp.Table{"k": "v"}}}, 0, ""},
		{amqp.Table{"a": make([]any, 8193)}, 0, "an array of more than 8192 entries"},
		{amqp.Table{"t": testenv.NestedTable(33)}, 0, "nested more than 32 deep"},
		{amqp.Table{"a": []any{[]any{testenv.NestedTable(31)}}}, 0, "nested more than 32 deep"},
		{amqp.Table{"s": strings.Repeat("s", 5000)}, 4096, "over the frame_max of 4096"},
	}
	many := amqp.Table{}
	for i := range 8193 {
		many[strconv.Itoa(i)] = int32(i)
	}
	cases = append(cases, struct {
		headers  amqp.Table
		frameMax int
		want     string
	}{many, 0, "a table of more than 8192 entries"})
	v := newVhost(t, "issues")
	for _, c := range cases {
		v.publish("issues", amqp.Publishing{Headers: c.headers, MessageId: "m", Body: []byte("b")})
	}
	for i, d := range testenv.ReadRaw(t, v.url, "issues", len(cases)) {
		got := checkContentHeader(d.Header, cases[i].frameMax)
		if cases[i].want == "" {
			assert.Empty(t, got, "case %d", i)
		} else {
			assert.Contains(t, got, cases[i].want, "case %d", i)
		}
	}
}

// The move reads past the bodies of the deliveries it scans and passes the moved one's
// on frame by frame: it holds no body, whatever the sizes queued ahead of and behind the
// unreadable message. It read each delivery whole (bodies over MAX_MESSAGE_BYTES
// included) and kept whole every delivery that came while it waited for the broker's
// answer to its basic.cancel.
func TestMovingAnUnreadableMessageHoldsNoBody(t *testing.T) {
	const limit, large = 1 << 20, 8 << 20
	v := newVhost(t, "issues", "issues-error")
	bigs := func(from int) {
		for i := from; i < from+3; i++ {
			v.publish("issues", amqp.Publishing{MessageId: fmt.Sprintf("large-%d", i), Body: bytes.Repeat([]byte{byte('a' + i)}, large)})
		}
	}
	bigs(0)
	v.publish("issues", amqp.Publishing{Headers: amqp.Table{"x-deep": testenv.NestedTable(33)}, MessageId: "d-poison", Body: []byte("poison")})
	bigs(3)

	q, tgt := Quarantine{Limit: limit}, v.target("issues", 10)
	var m moved
	var err error
	held := testenv.PeakHeap(func() {
		m, err = q.move(context.Background(), tgt, 11, q.unreadable(tgt).poison)
	})
	require.NoError(t, err)
	t.Logf("the move held at most %d bytes", held)
	assert.Equal(t, "d-poison", m.id)
	assert.Contains(t, m.reason, "nested more than 32 deep")
	assert.Less(t, held, uint64(limit), "the move held %d bytes: a body, or more", held)

	copies := testenv.ReadRaw(t, v.url, "issues-error", 1)
	assert.Equal(t, "poison", string(copies[0].Body))
	left := v.getAll("issues", 6)
	for i, d := range left {
		assert.Equal(t, fmt.Sprintf("large-%d", i), d.MessageId, "the others go back in order")
		assert.Len(t, d.Body, large)
	}
}

// A move checks that {q}-error exists before it consumes: a move that cannot be made
// takes no delivery, so none comes back marked redelivered or behind a consumer's prefetch.
func TestAMoveWithoutItsErrorQueueTakesNoDelivery(t *testing.T) {
	v := newVhost(t, "issues")
	v.publish("issues", amqp.Publishing{Body: []byte("one")}, amqp.Publishing{Body: []byte("two")})
	q, tgt := Quarantine{}, v.target("issues", 10)
	_, err := q.move(context.Background(), tgt, 11, q.unreadable(tgt).poison)
	require.ErrorContains(t, err, "issues-error")
	for _, d := range v.getAll("issues", 2) {
		assert.False(t, d.Redelivered, "%s was delivered to the move", d.Body)
	}
}

// Move moves the poison a consumer stopped at, as the consumer's error says: a body over
// the limit at the head, or a message behind the head whose headers cut the consumer's
// connection; it says so in the error it returns, logs and counts it. One that is no longer
// at the head stays where it is, counted as not moved.
func TestMoveMovesWhatStoppedTheConsumer(t *testing.T) {
	v := newVhost(t, "issues", "issues-error")
	m, reg := metricstest.New()
	logs := &testenv.Buffer{}
	q := Quarantine{Limit: 1 << 10, Metrics: m, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	body := bytes.Repeat([]byte{'x'}, 5000)
	v.publish("issues", amqp.Publishing{MessageId: "big", Headers: amqp.Table{"x-github-event": "push"}, Body: body})

	err := q.Move(t.Context(), v.target("issues", 10), fmt.Errorf("message big: %w", ErrOversize))
	require.ErrorIs(t, err, ErrOversize)
	require.ErrorIs(t, err, ErrMoved)
	copies := v.getAll("issues-error", 1)
	assert.Equal(t, body, copies[0].Body, "the body whole")
	assert.Equal(t, "push", copies[0].Headers["x-github-event"], "the producer's headers kept")
	assert.Equal(t, "a body of 5000 bytes, over MAX_MESSAGE_BYTES (1024): moved unread", copies[0].Headers[HeaderReason])
	assert.Equal(t, "issues", copies[0].Headers[HeaderQueue])
	assert.Contains(t, logs.String(), "message over MAX_MESSAGE_BYTES moved to -error unread")
	assert.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_oversize_messages_total", "queue", "issues", "outcome", metrics.OversizeMoved), 0)
	assert.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_routed_messages_total", "queue", "issues", "route", metrics.RouteError), 0)

	v.publish("issues", amqp.Publishing{Body: []byte("small")})
	err = q.Move(t.Context(), v.target("issues", 10), fmt.Errorf("message big: %w", ErrOversize))
	require.ErrorIs(t, err, ErrOversize)
	require.NotErrorIs(t, err, ErrMoved)
	assert.Contains(t, logs.String(), "was not at the head of its queue any more")
	assert.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_oversize_messages_total", "queue", "issues", "outcome", metrics.OversizeNotMoved), 0)

	v.publish("issues", amqp.Publishing{MessageId: "d-poison", Headers: amqp.Table{"x-deep": testenv.NestedTable(33)}, Body: []byte("poison")})
	closed := make(chan *amqp.Error, 1)
	closed <- &amqp.Error{Code: amqp.SyntaxError, Reason: amqp.ErrSyntax.Reason}
	tgt := v.target("issues", 1)
	tgt.Closed = closed
	err = q.Move(t.Context(), tgt, fmt.Errorf("ack: %w", amqp.ErrClosed))
	require.ErrorIs(t, err, ErrUnreadable)
	require.ErrorIs(t, err, ErrMoved)
	assert.Contains(t, err.Error(), "channel closed: Exception (502)")
	assert.Contains(t, logs.String(), "unreadable message moved to -error")
	assert.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_unreadable_messages_total", "queue", "issues", "outcome", metrics.UnreadableMoved), 0)
	assert.Equal(t, "poison", string(testenv.ReadRaw(t, v.url, "issues-error", 1)[0].Body))
	left := v.getAll("issues", 1)
	assert.Equal(t, "small", string(left[0].Body), "what the move scanned goes back")
}
