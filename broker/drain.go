package broker

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Drain is the Leftover Drain: it takes messages from queue on broker index
// with basic.get until the queue is empty or max messages were taken, hands
// them to h in batches of up to batch, and settles the verdicts exactly as
// Consume does. Messages are never auto-acknowledged: should the channel
// close, the unsettled ones go back to the queue.
//
// taken is the number of messages settled. A queue that does not exist is
// empty. When h fails or ctx ends, Drain returns the error (wrapping ctx's)
// with the current batch unsettled and back at the head of the queue.
func (p *Pool) Drain(ctx context.Context, index int, queue string, max int, batch int, h BatchHandler) (taken int, err error) {
	ep, err := p.endpoint(index)
	if err != nil {
		return 0, err
	}
	if max < 1 || batch < 1 {
		return 0, fmt.Errorf("drain %s on %s: max %d and batch %d must be positive", queue, ep, max, batch)
	}
	ch, err := p.Channel(ctx, index)
	if err != nil {
		return 0, fmt.Errorf("drain %s: %w", queue, err)
	}
	defer ch.Close()
	s := newSettler(p, ep, ch, queue, nil)
	defer s.close()

	for taken < max {
		msgs, more, err := getBatch(ctx, ch, queue, min(batch, max-taken))
		if isCode(err, amqp.NotFound) {
			return taken, nil
		}
		if err != nil {
			return taken, fmt.Errorf("drain %s on %s: %w", queue, ep, err)
		}
		if len(msgs) == 0 {
			return taken, nil
		}
		n, err := s.handle(ctx, h, msgs)
		taken += n
		if err != nil {
			return taken, fmt.Errorf("drain %s on %s: %w", queue, ep, err)
		}
		if !more {
			return taken, nil
		}
	}
	return taken, nil
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
