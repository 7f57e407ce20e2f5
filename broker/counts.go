package broker

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueCount is what a passive declare tells of a queue: its ready messages and its
// consumers. RabbitMQ's AMQP answer does not count unacknowledged messages; a consumer
// may hold any number of them (up to its prefetch), which go back to the head of the
// queue when its channel closes, or when the broker reaps a connection it lost.
type QueueCount struct {
	Ready, Consumers int
}

// Idle tells whether the queue was seen holding nothing: nothing ready, and no
// consumer that may hold deliveries not yet settled.
func (c QueueCount) Idle() bool { return c.Ready == 0 && c.Consumers == 0 }

// ReadyCounts returns the number of ready (not unacknowledged) messages of each
// queue on broker index. A queue that does not exist counts as 0; any other
// failure, a lost connection say, is an error.
func (p *Pool) ReadyCounts(ctx context.Context, index int, queues []string) (map[string]int, error) {
	counts, err := p.QueueCounts(ctx, index, queues)
	if err != nil {
		return nil, err
	}
	ready := make(map[string]int, len(counts))
	for q, c := range counts {
		ready[q] = c.Ready
	}
	return ready, nil
}

// QueueCounts returns the ready messages and the consumers of each queue on broker
// index, as ReadyCounts does the ready ones. A half-open connection's consumer stays
// counted until the broker reaps it, and its deliveries come back only then: "holds
// nothing" needs both counts at 0.
func (p *Pool) QueueCounts(ctx context.Context, index int, queues []string) (map[string]QueueCount, error) {
	ep, err := p.endpoint(index)
	if err != nil {
		return nil, err
	}
	chans := reopener{pool: p, index: index}
	defer chans.close()
	counts := make(map[string]QueueCount, len(queues))
	for _, q := range queues {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("count %s on %s: %w", q, ep, err)
		}
		ch, err := chans.get(ctx)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", q, err)
		}
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		switch {
		case err == nil:
			counts[q] = QueueCount{Ready: info.Messages, Consumers: info.Consumers}
		case isCode(err, amqp.NotFound):
			counts[q] = QueueCount{}
		default:
			return nil, fmt.Errorf("count %s on %s: %w", q, ep, err)
		}
	}
	return counts, nil
}
