//go:build integration

package broker

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker/quarantine"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
)

// bodyLog is a BatchHandler that acknowledges everything and keeps the short bodies it
// saw, and the length of the longest: unlike recorder, it holds no large body itself.
type bodyLog struct {
	mu      sync.Mutex
	short   []string
	longest int
}

func (l *bodyLog) HandleBatch(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range ds {
		l.longest = max(l.longest, len(d.Body))
		if len(d.Body) <= 64 {
			l.short = append(l.short, string(d.Body))
		}
	}
	return make([]Verdict, len(ds)), nil
}

func (l *bodyLog) seen() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.short), l.longest
}

// The memory bound counted each prefetched delivery as MAX_MESSAGE_BYTES, but the broker
// refuses a body only over its own max_message_size (16 MiB on 4.x, 128 MiB on 3.x, and
// a shared plan may not let it be lowered), and the client library held every prefetched
// body whole: four bodies of 8 MiB on each of two queues held 64 MiB where the bound
// allowed 20 (2 queues × PREFETCH 10 × 1 MiB). A body over MaxMessageBytes is now read
// past and never held; the message is moved to {q}-error whole, body included, by a client
// that streams it; and every good message behind it, on both queues, is consumed in order.
func TestABodyOverMaxMessageBytesIsNeverHeldAndIsMovedToError(t *testing.T) {
	const (
		limit  = 1 << 20
		large  = 8 << 20
		larges = 4
		// stoppedConsumerWait is how long a move may wait for the cut consumer to be gone
		// from the queue (quarantine's busy): a loaded RabbitMQ 4.0 took it whole for
		// each large body, 40 s for four, past waitFor alone.
		stoppedConsumerWait = 10 * time.Second
	)
	r := newRabbit(t)
	r.pool.settings.MaxMessageBytes = limit
	m, reg := metricstest.New()
	r.pool.settings.Metrics = m
	queues := []string{"issues", "pushes"}
	r.declare(Topology{Queues: queues, RetryTTL: time.Minute})
	for _, q := range queues {
		for i := range larges + 1 {
			r.publish(q, fmt.Sprintf("%s-good-%d", q, i))
			if i < larges {
				id := fmt.Sprintf("%s-large-%d", q, i)
				r.publishMessages(q, amqp.Publishing{
					Headers: amqp.Table{"x-github-event": "issues", "x-github-delivery": id}, MessageId: id,
					DeliveryMode: amqp.Persistent, Body: bytes.Repeat([]byte{byte('a' + i)}, large),
				})
			}
		}
	}

	logs := map[string]*bodyLog{}
	loops := map[string]*consumeLoop{}
	t.Cleanup(func() {
		if t.Failed() {
			for q, l := range loops {
				t.Log(q, l.errors())
			}
			t.Log(r.logs.String())
		}
	})
	held := testenv.PeakHeap(func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for _, q := range queues {
			logs[q] = &bodyLog{}
			loops[q] = startLoop(ctx, r, q, logs[q])
		}
		for _, q := range queues {
			require.Eventually(t, func() bool {
				short, _ := logs[q].seen()
				return slices.Contains(short, q+"-good-4")
			}, waitFor+larges*stoppedConsumerWait, 20*time.Millisecond, "the good messages of %s behind the large ones were never consumed", q)
			r.eventuallyCount(ErrorQueue(q), larges)
		}
		cancel()
		for _, q := range queues {
			<-loops[q].done
		}
	})
	t.Logf("consumers held at most %d bytes", held)
	assert.LessOrEqual(t, held, uint64(len(queues)*10*limit),
		"the consumers held %d bytes: more than QUEUES × PREFETCH × MAX_MESSAGE_BYTES", held)

	for _, q := range queues {
		short, longest := logs[q].seen()
		assert.LessOrEqual(t, longest, 64, "a handler of %s was given a large body (or its stand-in)", q)
		var firsts []string
		for _, b := range short {
			if !slices.Contains(firsts, b) {
				firsts = append(firsts, b)
			}
		}
		want := make([]string, larges+1)
		for i := range want {
			want[i] = fmt.Sprintf("%s-good-%d", q, i)
		}
		assert.Equal(t, want, firsts, "%s in queue order", q)
		assert.Equal(t, 0, r.count(q))
		errs := loops[q].errors()
		assert.Len(t, errs, larges, "each large message ended its consumer once")
		assert.InDelta(t, larges, metricstest.Value(t, reg, "brokerswitch_oversize_messages_total", "queue", q, "outcome", metrics.OversizeMoved), 0)
		assert.InDelta(t, larges, metricstest.Value(t, reg, "brokerswitch_routed_messages_total", "queue", q, "route", metrics.RouteError), 0)
		for _, err := range errs {
			assert.ErrorIs(t, err, quarantine.ErrOversize)
		}

		copies := r.getAll(ErrorQueue(q))
		require.Len(t, copies, larges)
		for i, c := range copies {
			assert.Equal(t, fmt.Sprintf("%s-large-%d", q, i), c.MessageId, "in queue order")
			assert.Equal(t, large, len(c.Body), "the body is copied whole")
			assert.Equal(t, large, bytes.Count(c.Body, []byte{byte('a' + i)}))
			reason, _ := c.Headers[HeaderErrorReason].(string)
			assert.True(t, strings.Contains(reason, "over MAX_MESSAGE_BYTES (1048576)"), "reason %q", reason)
			assert.Equal(t, q, c.Headers[HeaderErrorQueue])
			assert.Equal(t, fmt.Sprintf("%s-large-%d", q, i), c.Headers["x-github-delivery"], "the producer's headers are kept")
		}
	}
}

// A Leftover Drain that reached a body over MaxMessageBytes used to end there with an
// error, leaving the good messages behind it on the spare until a later window, and
// counting the spare as one that cannot be read. It now moves the message and goes on, in
// order, within its budget.
func TestADrainMovesABodyOverMaxMessageBytesAndGoesOn(t *testing.T) {
	const limit = 64 << 10
	r := newRabbit(t)
	r.pool.settings.MaxMessageBytes = limit
	r.declare(Topology{Queues: []string{"pushes"}, RetryTTL: time.Minute})
	for i := range 3 {
		r.publish("pushes", fmt.Sprintf("good-%d", i))
		if i < 2 {
			id := fmt.Sprintf("large-%d", i)
			r.publishMessages("pushes", amqp.Publishing{
				Headers: amqp.Table{"x-github-event": "push", "x-github-delivery": id}, MessageId: id,
				DeliveryMode: amqp.Persistent, Body: bytes.Repeat([]byte{'x'}, 4*limit),
			})
		}
	}

	h := &bodyLog{}
	res, err := r.pool.DrainWith(t.Context(), 0, "pushes", DrainOptions{Max: 100, Batch: 10}, h)
	require.NoError(t, err)
	short, longest := h.seen()
	assert.Equal(t, []string{"good-0", "good-1", "good-2"}, short, "every good message, in queue order")
	assert.LessOrEqual(t, longest, 64, "no handler was given a large body")
	assert.Equal(t, 3, res.Taken)
	assert.True(t, res.Empty)
	assert.Equal(t, 0, r.count("pushes"))
	var ids []string
	for _, c := range r.getAll(ErrorQueue("pushes")) {
		ids = append(ids, c.MessageId)
	}
	assert.Equal(t, []string{"large-0", "large-1"}, ids)

	// The budget counts a moved message: a drain of 2 stops behind the first large one.
	r.publish("pushes", "good-3")
	r.publishMessages("pushes", amqp.Publishing{MessageId: "large-2", DeliveryMode: amqp.Persistent, Body: bytes.Repeat([]byte{'x'}, 4*limit)})
	r.publish("pushes", "good-4")
	res, err = r.pool.DrainWith(t.Context(), 0, "pushes", DrainOptions{Max: 2, Batch: 10}, h)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Taken)
	short, _ = h.seen()
	assert.Equal(t, "good-3", short[len(short)-1])
	assert.Equal(t, 1, r.count("pushes"), "good-4 waits for the next drain")
}
