package broker

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BatchHandlerFunc adapts a function to BatchHandler.
type BatchHandlerFunc func(ctx context.Context, queue string, deliveries []amqp.Delivery) ([]Verdict, error)

// HandleBatch calls f.
func (f BatchHandlerFunc) HandleBatch(ctx context.Context, queue string, deliveries []amqp.Delivery) ([]Verdict, error) {
	return f(ctx, queue, deliveries)
}
