package errorqueue

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/models"
)

// ErrNotFound is wrapped into the error of a Show whose id is in no -error queue read.
var ErrNotFound = errors.New("no such message in the -error queues")

// Detail is one message of a -error queue in full, but for its body.
type Detail struct {
	Message
	Headers map[string]any `json:"headers"`
	// Body is the body's first bytes as text (up to the size asked for, at a character
	// boundary); BodyCut is true when there is more (Size says how much).
	Body    string `json:"body"`
	BodyCut bool   `json:"bodyCut"`
	// Ledger is the delivery's ledger row; nil when the ledger has none.
	Ledger *LedgerRow `json:"ledger"`
}

// LedgerRow is a delivery's row in github_deliveries, as Show gives it.
type LedgerRow struct {
	Outcome     string     `json:"outcome"`
	Event       string     `json:"event"`
	Action      string     `json:"action"`
	Queue       string     `json:"queue"`
	Broker      int        `json:"broker"`
	RetryCycles int        `json:"retryCycles"`
	ErrorReason string     `json:"errorReason,omitempty"`
	ReceivedAt  time.Time  `json:"receivedAt"`
	AppliedAt   *time.Time `json:"appliedAt,omitempty"`
}

func ledgerView(d *models.Delivery) *LedgerRow {
	if d == nil {
		return nil
	}
	return &LedgerRow{Outcome: string(d.Outcome), Event: d.Event, Action: d.Action, Queue: d.Queue, Broker: d.BrokerIndex,
		RetryCycles: d.RetryCycles, ErrorReason: d.ErrorReason, ReceivedAt: d.ReceivedAt, AppliedAt: d.AppliedAt}
}

// Shown is what Show found: every message with the id (a delivery may have failed
// twice) and the queues that could not be read.
type Shown struct {
	Messages []Detail `json:"messages"`
	// Unread names the queues that could not be read: the message may be there.
	Unread []string `json:"unread,omitempty"`
}

// Show finds the messages whose id (delivery id, else message id) is id, without taking
// anything, and shows each with its headers, its ledger row and at most bodyBytes of its
// body (0 means DefaultBodyBytes). The error wraps ErrNotFound when none is found.
func (s *Service) Show(ctx context.Context, id string, bodyBytes int) (Shown, error) {
	if id == "" {
		return Shown{}, fmt.Errorf("%w: no id given", ErrBadFilter)
	}
	if bodyBytes <= 0 {
		bodyBytes = DefaultBodyBytes
	}
	out := Shown{Messages: []Detail{}}
	f := Filter{ID: id}
	for _, index := range f.brokers(len(s.Brokers.Endpoints())) {
		for _, q := range s.Queues {
			_, err := s.scan(ctx, index, q, func(ctx context.Context, d amqp.Delivery, m *Message) (action, error) {
				if !f.matches(*m) {
					return keep, nil
				}
				row, err := s.ledgerRow(ctx, *m)
				if err != nil {
					return keep, err
				}
				m.AppliedSince = appliedSince(row, m.bodySHA)
				body, cut := cutBody(d.Body, bodyBytes)
				out.Messages = append(out.Messages, Detail{Message: *m, Headers: headerView(d.Headers), Body: body, BodyCut: cut, Ledger: ledgerView(row)})
				return keep, nil
			}, nil, nil)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			if err != nil {
				out.Unread = append(out.Unread, s.errorText(err))
			}
		}
	}
	if len(out.Messages) == 0 {
		return out, fmt.Errorf("%w: %q (read %d brokers' -error queues, %d could not be read)", ErrNotFound, id, len(s.Brokers.Endpoints()), len(out.Unread))
	}
	return out, nil
}

// cutBody is at most n bytes of body, cut at a character boundary.
func cutBody(body []byte, n int) (string, bool) {
	if len(body) <= n {
		return string(body), false
	}
	for n > 0 && !utf8.RuneStart(body[n]) {
		n--
	}
	return string(body[:n]), true
}

// headerView is an AMQP header table as JSON can show it: byte arrays as text, times as
// RFC 3339, nested tables and arrays likewise.
func headerView(t amqp.Table) map[string]any {
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = valueView(v)
	}
	return out
}

func valueView(v any) any {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339)
	case amqp.Table:
		return headerView(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = valueView(e)
		}
		return out
	case amqp.Decimal:
		return fmt.Sprintf("%de-%d", v.Value, v.Scale)
	}
	return v
}
