//go:build integration

package broker

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// AMQP 0-9-1 method ids the frame filter looks for.
const (
	classBasic    = 60
	methodPublish = 40
	methodAck     = 80
	frameMethod   = rawamqp.FrameMethod
	frameHeader   = rawamqp.FrameHeader
)

// clientFrames is a proxy's Copy that hands keep every AMQP frame the client sends, its
// type and payload, and forwards the frame if keep says so; otherwise it closes the
// connection, both ways.
func clientFrames(keep func(frameType byte, payload []byte) bool) testenv.Copy {
	return func(dst, src net.Conn, toServer bool) {
		if !toServer {
			_, _ = io.Copy(dst, src)
			return
		}
		frames := rawamqp.NewReader(src, 64<<10)
		protocol := make([]byte, 8)
		if _, err := io.ReadFull(frames, protocol); err != nil {
			return
		}
		if _, err := dst.Write(protocol); err != nil {
			return
		}
		for {
			f, err := frames.Next()
			if err != nil {
				return
			}
			payload, err := frames.Payload(f)
			if err != nil || !keep(f.Type, payload) {
				return // the proxy closes both sides
			}
			if _, err := dst.Write(append(append(f.Append(nil), payload...), rawamqp.FrameEnd)); err != nil {
				return
			}
		}
	}
}

// dropAckAfterPublish closes the connection instead of forwarding the first basic.ack
// sent after a basic.publish: the broker has the copy to -error but not the ack of its
// original, as after a broker cut at the worst moment.
func dropAckAfterPublish(dropped *atomic.Bool) testenv.Copy {
	var published atomic.Bool
	return clientFrames(func(frameType byte, payload []byte) bool {
		if frameType != frameMethod || len(payload) < 4 || binary.BigEndian.Uint16(payload) != classBasic {
			return true
		}
		switch binary.BigEndian.Uint16(payload[2:]) {
		case methodPublish:
			published.Store(true)
		case methodAck:
			return !published.Load() || !dropped.CompareAndSwap(false, true)
		}
		return true
	})
}

// newProxiedRabbit is newRabbit with the pool under test behind a proxy that moves its
// frames with copy, offering frame_max frameSize (0: the default).
func newProxiedRabbit(t *testing.T, copy testenv.Copy, frameSize int) *rabbit {
	t.Helper()
	url := testenv.NewVhost(t)
	proxy, err := testenv.ListenProxy(testenv.RabbitAddr(), copy)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	eps, err := ParseEndpoints(strings.Replace(url, testenv.RabbitAddr(), proxy.Addr(), 1))
	require.NoError(t, err)
	logs := &testenv.Buffer{}
	pool := NewPool(eps, slog.New(slog.NewTextHandler(logs, nil)), PoolSettings{frameSize: frameSize})
	t.Cleanup(func() { _ = pool.Close() })
	return &rabbit{t: t, url: url, pool: pool, logs: logs}
}

// A connection lost after the copy of a rejected message reached -error but before the
// original's ack did left the original in its queue, to be copied again once redelivered:
// -error held the message twice. The copy and the ack now commit together, so -error
// holds it once.
func TestRejectCopiesOnceWhenTheConnectionDropsBeforeTheAck(t *testing.T) {
	t.Parallel()
	var dropped atomic.Bool
	r := newProxiedRabbit(t, dropAckAfterPublish(&dropped), 0)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", "poison", "good")

	h := &recorder{verdict: func(d amqp.Delivery) Verdict {
		if string(d.Body) == "poison" {
			return Verdict{Outcome: Reject, Reason: "bad payload"}
		}
		return Verdict{Outcome: Ack}
	}}
	err := waitDone(t, r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: testPrefetch}, h))
	require.Error(t, err, "the connection was dropped at the ack")
	require.True(t, dropped.Load())

	ctx, cancel := context.WithCancel(context.Background())
	before := h.count()
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, h)
	// The ready count reaches 0 once both are delivered, before they are settled: wait
	// for "good", the last, to be handled again instead.
	require.Eventually(t, func() bool { return slices.Contains(h.bodies()[before:], "good") }, waitFor, 20*time.Millisecond)
	r.eventuallyCount("issues-error", 1)
	cancel()
	require.NoError(t, waitDone(t, done))

	copies := r.getAll("issues-error")
	require.Len(t, copies, 1, "the rejected message is in -error once")
	assert.Equal(t, "poison", string(copies[0].Body))
	assert.Equal(t, "bad payload", copies[0].Headers[HeaderErrorReason])
}

// frameRecorder records the size of each header frame a client sends, frame header and
// end included.
type frameRecorder struct {
	mu      sync.Mutex
	headers []int
}

func (f *frameRecorder) copy() testenv.Copy {
	return clientFrames(func(frameType byte, payload []byte) bool {
		if frameType == frameHeader {
			f.mu.Lock()
			f.headers = append(f.headers, 7+len(payload)+1)
			f.mu.Unlock()
		}
		return true
	})
}

func (f *frameRecorder) last() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.headers) == 0 {
		return 0
	}
	return f.headers[len(f.headers)-1]
}

// asPublished is the publishing a copy read back from -error was sent as.
func asPublished(d amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		CorrelationId: d.CorrelationId, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId,
	}
}

// A message whose headers nearly fill the connection's frame_max does not fit once its
// copy to -error adds its own: RabbitMQ closed the connection for the frame too large, and
// the message came back at the head of its queue, for good. The copy is now cut to fit,
// says what it left out, and the message behind it is consumed.
func TestRejectCopyIsCutToFitFrameMax(t *testing.T) {
	t.Parallel()
	const frameMax = 4096 // the smallest the protocol allows; the connection negotiates it
	frames := &frameRecorder{}
	r := newProxiedRabbit(t, frames.copy(), frameMax)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})

	headers := amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-big", "x-padding": ""}
	near := amqp.Publishing{Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "d-big", Body: []byte("poison")}
	headers["x-padding"] = strings.Repeat("p", frameMax-40-headerFrameSize(near))
	require.Equal(t, frameMax-40, headerFrameSize(near), "the producer's message fits, 40 bytes short of frame_max")
	r.publishMessages("issues", near, amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: "d-next", Body: []byte("next")})

	h := &recorder{verdict: func(d amqp.Delivery) Verdict {
		if string(d.Body) == "poison" {
			return Verdict{Outcome: Reject, Reason: "bad payload: " + strings.Repeat("why ", 300)}
		}
		return Verdict{Outcome: Ack}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, h)
	// The ready count reaches 0 once both are delivered, before they are handled.
	require.Eventually(t, func() bool { return h.count() == 2 }, waitFor, 20*time.Millisecond)
	r.eventuallyCount("issues-error", 1)
	cancel()
	require.NoError(t, waitDone(t, done))
	assert.Equal(t, []string{"poison", "next"}, h.bodies(), "each delivered once")

	copies := r.getAll("issues-error")
	require.Len(t, copies, 1)
	c := copies[0]
	assert.Equal(t, "poison", string(c.Body), "the body is kept whole")
	assert.Equal(t, "d-big", c.MessageId)
	assert.Equal(t, "d-big", c.Headers["x-github-delivery"])
	assert.Equal(t, "issues", c.Headers["x-github-event"])
	assert.NotContains(t, c.Headers, "x-padding")
	assert.Equal(t, "cut to fit frame_max 4096: left out the reason past 512 bytes, 1 producer headers", c.Headers[HeaderErrorCut])
	reason, _ := c.Headers[HeaderErrorReason].(string)
	assert.True(t, strings.HasPrefix(reason, "bad payload: why why"), reason)
	assert.Len(t, reason, maxCutReason)
	// The size errorCopy computes is the size the library wrote.
	assert.LessOrEqual(t, frames.last(), frameMax)
	assert.Equal(t, headerFrameSize(asPublished(c)), frames.last())
	assert.Contains(t, r.logs.String(), "copy to -error cut to fit frame_max")
}

// RabbitMQ 4 refuses a publish whose body is over 16 MiB (max_message_size), which is
// less than MAX_MESSAGE_BYTES' 25 MiB. A message at that limit that brokerswitch rejects
// is copied to -error whole: the copy's headers (the reason) do not count against the
// limit, so it is accepted, and the original is acknowledged.
func TestARejectAtTheBrokersMessageSizeLimitReachesError(t *testing.T) {
	t.Parallel()
	const limit = 16 << 20 // 4.x's default max_message_size
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	ch := r.channel()
	require.NoError(t, ch.Confirm(false))
	body := []byte(strings.Repeat("x", limit))
	conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "issues", false, false, amqp.Publishing{
		Headers: amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-big"}, DeliveryMode: amqp.Persistent, MessageId: "d-big", Body: body,
	})
	require.NoError(t, err)
	ok, err := conf.WaitContext(context.Background())
	require.NoError(t, err)
	require.True(t, ok, "the broker takes a body at its limit")

	h := &recorder{verdict: func(amqp.Delivery) Verdict {
		return Verdict{Outcome: Reject, Reason: "invalid JSON: " + strings.Repeat("why ", 100)}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, h)
	r.eventuallyCount("issues-error", 1)
	cancel()
	require.NoError(t, waitDone(t, done))
	copies := r.getAll("issues-error")
	require.Len(t, copies, 1)
	assert.Len(t, copies[0].Body, limit, "the body is kept whole")
	assert.Contains(t, copies[0].Headers["x-error-reason"], "invalid JSON")
	r.eventuallyCount("issues", 0)
	assert.Equal(t, 1, h.count(), "delivered once")
}
