package broker

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ReadyCounts returns the number of ready (not unacknowledged) messages of each
// queue on broker index. A queue that does not exist counts as 0; any other
// failure, a lost connection say, is an error.
func (p *Pool) ReadyCounts(ctx context.Context, index int, queues []string) (map[string]int, error) {
	ep, err := p.endpoint(index)
	if err != nil {
		return nil, err
	}
	chans := reopener{pool: p, index: index}
	defer chans.close()
	counts := make(map[string]int, len(queues))
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
			counts[q] = info.Messages
		case isCode(err, amqp.NotFound):
			counts[q] = 0
		default:
			return nil, fmt.Errorf("count %s on %s: %w", q, ep, err)
		}
	}
	return counts, nil
}
