//go:build integration

package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// basic.nack's method id, beside methodAck.
const methodNack = 120

// settleLog interleaves, in the order they happened, the batches a handler applied (its
// transaction committed when it returned) with the settles the client sent on the wire.
type settleLog struct {
	mu      sync.Mutex
	applied map[uint64]bool // delivery tags of batches whose handler returned
	// acks are the settles seen, each with whether every tag it covers had been applied
	// when it went out.
	acks     []wireSettle
	maxAcked uint64
}

type wireSettle struct {
	tag      uint64
	multiple bool
	early    []uint64 // tags it covers that no handler had applied yet
}

func newSettleLog() *settleLog { return &settleLog{applied: map[uint64]bool{}} }

// apply records ds as applied: their handler is returning with verdicts.
func (l *settleLog) apply(ds []amqp.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range ds {
		l.applied[d.DeliveryTag] = true
	}
}

// copy is the proxy's frame filter: it records every basic.ack and basic.nack the client
// sends, and what had been applied at that moment.
func (l *settleLog) copy() func(byte, []byte) bool {
	return func(frameType byte, payload []byte) bool {
		if frameType != frameMethod || len(payload) < 4 {
			return true
		}
		class, method := binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:])
		l.mu.Lock()
		defer l.mu.Unlock()
		if class == classBasic && (method == methodAck || method == methodNack) && len(payload) >= 13 {
			s := wireSettle{tag: binary.BigEndian.Uint64(payload[4:]), multiple: payload[12]&1 != 0}
			from := s.tag
			if s.multiple {
				from = 1 // tags count from 1 on a channel; earlier settled ones are applied
			}
			for t := from; t <= s.tag; t++ {
				if !l.applied[t] {
					s.early = append(s.early, t)
				}
			}
			l.acks = append(l.acks, s)
			l.maxAcked = max(l.maxAcked, s.tag)
		}
		return true
	}
}

func (l *settleLog) snapshot() ([]wireSettle, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wireSettle(nil), l.acks...), l.maxAcked
}

// Consume settles a batch while the next one is handled, which is where an ack could get
// ahead of a commit: every ack the client sends covers only deliveries whose handler had
// returned (their transaction committed), whatever batch is being handled meanwhile.
func TestConsumeNeverAcksAheadOfTheCommitOfTheBatchesBefore(t *testing.T) {
	t.Parallel()
	log := newSettleLog()
	r := newProxiedRabbit(t, clientFrames(log.copy()), 0)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	const n = 60
	r.publish("issues", numbered(n)...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var settled settleCounter
	var mu sync.Mutex
	var seen []string
	// Each handler waits for the ack of the batch before it to be on the wire, at most a
	// moment: handling and settling then overlap on most batches.
	h := BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		first := ds[0].DeliveryTag
		deadline := time.Now().Add(50 * time.Millisecond)
		for time.Now().Before(deadline) {
			if _, acked := log.snapshot(); acked+1 >= first {
				break
			}
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		seen = append(seen, bodies(ds)...)
		mu.Unlock()
		log.apply(ds)
		return make([]Verdict, len(ds)), nil
	})
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: 12, maxBatch: 4, onSettled: settled.add}, h)
	require.Eventually(t, func() bool { return settled.get(Ack) == n }, waitFor, 10*time.Millisecond)
	cancel()
	require.NoError(t, waitDone(t, done))

	acks, maxAcked := log.snapshot()
	require.NotEmpty(t, acks)
	for _, a := range acks {
		assert.Empty(t, a.early, "ack of tag %d (multiple %v) went out before the batches it covers were applied", a.tag, a.multiple)
	}
	assert.EqualValues(t, n, maxAcked, "every delivery acknowledged")
	mu.Lock()
	assert.Equal(t, numbered(n), seen, "handled once each, in order")
	mu.Unlock()
	assert.Equal(t, 0, r.count("issues"))
}

// A batch whose transaction fails while the batch before it is being settled, with the
// batch behind it received already: the batch before stays acknowledged, and the failed
// batch and everything behind it come back to the head of the queue, unsettled and in
// order. None of their deliveries was acknowledged on the wire.
func TestAFailedBatchComesBackWithTheBatchesBehindItAndTheOneBeforeStaysAcked(t *testing.T) {
	t.Parallel()
	log := newSettleLog()
	r := newProxiedRabbit(t, clientFrames(log.copy()), 0)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	const n, failFrom = 30, 6 // the batch that holds message 6 fails
	r.publish("issues", numbered(n)...)

	errDB := errors.New("transaction rolled back")
	var mu sync.Mutex
	var applied []string
	var failed []amqp.Delivery
	h := BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]Verdict, error) {
		if int(ds[len(ds)-1].DeliveryTag) <= failFrom {
			mu.Lock()
			applied = append(applied, bodies(ds)...)
			mu.Unlock()
			log.apply(ds)
			return make([]Verdict, len(ds)), nil
		}
		mu.Lock()
		failed = ds
		mu.Unlock()
		// The batch behind this one is on the client before it fails: the broker has sent
		// more than this batch's last message.
		behind := n - int(ds[len(ds)-1].DeliveryTag) - 1
		assert.Eventually(t, func() bool { return r.count("issues") <= behind }, waitFor, 5*time.Millisecond,
			"the deliveries behind the failing batch were never sent")
		return nil, fmt.Errorf("apply %s..%s: %w", ds[0].Body, ds[len(ds)-1].Body, errDB)
	})
	err := waitDone(t, r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: 10, maxBatch: 3}, h))
	require.ErrorIs(t, err, errDB)
	require.ErrorIs(t, err, ErrHandler)

	mu.Lock()
	k := len(applied)
	require.Equal(t, numbered(n)[:k], applied, "the batches ahead of the failed one applied, in order")
	require.NotEmpty(t, failed)
	require.Equal(t, numbered(n)[k], string(failed[0].Body), "the failed batch follows them")
	mu.Unlock()
	// The failed batch and all behind it are back, in order; the ones before it are not.
	r.eventuallyCount("issues", n-k)
	assert.Equal(t, numbered(n)[k:], bodies(r.getAll("issues")))
	acks, maxAcked := log.snapshot()
	for _, a := range acks {
		assert.Empty(t, a.early, "ack of tag %d went out for deliveries never applied", a.tag)
	}
	assert.EqualValues(t, k, maxAcked, "the batches before the failed one were acknowledged, nothing after them")
}
