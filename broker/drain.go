package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// drainIdle is how long a drain round waits for a delivery the queue's ready count
// promised: the count is a snapshot, and another client may have taken the message.
const drainIdle = time.Second

// Drain is the Leftover Drain: it takes messages from queue on broker index until the
// queue is empty or max messages were taken, hands them to h in batches of up to batch,
// and settles the verdicts exactly as Consume does. Messages are never auto-acknowledged:
// should the channel close, the unsettled ones go back to the queue.
//
// Each batch is one round: a passive declare reads the ready count, then a consumer
// with a prefetch of exactly the messages wanted (at most batch, at most what the cap
// leaves) receives them and is cancelled before they are handled and settled. Because
// the broker never sends more than the prefetch to an unacknowledging consumer, nothing
// beyond the cap is ever delivered, and what the drain leaves stays in order. A round
// costs a few round trips however large the batch, where basic.get cost one per message.
// Where RabbitMQ refuses the consumer because another one has the queue exclusively,
// the drain goes on with basic.get, which it does not refuse.
//
// taken is the number of messages settled. A queue that does not exist is empty. When
// h fails or ctx ends, Drain returns the error (wrapping ctx's) with the current batch
// unsettled and back at the head of the queue.
func (p *Pool) Drain(ctx context.Context, index int, queue string, max int, batch int, h BatchHandler) (taken int, err error) {
	ep, err := p.endpoint(index)
	if err != nil {
		return 0, err
	}
	if max < 1 || batch < 1 {
		return 0, fmt.Errorf("drain %s on %s: max %d and batch %d must be positive", queue, ep, max, batch)
	}
	if batch > MaxPrefetch {
		batch = MaxPrefetch
	}
	ch, frameMax, err := p.channel(ctx, index)
	if err != nil {
		return 0, fmt.Errorf("drain %s: %w", queue, err)
	}
	defer ch.Close()
	s, err := newSettler(p, ep, ch, frameMax, queue, nil)
	if err != nil {
		return 0, err
	}

	taken, err = drainFrom(ctx, s, h, max, batch, func(limit int) ([]amqp.Delivery, bool, error) {
		return consumeBatch(ctx, ch, queue, limit)
	})
	if isCode(err, amqp.AccessRefused) {
		// Another client consumes the queue exclusively (the window of a worker that
		// has not stopped yet, say). basic.get still works beside it, at one round trip
		// per message; the refusal closed this channel.
		var n int
		n, err = p.drainByGet(ctx, ep, queue, max-taken, batch, h)
		taken += n
	}
	if isCode(err, amqp.NotFound) {
		return taken, nil
	}
	if err != nil {
		return taken, fmt.Errorf("drain %s on %s: %w", queue, ep, err)
	}
	return taken, nil
}

// drainFrom hands h the batches next returns, at most max messages in all, and settles
// them. next returns at most limit messages, and more=false once the queue ran empty.
func drainFrom(ctx context.Context, s *settler, h BatchHandler, max, batch int,
	next func(limit int) (msgs []amqp.Delivery, more bool, err error),
) (taken int, err error) {
	for taken < max {
		if err := ctx.Err(); err != nil {
			return taken, err
		}
		msgs, more, err := next(min(batch, max-taken))
		if err != nil || len(msgs) == 0 {
			return taken, err
		}
		n, err := s.handle(ctx, h, msgs)
		taken += n
		if err != nil || !more {
			return taken, err
		}
	}
	return taken, nil
}

// consumeBatch reads the queue's ready count and receives up to limit of them. more is
// false when the queue is empty or a round ended early: a delivery may then have arrived
// as the consumer was cancelled and been dropped by the library, and closing the channel
// puts it back in its place before another round could take what follows it.
func consumeBatch(ctx context.Context, ch *amqp.Channel, queue string, limit int) ([]amqp.Delivery, bool, error) {
	info, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil || info.Messages == 0 {
		return nil, false, err
	}
	return receive(ctx, ch, queue, min(info.Messages, limit))
}

// receive consumes up to want messages of queue with a prefetch of want, then cancels the
// consumer and returns them unsettled. complete is false when it stopped early because no
// delivery came for drainIdle.
func receive(ctx context.Context, ch *amqp.Channel, queue string, want int) (msgs []amqp.Delivery, complete bool, err error) {
	if err := ch.Qos(want, 0, false); err != nil {
		return nil, false, fmt.Errorf("set prefetch: %w", err)
	}
	tag := "brokerswitch-drain-" + rand.Text()[:12]
	// Not exclusive: the drain must not keep a window's exclusive consumer out.
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return nil, false, fmt.Errorf("consume: %w", err)
	}
	msgs = make([]amqp.Delivery, 0, want)
	idle := time.NewTimer(drainIdle)
	defer idle.Stop()
	for len(msgs) < want {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return nil, false, errors.New("channel closed during the drain")
			}
			msgs = append(msgs, d)
			idle.Reset(drainIdle)
			continue
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-idle.C:
		}
		break
	}
	// The broker sends no more than want unacknowledged messages, so none can be in
	// flight beyond msgs; after cancel-ok the library closes deliveries.
	complete = len(msgs) == want
	if err := ch.Cancel(tag, false); err != nil {
		return nil, false, fmt.Errorf("cancel consumer: %w", err)
	}
	for d := range deliveries {
		// Only when the idle timer fired as a delivery arrived.
		msgs = append(msgs, d)
	}
	return msgs, complete, nil
}

// drainByGet drains like Drain with basic.get, on a channel of its own.
func (p *Pool) drainByGet(ctx context.Context, ep Endpoint, queue string, max, batch int, h BatchHandler) (int, error) {
	ch, frameMax, err := p.channel(ctx, ep.Index)
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	s, err := newSettler(p, ep, ch, frameMax, queue, nil)
	if err != nil {
		return 0, err
	}
	return drainFrom(ctx, s, h, max, batch, func(limit int) ([]amqp.Delivery, bool, error) {
		return getBatch(ctx, ch, queue, limit)
	})
}

// getBatch gets up to limit messages. more is false when the queue ran empty.
func getBatch(ctx context.Context, ch *amqp.Channel, queue string, limit int) (msgs []amqp.Delivery, more bool, err error) {
	for len(msgs) < limit {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return msgs, false, nil
		}
		msgs = append(msgs, d)
	}
	return msgs, true, nil
}
