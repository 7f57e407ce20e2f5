package broker

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Outcome says what the consumer does with one delivery once its batch is handled.
type Outcome int

const (
	// Ack acknowledges the delivery: it was applied, ignored or is a known duplicate.
	Ack Outcome = iota
	// Retry rejects the delivery without requeue, so it dead-letters to {q}-retry
	// and comes back after RETRY_TTL.
	Retry
	// Reject publishes the delivery to {q}-error with its reason, then acknowledges it.
	Reject
)

// Verdict is the outcome for one delivery, with the reason for Retry and Reject.
type Verdict struct {
	Outcome Outcome
	Reason  string
	// RetryCycles, for Reject, is the count of retry cycles the message went through; the
	// -error copy carries it in HeaderRetryCycles.
	RetryCycles int
}

// HeaderRetryCycles carries a rejected message's retry cycles on its -error copy. RabbitMQ
// 4.x ignores an x-death header that a client publishes, so a message an operator moves
// back from -error would otherwise start counting from zero; consumers count the larger
// of the broker's x-death and this. Not an x- header: those belong to the broker.
const HeaderRetryCycles = "brokerswitch-retry-cycles"

// BatchHandler handles deliveries in queue order and returns one verdict per delivery.
// A returned error means nothing could be decided (the database is unreachable, say):
// no delivery of the batch is settled and the consumer stops, so the unacknowledged
// messages return to the head of the queue.
type BatchHandler interface {
	HandleBatch(ctx context.Context, queue string, deliveries []amqp.Delivery) ([]Verdict, error)
}

// Returned tells a message that came back to its queue from {q}-retry (the broker's
// x-death) or that an operator moved back from {q}-error (the headers a Reject stamps):
// such a message was published before it failed here, so it is never the producer's
// future.
func Returned(d amqp.Delivery) bool {
	for _, h := range []string{"x-death", HeaderRetryCycles, HeaderErrorReason} {
		if _, ok := d.Headers[h]; ok {
			return true
		}
	}
	return false
}
