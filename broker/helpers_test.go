package broker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// waitFor bounds every wait on the broker: long, because it only ends a test that hangs,
// and a loaded machine slows RabbitMQ too.
const waitFor = 30 * time.Second

// rabbit is a test's own vhost: a Pool under test plus a separate connection
// for publishing and inspecting.
type rabbit struct {
	t    *testing.T
	url  string
	pool *Pool
	logs *testenv.Buffer

	mu   sync.Mutex
	conn *amqp.Connection
}

func newRabbit(t *testing.T) *rabbit {
	t.Helper()
	url := testenv.NewVhost(t)
	eps, err := ParseEndpoints(url)
	require.NoError(t, err)
	logs := &testenv.Buffer{}
	pool := NewPool(eps, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), PoolSettings{})
	t.Cleanup(func() { require.NoError(t, pool.Close()) })
	r := &rabbit{t: t, url: url, pool: pool, logs: logs}
	t.Cleanup(func() {
		if r.conn != nil {
			r.conn.Close()
		}
	})
	return r
}

// connections counts the connections the pool opened to the test's broker for its
// channels (a queue's consumers have connections of their own), from the pool's log:
// it logs each one it opens.
func (r *rabbit) connections() int {
	n := 0
	for line := range strings.Lines(r.logs.String()) {
		if strings.Contains(line, `msg="broker connected"`) && !strings.Contains(line, "consumers_of=") {
			n++
		}
	}
	return n
}

// drain is p.DrainWith with Max and Batch alone, returning how many messages it took.
func drain(ctx context.Context, p *Pool, index int, queue string, max, batch int, h BatchHandler) (int, error) {
	res, err := p.DrainWith(ctx, index, queue, DrainOptions{Max: max, Batch: batch}, h)
	return res.Taken, err
}

// channel opens a channel on the test's own connection, redialing it when
// a test has made the broker close it.
func (r *rabbit) channel() *amqp.Channel {
	r.t.Helper()
	r.mu.Lock()
	if r.conn == nil || r.conn.IsClosed() {
		conn, err := amqp.Dial(r.url)
		require.NoError(r.t, err)
		r.conn = conn
	}
	conn := r.conn
	r.mu.Unlock()
	ch, err := conn.Channel()
	require.NoError(r.t, err)
	r.t.Cleanup(func() { ch.Close() })
	return ch
}

// declare declares topo, as the queue type BROKERSWITCH_TEST_QUEUE_TYPE says unless topo
// names one.
func (r *rabbit) declare(topo Topology) {
	r.t.Helper()
	if topo.Type == "" {
		topo.Type = QueueType(testenv.QueueType())
	}
	require.NoError(r.t, r.pool.DeclareTopology(context.Background(), 0, topo))
}

// publish sends bodies to queue the way the producer does, and waits for the
// broker's confirms so the messages are in the queue when it returns.
func (r *rabbit) publish(queue string, bodies ...string) {
	r.t.Helper()
	ch := r.channel()
	require.NoError(r.t, ch.Confirm(false))
	for _, b := range bodies {
		conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, amqp.Publishing{
			Headers:      amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-" + b},
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    "d-" + b,
			Body:         []byte(b),
		})
		require.NoError(r.t, err)
		require.True(r.t, conf.Wait(), "publish %q not confirmed", b)
	}
}

// publishMessages sends msgs to queue as they are, and waits for the broker's confirm of
// each.
func (r *rabbit) publishMessages(queue string, msgs ...amqp.Publishing) {
	r.t.Helper()
	ch := r.channel()
	require.NoError(r.t, ch.Confirm(false))
	for _, m := range msgs {
		conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false, m)
		require.NoError(r.t, err)
		ok, err := conf.WaitContext(context.Background())
		require.NoError(r.t, err)
		require.True(r.t, ok, "the broker takes message %q", m.MessageId)
	}
}

// getAll takes every ready message of queue and returns them in order. It consumes with
// automatic acks rather than basic.get, which quorum queues with single active consumer
// refuse.
func (r *rabbit) getAll(queue string) []amqp.Delivery {
	r.t.Helper()
	ch := r.channel()
	info, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(r.t, err)
	if info.Messages == 0 {
		return nil
	}
	tag := "test-get-" + strconv.Itoa(int(time.Now().UnixNano()))
	ds, err := ch.Consume(queue, tag, true, false, false, false, nil)
	require.NoError(r.t, err)
	var out []amqp.Delivery
	timeout := time.After(waitFor)
	for len(out) < info.Messages {
		select {
		case d := <-ds:
			out = append(out, d)
		case <-timeout:
			r.t.Fatalf("got %d of the %d messages ready in %s", len(out), info.Messages, queue)
		}
	}
	require.NoError(r.t, ch.Cancel(tag, false))
	for d := range ds {
		out = append(out, d)
	}
	return out
}

func (r *rabbit) count(queue string) int {
	r.t.Helper()
	counts, err := r.pool.ReadyCounts(context.Background(), 0, []string{queue})
	require.NoError(r.t, err)
	return counts[queue]
}

func (r *rabbit) eventuallyCount(queue string, want int) {
	r.t.Helper()
	require.Eventually(r.t, func() bool {
		counts, err := r.pool.ReadyCounts(context.Background(), 0, []string{queue})
		return err == nil && counts[queue] == want
	}, waitFor, 20*time.Millisecond,
		"queue %s never had %d ready messages", queue, want)
}

// consume runs Consume in the background; the returned channel yields its result.
// testPrefetch is the prefetch of the tests' consumers, PREFETCH's default.
const testPrefetch = 200

func (r *rabbit) consume(ctx context.Context, queue string, opts ConsumeOptions, h BatchHandler) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.pool.Consume(ctx, 0, queue, opts, h) }()
	return done
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitFor):
		t.Fatal("Consume did not return")
		return nil
	}
}

func numbered(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func bodies(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}

// recorder is a BatchHandler that records what it saw and answers with verdict.
type recorder struct {
	mu      sync.Mutex
	seen    []amqp.Delivery
	batches []int
	verdict func(d amqp.Delivery) Verdict
}

func (h *recorder) HandleBatch(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, ds...)
	h.batches = append(h.batches, len(ds))
	vs := make([]Verdict, len(ds))
	for i, d := range ds {
		if h.verdict != nil {
			vs[i] = h.verdict(d)
		}
	}
	return vs, nil
}

func (h *recorder) bodies() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return bodies(h.seen)
}

func (h *recorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

func (h *recorder) batchSizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.batches...)
}

// settleCounter counts OnSettled calls per outcome.
type settleCounter struct {
	mu sync.Mutex
	n  map[Outcome]int
}

func (c *settleCounter) add(v Verdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[Outcome]int{}
	}
	c.n[v.Outcome]++
}

func (c *settleCounter) get(o Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[o]
}
