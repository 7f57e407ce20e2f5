//go:build integration

package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// publishAndReject publishes msg and then a message "next" to issues, consumes both with a
// Reject for msg (reason reason), and returns the copy in issues-error once "next" is
// handled and the queue is empty. On a copy the broker refuses, the connection closes,
// msg returns to the head and the wait fails.
func publishAndReject(t *testing.T, r *rabbit, msg amqp.Publishing, reason string) amqp.Delivery {
	t.Helper()
	r.publishMessages("issues", msg, amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: "d-next", Body: []byte("next")})
	h := &recorder{verdict: func(d amqp.Delivery) Verdict {
		if string(d.Body) == "poison" {
			return Verdict{Outcome: Reject, Reason: reason}
		}
		return Verdict{Outcome: Ack}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, h)
	r.eventuallyCount("issues-error", 1)
	require.Eventually(t, func() bool { return h.count() == 2 }, waitFor, 20*time.Millisecond)
	cancel()
	require.NoError(t, waitDone(t, done), "the copy did not cut the connection")
	assert.Equal(t, []string{"poison", "next"}, h.bodies(), "each delivered once")
	r.eventuallyCount("issues", 0)
	copies := r.getAll("issues-error")
	require.Len(t, copies, 1)
	assert.Equal(t, "poison", string(copies[0].Body), "the body is kept whole")
	return copies[0]
}

// negotiatedFrameMax is the frame_max of the pool's connection to broker 0.
func negotiatedFrameMax(t *testing.T, r *rabbit) int {
	t.Helper()
	ch, frameMax, err := r.pool.channel(context.Background(), 0)
	require.NoError(t, err)
	require.NoError(t, ch.Close())
	return frameMax
}

// The copy kept every x-github-* header of up to 300 bytes, however many: 440 of them,
// each 270 bytes and lengthened evenly until the producer's message is 60 bytes short of
// frame_max (each still under 300), made a copy RabbitMQ refused by closing the
// connection, and the message came back at the head of its queue. The copy now drops
// producer headers until it fits, the largest first, and keeps the event's name and
// delivery id.
func TestRejectCopyOfAMessageWithManyProducerHeadersFits(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	frameMax := negotiatedFrameMax(t, r)

	headers := amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-many"}
	values := make([]int, 440)
	for i := range values {
		values[i] = 270
	}
	msg := amqp.Publishing{Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "d-many", Body: []byte("poison")}
	fill := func() {
		for i, n := range values {
			headers[fmt.Sprintf("x-github-h%03d", i)] = strings.Repeat("v", n)
		}
	}
	fill()
	for i := 0; headerFrameSize(msg) < frameMax-60; i = (i + 1) % len(values) {
		values[i]++
		fill()
	}
	require.Equal(t, frameMax-60, headerFrameSize(msg), "the producer's message fits, 60 bytes short of frame_max")
	for k, v := range headers {
		require.LessOrEqual(t, fieldSize(k, v), maxKeptHeader, k)
	}

	c := publishAndReject(t, r, msg, "invalid JSON")
	assert.Equal(t, "d-many", c.MessageId)
	assert.Equal(t, "d-many", c.Headers["x-github-delivery"])
	assert.Equal(t, "issues", c.Headers["x-github-event"])
	assert.Equal(t, "invalid JSON", c.Headers[HeaderErrorReason], "a short reason is not cut")
	assert.Equal(t, "application/json", c.ContentType, "dropping a few headers was enough")
	assert.LessOrEqual(t, headerFrameSize(asPublished(c)), frameMax)
	kept := 0
	for k := range c.Headers {
		if strings.HasPrefix(k, "x-github-h") {
			kept++
		}
	}
	assert.Greater(t, kept, 430, "only as many headers are dropped as it takes")
	assert.Equal(t, fmt.Sprintf("cut to fit frame_max %d: left out %d producer headers", frameMax, 440-kept), c.Headers[HeaderErrorCut])
}

// The header that says what a copy left out was added after the copy's last size check:
// a message that fitted once the reason was cut did not fit with it, and RabbitMQ closed
// the connection. It is now counted before the copy's headers are chosen.
func TestRejectCopyCountsTheHeaderThatSaysWhatWasCut(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	frameMax := negotiatedFrameMax(t, r)

	reason := "invalid JSON: " + strings.Repeat("why ", 300)
	headers := amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-edge", "x-padding": ""}
	msg := amqp.Publishing{Headers: headers, DeliveryMode: amqp.Persistent, MessageId: "d-edge", Body: []byte("poison")}
	// The copy with its reason cut to maxCutReason and no word on the cut yet.
	cutReasonCopy := func() int {
		c, _ := errorCopy(amqp.Delivery{Headers: headers, MessageId: msg.MessageId}, errorHeaders{
			reason: reason[:maxCutReason], at: time.Now(), queue: "issues",
		}, 0)
		return headerFrameSize(c)
	}
	headers["x-padding"] = strings.Repeat("p", frameMax-10-cutReasonCopy())
	require.Equal(t, frameMax-10, cutReasonCopy(), "the copy fits once its reason is cut, 10 bytes short")
	require.Less(t, headerFrameSize(msg), frameMax)

	c := publishAndReject(t, r, msg, reason)
	assert.Equal(t, fmt.Sprintf("cut to fit frame_max %d: left out the reason past 512 bytes, 1 producer headers", frameMax), c.Headers[HeaderErrorCut])
	assert.NotContains(t, c.Headers, "x-padding")
	assert.Equal(t, "d-edge", c.Headers["x-github-delivery"])
	assert.LessOrEqual(t, headerFrameSize(asPublished(c)), frameMax)
}

// When not even the copy without the producer's headers fits, the copy is a stub: the
// message id, the reason cut short, and the sizes of what was left out.
func TestErrorCopyIsAStubWhenNothingElseFits(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{
		Headers:     amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-stub"},
		ContentType: "application/json", MessageId: "d-stub", Body: []byte("poison"),
	}
	e := errorHeaders{reason: strings.Repeat("r", 600), at: time.Now(), queue: strings.Repeat("q", 200), retryCycles: 2}
	const frameMax = 900
	msg, cut := errorCopy(d, e, frameMax)
	assert.LessOrEqual(t, headerFrameSize(msg), frameMax)
	assert.Equal(t, "d-stub", msg.MessageId)
	assert.Equal(t, "poison", string(msg.Body))
	assert.Empty(t, msg.ContentType)
	assert.Equal(t, strings.Repeat("r", 128), msg.Headers[HeaderErrorReason])
	assert.Equal(t, int64(2), msg.Headers[HeaderRetryCycles])
	assert.Equal(t, e.queue, msg.Headers[HeaderErrorQueue])
	assert.NotContains(t, msg.Headers, "x-github-event")
	assert.Equal(t, cut, msg.Headers[HeaderErrorCut])
	assert.Contains(t, cut, "stub to fit frame_max 900")
	assert.Contains(t, cut, fmt.Sprintf("was %d bytes", headerFrameSize(amqp.Publishing{Headers: d.Headers, ContentType: d.ContentType, MessageId: d.MessageId})))
	assert.Contains(t, cut, "the body (6 bytes) is whole")
}

// Whatever the producer's headers, the copy fits frame_max.
func TestErrorCopyAlwaysFits(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		headers := amqp.Table{}
		for j := range rng.IntN(600) {
			prefix := []string{"x-github-", "x-", ""}[rng.IntN(3)]
			headers[fmt.Sprintf("%sh%d", prefix, j)] = strings.Repeat("v", rng.IntN(400))
		}
		if rng.IntN(2) == 0 {
			headers["x-death"] = []any{amqp.Table{"queue": "issues", "reason": "rejected", "count": int64(3)}}
		}
		d := amqp.Delivery{Headers: headers, MessageId: strings.Repeat("m", rng.IntN(256)), ContentType: strings.Repeat("c", rng.IntN(256)), Body: []byte("b")}
		e := errorHeaders{reason: strings.Repeat("r", rng.IntN(3000)), at: time.Now(), queue: strings.Repeat("q", 1+rng.IntN(255))}
		frameMax := 4096 + rng.IntN(128<<10)
		msg, cut := errorCopy(d, e, frameMax)
		require.LessOrEqual(t, headerFrameSize(msg), frameMax, "case %d", i)
		if cut != "" {
			require.Equal(t, cut, msg.Headers[HeaderErrorCut])
		}
		require.Equal(t, d.MessageId, msg.MessageId)
	}
}
