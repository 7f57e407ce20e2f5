package broker

import (
	"context"
	"time"

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

// Returned tells a message of queue that came back from {q}-retry or that an operator
// moved back from {q}-error: such a message was published before it failed here, so it is
// never the producer's future. It trusts only what the broker writes when it dead-letters
// a message rejected from queue, or expired out of its -retry sibling back into it (an
// x-death entry {queue: queue, reason: rejected} or {queue: queue-retry, reason: expired},
// which RabbitMQ 4.x never takes from a client), or the whole set of stamps a copy to {q}-error
// carries, for this queue: HeaderErrorQueue naming it, HeaderErrorAt a time in the past,
// HeaderErrorReason and HeaderRetryCycles. A producer's header alone (a retry count of its
// own, say) does not make a new message returned. On RabbitMQ 3.x a client can still
// publish a forged x-death.
func Returned(d amqp.Delivery, queue string) bool {
	return deadLetteredFrom(d.Headers, queue) || stampedFor(d.Headers, queue, time.Now())
}

// deadLetteredFrom tells whether headers hold the x-death entry of a rejection from queue.
func deadLetteredFrom(h amqp.Table, queue string) bool {
	var entries []amqp.Table
	switch v := h["x-death"].(type) {
	case []any:
		for _, e := range v {
			if t, ok := e.(amqp.Table); ok {
				entries = append(entries, t)
			}
		}
	case []amqp.Table:
		entries = v
	}
	for _, e := range entries {
		switch {
		case e["queue"] == queue && e["reason"] == "rejected":
			return true
		case e["queue"] == RetryQueue(queue) && e["reason"] == "expired":
			// Back from {q}-retry after RETRY_TTL: the broker's own record of the return.
			return true
		}
	}
	return false
}

// stampedFor tells whether headers hold the stamps of a copy rejected from queue to
// {q}-error before now.
func stampedFor(h amqp.Table, queue string, now time.Time) bool {
	if q, _ := h[HeaderErrorQueue].(string); q != queue {
		return false
	}
	if r, _ := h[HeaderErrorReason].(string); r == "" {
		return false
	}
	at, _ := h[HeaderErrorAt].(string)
	t, err := time.Parse(time.RFC3339, at)
	if err != nil || t.After(now) {
		return false
	}
	switch h[HeaderRetryCycles].(type) {
	case int64, int32, int16, int8, int:
		return true
	}
	return false
}
