package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// drainIdle is how long a drain round waits for a further delivery the queue's ready
// count promised: the count is a snapshot, and another client may have taken the message.
// drainFirst is how long it waits for the first: over a slow link a large body takes
// seconds, and a round that never received one would leave the spare unread for good.
//
// Neither makes a drain take a spare for empty: only a ready count of 0 with no consumer
// does, or no queue at all (consumeBatch); a round a timer ends is short, and the drain
// says it did not see the spare empty. They need not follow the AMQP heartbeat: a
// connection gone silent ends the round by a timer, and the client gives it up one and a
// half heartbeats after its last frame (amqp091-go's read deadline); a batch handed out
// before that goes back to the head of the queue once the broker drops the connection,
// about three heartbeats on, and until then the broker counts the drain's consumer, so a
// successor's drain finds the queue busy and does not read past the batch. A batch whose transaction
// commits after that is refused by the queue's fencing token once another attempt took
// the queue, and is otherwise a duplicate the ledger skips when it comes back.
const (
	drainIdle  = time.Second
	drainFirst = 3 * time.Second
)

// ErrQueueBusy is wrapped into Drain's error when the queue has a consumer of another
// client: a window that has not stopped yet may hold a batch of it unsettled, which
// goes back to the head of the queue should that window end. Reading behind it would
// apply later messages before those.
var ErrQueueBusy = errors.New("queue has another consumer")

// DrainOptions say how much a Drain takes and what it leaves.
type DrainOptions struct {
	// Max is the most messages taken; Batch the most handed to the handler at once (at
	// most MaxPrefetch). Both must be positive.
	Max, Batch int
	// Keep, when set, names a message the drain must not take: the drain stops before
	// the first one, which stays at the head of the queue with everything behind it.
	Keep func(amqp.Delivery) bool
	// Fence, when it closes, gives the batch in hand back unsettled, as
	// ConsumeOptions.Fence does: the caller closes it when another drain may take its place.
	Fence <-chan struct{}
}

// DrainResult is what a Drain did.
type DrainResult struct {
	// Taken is the number of messages settled.
	Taken int
	// Empty is true when the drain saw the queue empty at its end; it is false when it
	// stopped at Max, before a kept message, or because a round ended with messages it was
	// promised not delivered (a slow link, a stalled broker).
	Empty bool
	// Kept is true when the drain stopped before a message Keep named.
	Kept bool
}

// DrainWith takes messages from queue on broker index as opts say, hands them to h and
// settles the verdicts exactly as Consume does. Messages are never auto-acknowledged:
// should the channel close, the unsettled ones go back to the queue.
//
// Each batch is one round: a passive declare reads the ready count, then a consumer
// with a prefetch of exactly the messages wanted (at most Batch, at most what Max
// leaves) receives them; it is cancelled once the handler applied them, before their
// acks commit. Because the broker never sends more than the prefetch to an
// unacknowledging consumer, nothing beyond the cap is ever delivered, and what the drain
// leaves stays in order. The consumer stays while the batch is applied so that another
// drain (a successor, while this worker is paused) sees the queue busy rather than a
// ready count without the batch, and never reads past it. A round costs a few round
// trips however large the batch.
//
// A queue that another client consumes is not read (ErrQueueBusy): that consumer may
// hold messages that go back to the head of the queue. A queue that does not exist is
// empty. When h fails or ctx ends, DrainWith returns the error (wrapping ctx's) with the
// current batch unsettled and back at the head of the queue.
//
// A message over MaxMessageBytes is moved to {q}-error unread (see quarantine), and the
// drain goes on behind it with what is left of Max, on a channel of its own.
func (p *Pool) DrainWith(ctx context.Context, index int, queue string, opts DrainOptions, h BatchHandler) (DrainResult, error) {
	var total DrainResult
	for {
		res, err := p.drainOnce(ctx, index, queue, opts, h)
		total.Taken += res.Taken
		total.Empty, total.Kept = res.Empty, res.Kept
		switch {
		case errors.Is(err, ErrMovedToError):
			opts.Max -= res.Taken + 1
		case err == nil && shortWithProgress(res, opts.Max):
			// A round ended early over a slow link, having taken some: what was still in
			// flight went back when its channel closed, and a new channel reads on.
			opts.Max -= res.Taken
		default:
			return total, err
		}
		if opts.Max < 1 {
			return total, nil
		}
	}
}

// shortWithProgress tells whether a drain on one channel ended with a short round after
// taking something, below max: neither empty, nor stopped at a kept message or the cap.
func shortWithProgress(res DrainResult, max int) bool {
	return !res.Empty && !res.Kept && res.Taken > 0 && res.Taken < max
}

// drainOnce is DrainWith on one channel, until the queue is empty, opts are met or a
// message over MaxMessageBytes ends it.
func (p *Pool) drainOnce(ctx context.Context, index int, queue string, opts DrainOptions, h BatchHandler) (DrainResult, error) {
	ep, err := p.endpoint(index)
	if err != nil {
		return DrainResult{}, err
	}
	if opts.Max < 1 || opts.Batch < 1 {
		return DrainResult{}, fmt.Errorf("drain %s on %s: max %d and batch %d must be positive", queue, ep, opts.Max, opts.Batch)
	}
	opts.Batch = min(opts.Batch, MaxPrefetch)
	ch, frameMax, err := p.consumerChannel(ctx, index, queue)
	if err != nil {
		return DrainResult{}, fmt.Errorf("drain %s: %w", queue, err)
	}
	defer ch.Close()
	s, err := newSettler(p, ep, ch, frameMax, queue, nil)
	if err != nil {
		return DrainResult{}, fmt.Errorf("drain %s: %w", queue, err)
	}
	s.fence = opts.Fence

	res, err := drainFrom(ctx, s, h, opts, func(limit int) (round, error) {
		return consumeBatch(ctx, ch, queue, limit)
	})
	_ = ch.Close()
	err = p.quarantine().Move(ctx, quarantined(ep, queue, frameMax, opts.Batch, nil), err)
	switch {
	case isCode(err, amqp.AccessRefused):
		// Another client consumes the queue exclusively: the window of a worker that has
		// not stopped yet, say.
		return res, fmt.Errorf("drain %s on %s: %w: %w", queue, ep, ErrQueueBusy, err)
	case isCode(err, amqp.NotFound):
		res.Empty = true
		return res, nil
	case err != nil:
		return res, fmt.Errorf("drain %s on %s: %w", queue, ep, err)
	}
	return res, nil
}

// roundEnd says how a round ended.
type roundEnd int

const (
	roundFull  roundEnd = iota // every message asked for came: another round may follow
	roundEmpty                 // the queue was seen empty
	roundShort                 // fewer came than the ready count promised: the channel must close first
)

// round is what one round of a drain received: msgs, unsettled, how it ended, and
// release, which ends its consumer once the batch is applied (nil when it has none).
type round struct {
	msgs    []amqp.Delivery
	end     roundEnd
	release func() error
}

// drainFrom hands h the batches next returns, at most opts.Max messages in all, and
// settles them, stopping before a message opts.Keep names. next returns a round of at
// most limit messages.
func drainFrom(ctx context.Context, s *settler, h BatchHandler, opts DrainOptions,
	next func(limit int) (round, error),
) (res DrainResult, err error) {
	limit := opts.Batch
	if opts.Keep != nil {
		// What waits at the head may be a message to keep: look at one before
		// delivering a batch that would all go back.
		limit = 1
	}
	for res.Taken < opts.Max {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		r, err := next(min(limit, opts.Max-res.Taken))
		if err != nil {
			return res, err
		}
		msgs, end := r.msgs, r.end
		limit = opts.Batch
		take := len(msgs)
		if opts.Keep != nil {
			for i, d := range msgs {
				if opts.Keep(d) {
					take, res.Kept = i, true
					break
				}
			}
		}
		n, err := s.handleThen(ctx, h, msgs[:take], r.release)
		res.Taken += n
		if err != nil {
			return res, err
		}
		// A kept message and what follows it go back when the channel closes.
		if res.Kept || end != roundFull {
			res.Empty = end == roundEmpty && !res.Kept
			return res, nil
		}
	}
	return res, nil
}

// consumeBatch reads the queue's ready count and receives up to limit of them. A queue
// with a consumer of another client is busy. A round that ends early (a delivery may
// then have arrived as the consumer was cancelled and been dropped by the library) is
// short: closing the channel puts it back in its place before another round could take
// what follows it. The count may still show a consumer that has gone (the drain's own,
// cancelled in the round before, or a window's that closed its channel): a quorum queue
// removes it asynchronously. So a queue is busy only when a consumer is still counted
// after drainIdle.
func consumeBatch(ctx context.Context, ch *amqp.Channel, queue string, limit int) (round, error) {
	info, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err == nil && info.Consumers > 0 {
		info, err = awaitNoConsumer(ctx, ch, queue, info)
	}
	switch {
	case err != nil:
		return round{end: roundEmpty}, err
	case info.Consumers > 0:
		return round{end: roundShort}, fmt.Errorf("%w (%d)", ErrQueueBusy, info.Consumers)
	case info.Messages == 0:
		return round{end: roundEmpty}, nil
	}
	msgs, complete, release, err := receive(ctx, ch, queue, min(info.Messages, limit))
	r := round{msgs: msgs, end: roundFull, release: release}
	if err != nil || !complete {
		r.end = roundShort
	}
	return r, err
}

// awaitNoConsumer re-reads the queue until it has no consumer, for at most drainIdle.
func awaitNoConsumer(ctx context.Context, ch *amqp.Channel, queue string, info amqp.Queue) (amqp.Queue, error) {
	deadline := time.Now().Add(drainIdle)
	for info.Consumers > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return info, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		var err error
		if info, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
			return info, err
		}
	}
	return info, nil
}

// receive consumes up to want messages of queue with a prefetch of want and returns them
// unsettled, with its consumer still there: release cancels it. complete is false when it
// stopped early because no delivery came for drainIdle; a delivery that comes later stays
// unsettled, behind the batch, and goes back when the channel closes.
func receive(ctx context.Context, ch *amqp.Channel, queue string, want int) (msgs []amqp.Delivery, complete bool, release func() error, err error) {
	if err := ch.Qos(want, 0, false); err != nil {
		return nil, false, nil, fmt.Errorf("set prefetch: %w", err)
	}
	tag := "brokerswitch-drain-" + rand.Text()[:12]
	// Not exclusive: the drain must not keep a window's exclusive consumer out.
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, false, nil, fmt.Errorf("consume: %w", err)
	}
	msgs = make([]amqp.Delivery, 0, want)
	idle := time.NewTimer(drainFirst)
	defer idle.Stop()
	for len(msgs) < want {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return nil, false, nil, errors.New("channel closed during the drain")
			}
			msgs = append(msgs, d)
			idle.Reset(drainIdle)
			continue
		case <-ctx.Done():
			return nil, false, nil, ctx.Err()
		case <-idle.C:
		}
		break
	}
	// The broker sends no more than want unacknowledged messages, so none can come
	// beyond msgs while they are unsettled: release cancels the consumer before their acks
	// commit, and what came after the idle timer fired stays unsettled.
	release = func() error {
		if err := ch.Cancel(tag, false); err != nil {
			return fmt.Errorf("cancel consumer: %w", err)
		}
		for range deliveries { //nolint:revive // emptied until cancel-ok closes it
		}
		return nil
	}
	return msgs, len(msgs) == want, release, nil
}
