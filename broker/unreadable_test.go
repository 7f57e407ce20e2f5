//go:build integration

package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// consumeLoop runs Consume on queue again each time it ends, as a window does, until ctx
// ends, and records the errors it ended with.
type consumeLoop struct {
	mu   sync.Mutex
	errs []error
	done chan struct{}
}

func startLoop(ctx context.Context, r *rabbit, queue string, h BatchHandler) *consumeLoop {
	l := &consumeLoop{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			if err := r.pool.Consume(ctx, 0, queue, ConsumeOptions{Prefetch: 10}, h); err != nil {
				l.mu.Lock()
				l.errs = append(l.errs, err)
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *consumeLoop) errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// rawMessage is a message as readRaw read it.
type rawMessage struct{ header, body []byte }

// readRaw takes every message of queue with the raw client, which reads what amqp091-go
// refuses.
func readRaw(t *testing.T, r *rabbit, queue string, n int) []rawMessage {
	t.Helper()
	ep := r.pool.Endpoints()[0]
	c, err := consumeRaw(context.Background(), ep, queue, n, rawMaxFrame)
	require.NoError(t, err)
	defer c.Close()
	var out []rawMessage
	for len(out) < n {
		require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(waitFor)))
		_, header, err := c.nextHeader()
		require.NoError(t, err)
		m := rawMessage{header: header}
		for size := binary.BigEndian.Uint64(header[4:]); uint64(len(m.body)) < size; {
			typ, b, err := c.readFrame()
			require.NoError(t, err)
			require.Equal(t, byte(rawFrameBody), typ)
			m.body = append(m.body, b...)
		}
		out = append(out, m)
	}
	return out
}

// nested is a table nested depth deep.
func nested(depth int) amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for range depth {
		t = amqp.Table{"in": t}
	}
	return t
}

// A message whose headers amqp091-go refuses (an array of 8,193 empty values, tables
// nested more than 32 deep, a header frame over the consumer's frame_max) made the library
// close the pool's one connection to the broker: every queue's consumer lost its channel,
// the message went back to the head unread, and the same happened at every restart, for
// good. Each queue's consumers now have a connection of their own, and the message is
// moved to {q}-error by a client that never decodes its headers: the good messages behind
// it, on its queue and on the other, are consumed, and the other queue's consumer is never
// cut.
func TestAnUnreadableMessageIsMovedToErrorAndCutsNoOtherQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		headers   amqp.Table
		frameSize int
		reason    string
	}{
		{"array of 8193 entries", amqp.Table{"x-list": make([]any, 8193)}, 0, "an array of more than 8192 entries"},
		{"nested 33 deep", amqp.Table{"x-deep": nested(33)}, 0, "nested more than 32 deep"},
		{"header frame over frame_max", amqp.Table{"x-big": strings.Repeat("b", 6000)}, 4096, "over the frame_max of 4096"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRabbit(t)
			r.pool.FrameSize = c.frameSize
			r.declare(Topology{Queues: []string{"issues", "pushes"}, RetryTTL: time.Minute})
			r.publish("issues", "good-1", "good-2")
			headers := amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-poison"}
			for k, v := range c.headers {
				headers[k] = v
			}
			r.publishMessages("issues", amqp.Publishing{
				Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "d-poison", Body: []byte("poison"),
			})
			r.publish("issues", "good-3", "good-4")
			r.publish("pushes", "push-1", "push-2")

			issues, pushes := &recorder{}, &recorder{}
			ctx, cancel := context.WithCancel(context.Background())
			// The other queue's consumer runs before the poison arrives.
			pushLoop := startLoop(ctx, r, "pushes", pushes)
			require.Eventually(t, func() bool { return pushes.count() == 2 }, waitFor, 20*time.Millisecond)
			issueLoop := startLoop(ctx, r, "issues", issues)
			require.Eventually(t, func() bool { return slices.Contains(issues.bodies(), "good-4") }, waitFor, 20*time.Millisecond,
				"the good messages behind the poison were never consumed: %v", issues.bodies())
			r.eventuallyCount("issues-error", 1)
			r.publish("pushes", "push-3")
			require.Eventually(t, func() bool { return pushes.count() == 3 }, waitFor, 20*time.Millisecond)
			cancel()
			<-pushLoop.done
			<-issueLoop.done

			assert.Empty(t, pushLoop.errors(), "the other queue's consumer was cut")
			errs := issueLoop.errors()
			require.Len(t, errs, 1, "the poison cut its queue's consumer once")
			assert.ErrorIs(t, errs[0], ErrUnreadable)
			assert.NotContains(t, issues.bodies(), "poison", "the poison never reached the handler")
			var firsts []string
			for _, b := range issues.bodies() {
				if !slices.Contains(firsts, b) {
					firsts = append(firsts, b)
				}
			}
			assert.Equal(t, []string{"good-1", "good-2", "good-3", "good-4"}, firsts, "in queue order")
			assert.Equal(t, 0, r.count("issues"))

			copies := readRaw(t, r, "issues-error", 1)
			assert.Equal(t, "poison", string(copies[0].body))
			assert.True(t, bytes.Contains(copies[0].header, []byte(c.reason)), "the reason is in a header")
			assert.True(t, bytes.Contains(copies[0].header, []byte("d-poison")), "the message id is kept")
			assert.Contains(t, r.logs.String(), "unreadable message moved to -error")
		})
	}
}

// The header check follows amqp091-go's own limits: what it reads passes, what it refuses
// does not. The headers are written by the library and read back by the raw client.
func TestCheckContentHeaderFollowsTheClientsLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		headers  amqp.Table
		frameMax int
		want     string
	}{
		{amqp.Table{"a": make([]any, 8192), "t": nested(31), "x": []byte("b"), "d": amqp.Decimal{Scale: 1, Value: 2},
			"f": 1.5, "n": nil, "ts": time.Unix(1, 0), "i": int32(1), "l": int64(2), "b": true, "at": []any{amqp.Table{"k": "v"}}}, 0, ""},
		{amqp.Table{"a": make([]any, 8193)}, 0, "an array of more than 8192 entries"},
		{amqp.Table{"t": nested(33)}, 0, "nested more than 32 deep"},
		{amqp.Table{"a": []any{[]any{nested(31)}}}, 0, "nested more than 32 deep"},
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
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	for _, c := range cases {
		r.publishMessages("issues", amqp.Publishing{Headers: c.headers, MessageId: "m", Body: []byte("b")})
	}
	for i, d := range readRaw(t, r, "issues", len(cases)) {
		got := checkContentHeader(d.header, cases[i].frameMax)
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
	r := newRabbit(t)
	r.pool.MaxMessageBytes = limit
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	bigs := func(from int) {
		for i := from; i < from+3; i++ {
			id := fmt.Sprintf("large-%d", i)
			r.publishMessages("issues", amqp.Publishing{MessageId: id, Body: bytes.Repeat([]byte{byte('a' + i)}, large)})
		}
	}
	bigs(0)
	r.publishMessages("issues", amqp.Publishing{Headers: amqp.Table{"x-deep": nested(33)}, MessageId: "d-poison", Body: []byte("poison")})
	bigs(3)

	var id, reason string
	var err error
	held := testenv.PeakHeap(func() {
		id, reason, err = r.pool.moveUnreadable(context.Background(), r.pool.Endpoints()[0], "issues", 0, 10)
	})
	require.NoError(t, err)
	t.Logf("the move held at most %d bytes", held)
	assert.Equal(t, "d-poison", id)
	assert.Contains(t, reason, "nested more than 32 deep")
	assert.Less(t, held, uint64(limit), "the move held %d bytes: a body, or more", held)

	copies := readRaw(t, r, "issues-error", 1)
	assert.Equal(t, "poison", string(copies[0].body))
	left := r.getAll("issues")
	require.Len(t, left, 6)
	for i, d := range left {
		assert.Equal(t, fmt.Sprintf("large-%d", i), d.MessageId, "the others go back in order")
		assert.Len(t, d.Body, large)
	}
}

// A move checks that {q}-error exists before it consumes: a move that cannot be made
// takes no delivery, so none comes back marked redelivered or behind a consumer's prefetch.
func TestAMoveWithoutItsErrorQueueTakesNoDelivery(t *testing.T) {
	r := newRabbit(t)
	_, err := r.channel().QueueDeclare("issues", true, false, false, false, nil)
	require.NoError(t, err)
	r.publish("issues", "one", "two")
	_, _, err = r.pool.moveUnreadable(context.Background(), r.pool.Endpoints()[0], "issues", 0, 10)
	require.ErrorContains(t, err, "issues-error")
	for _, d := range r.getAll("issues") {
		assert.False(t, d.Redelivered, "%s was delivered to the move", d.Body)
	}
}
