package errorqueue

import (
	"context"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultListLimit is how many messages a list details unless asked otherwise; the
// counts cover them all.
const DefaultListLimit = 100

// QueueSummary is one -error queue of one broker as a list counts it.
type QueueSummary struct {
	Broker int    `json:"broker"`
	Queue  string `json:"queue"`
	// Held is how many messages the queue held when read; Matched how many the filter took.
	Held    int           `json:"held"`
	Matched int           `json:"matched"`
	Oldest  *time.Time    `json:"oldest,omitempty"`
	Newest  *time.Time    `json:"newest,omitempty"`
	Reasons []ReasonCount `json:"reasons"`
	// Error says why the queue could not be read (its broker unreachable, the queue not
	// declared); the other queues are listed all the same.
	Error string `json:"error,omitempty"`
}

// ReasonCount is how many matched messages have one kind of reason, with one of the
// reasons as an example.
type ReasonCount struct {
	Kind    string `json:"kind"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// Listing is what List found.
type Listing struct {
	Filter   string         `json:"filter"`
	Queues   []QueueSummary `json:"queues"`
	Messages []Message      `json:"messages"`
	// Matched counts the messages matched on every queue read; Truncated is true when
	// Messages holds fewer.
	Matched   int  `json:"matched"`
	Truncated bool `json:"truncated"`
}

// List reads the -error queues the filter selects, without taking anything: each
// message stays in its queue, in its place (see the package's comment). limit caps the
// messages detailed; 0 means DefaultListLimit. A broker that cannot be reached is named
// in its queues' Error and the others are listed.
func (s *Service) List(ctx context.Context, f Filter, limit int) (Listing, error) {
	if err := f.check(len(s.Brokers.Endpoints()), s.Queues); err != nil {
		return Listing{}, err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	out := Listing{Filter: f.String(), Queues: []QueueSummary{}, Messages: []Message{}}
	for _, index := range f.brokers(len(s.Brokers.Endpoints())) {
		for _, q := range f.queues(s.Queues) {
			sum := QueueSummary{Broker: index, Queue: q, Reasons: []ReasonCount{}}
			held, err := s.scan(ctx, index, q, func(ctx context.Context, _ amqp.Delivery, m *Message) (action, error) {
				if !f.matches(*m) {
					return keep, nil
				}
				if err := s.checkApplied(ctx, m); err != nil {
					return keep, err
				}
				sum.add(*m)
				out.Matched++
				if len(out.Messages) < limit {
					out.Messages = append(out.Messages, *m)
				} else {
					out.Truncated = true
				}
				return keep, nil
			}, nil, nil)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			sum.Held = held
			if err != nil {
				sum.Error = s.errorText(err)
			}
			out.Queues = append(out.Queues, sum)
		}
	}
	return out, nil
}

// add counts m in the summary.
func (q *QueueSummary) add(m Message) {
	q.Matched++
	if !m.ErrorAt.IsZero() {
		at := m.ErrorAt
		if q.Oldest == nil || at.Before(*q.Oldest) {
			q.Oldest = &at
		}
		if q.Newest == nil || at.After(*q.Newest) {
			q.Newest = &at
		}
	}
	i := slices.IndexFunc(q.Reasons, func(r ReasonCount) bool { return r.Kind == m.ReasonKind })
	if i < 0 {
		q.Reasons = append(q.Reasons, ReasonCount{Kind: m.ReasonKind, Example: m.Reason})
		i = len(q.Reasons) - 1
	}
	q.Reasons[i].Count++
}
