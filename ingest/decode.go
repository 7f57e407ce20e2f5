package ingest

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/segmentio/encoding/json"

	"github.com/brokerswitch/brokerswitch/broker"
)

// AMQP headers of the message contract.
const (
	// HeaderEvent is the webhook's event name, e.g. "pull_request"; required.
	HeaderEvent = "x-github-event"
	// HeaderDelivery is the delivery GUID, the ledger key; required.
	HeaderDelivery = "x-github-delivery"
	// headerHookID is the id of the webhook that sent the delivery; optional.
	headerHookID = "x-github-hook-id"
	// headerHookTargetID is the id of the resource the webhook is installed on; optional.
	headerHookTargetID = "x-github-hook-installation-target-id"
	// headerHookTargetType is the type of that resource; optional.
	headerHookTargetType = "x-github-hook-installation-target-type"
)

const (
	headerDeath         = "x-death"
	deathReasonRejected = "rejected"
	// deathReasonDeliveryLimit is a quorum queue's dead-lettering of a message delivered
	// x-delivery-limit times.
	deathReasonDeliveryLimit = "delivery_limit"
	maxDeliveryIDLength      = 255
	maxEventTypeLength       = 100
)

// ErrMalformed marks a delivery that can never be applied, whatever the database does:
// it is rejected to the -error queue instead of being retried.
var ErrMalformed = errors.New("malformed delivery")

// Event is a decoded delivery.
type Event struct {
	// DeliveryID is the x-github-delivery header: the ledger key.
	DeliveryID string
	// Type is the x-github-event header, e.g. "pull_request".
	Type string
	// Action is the payload's action; empty for events without one (push, create, delete).
	Action string
	// HookID, HookTargetID and HookTargetType are the optional x-github-hook-* headers.
	HookID, HookTargetID, HookTargetType string
	// Payload holds the stored fields of an event that has a table, nil for other events.
	Payload *payload
	// Sender is the payload's sender, nil when it has none.
	Sender *account
	// Deaths are the x-death entries RabbitMQ added on dead-lettering.
	Deaths []death
	// RecordedRetryCycles is broker.HeaderRetryCycles: the cycles counted when the
	// message was last sent to -error, 0 if it never was.
	RecordedRetryCycles int
}

// maxRetryCount is the largest retry count read from a header. A count the broker cannot
// have written (negative, or beyond this) reads as this: the message goes to -error on its
// next failure, instead of retrying forever or wrapping around.
const maxRetryCount = 1 << 20

// death is one x-death entry: how often the message died on Queue for Reason.
type death struct {
	// Queue is the queue the message was dead-lettered from.
	Queue string
	// Reason is RabbitMQ's reason, e.g. "rejected" or "expired".
	Reason string
	// Count is how many times that happened.
	Count int
}

// retryCycles counts the trips through queue's -retry sibling: each one starts with the
// consumer rejecting the message on queue, which RabbitMQ records as the x-death entry
// {queue: queue, reason: rejected}.
//
// The count is the larger of that entry and RecordedRetryCycles, our own header: RabbitMQ
// 4.x keeps x-death for its own dead-lettering but ignores one a client publishes, so a
// message an operator moved back from -error (a client publish) keeps its count only
// through our header. Such a message therefore goes straight back to -error if it fails
// once more: the operator moved it because the cause was fixed.
func (e Event) retryCycles(queue string) int {
	n := sane(e.RecordedRetryCycles)
	for _, d := range e.Deaths {
		if d.Queue == queue && d.Reason == deathReasonRejected {
			n = max(n, sane(d.Count))
			break
		}
	}
	return n
}

// deliveryLimited tells whether RabbitMQ dead-lettered the message for its quorum queue's
// delivery limit: it came back through -retry behind messages published after it.
func (e Event) deliveryLimited() bool {
	for _, d := range e.Deaths {
		if d.Reason == deathReasonDeliveryLimit {
			return true
		}
	}
	return false
}

// sane reads a count from a header: one the broker cannot have written counts as used up.
func sane(n int) int {
	if n < 0 || n > maxRetryCount {
		return maxRetryCount
	}
	return n
}

// Decode reads the headers and payload of a delivery. A delivery that cannot be applied
// returns an error wrapping ErrMalformed; the returned Event then still holds the headers
// that could be read, so the failure can be recorded under its delivery id. An event
// without a table is not malformed: only its action and sender are read.
//
// The body must be valid JSON throughout, but only the fields the tables store are
// decoded, into structs of our own: that is a third of the CPU of go-github's full types
// and most of the ingest's CPU. segmentio's decoder checks the whole document while it
// skips the fields it does not need, which the standard library's does too, but slower.
func Decode(d amqp.Delivery) (Event, error) {
	return decodeWithin(d, 0)
}

// decodeWithin is Decode, refusing a body larger than maxBody bytes (0: no limit) before
// reading it: such a message is malformed, with its headers read for the ledger.
func decodeWithin(d amqp.Delivery, maxBody int) (Event, error) {
	ev, err := readHeaders(d.Headers)
	if err != nil {
		return ev, err
	}
	if maxBody > 0 && len(d.Body) > maxBody {
		return ev, fmt.Errorf("%w: body of %d bytes is larger than the limit of %d bytes (MAX_MESSAGE_BYTES)",
			ErrMalformed, len(d.Body), maxBody)
	}
	err = readBody(&ev, d.Body)
	return ev, err
}

// readHeaders reads an event's headers. On an error wrapping ErrMalformed, the event
// holds those read before the one that failed.
func readHeaders(h amqp.Table) (Event, error) {
	var ev Event
	ev.Deaths = deaths(h)
	if n, ok := toInt(h[broker.HeaderRetryCycles]); ok {
		ev.RecordedRetryCycles = n
	}

	var err error
	if ev.DeliveryID, err = requiredHeader(h, HeaderDelivery); err != nil {
		return ev, err
	}
	if err := checkDeliveryID(ev.DeliveryID); err != nil {
		ev.DeliveryID = ""
		return ev, err
	}
	if ev.Type, err = requiredHeader(h, HeaderEvent); err != nil {
		return ev, err
	}
	if err := checkEventType(ev.Type); err != nil {
		ev.Type = ""
		return ev, err
	}
	ev.HookID = optionalHeader(h, headerHookID)
	ev.HookTargetID = optionalHeader(h, headerHookTargetID)
	ev.HookTargetType = optionalHeader(h, headerHookTargetType)
	return ev, nil
}

// readBody reads into ev, whose headers are read, what the body says: the payload its
// table stores, or, for an event without a table, its action and sender.
func readBody(ev *Event, body []byte) error {
	if err := checkShape(body); err != nil {
		return err
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		if !json.Valid(body) {
			return fmt.Errorf("%w: body is not valid JSON: %w", ErrMalformed, syntaxError(body))
		}
		return fmt.Errorf("%w: body is not a JSON object", ErrMalformed)
	}

	if appliers[ev.Type] == nil {
		// No table: read just enough to record it.
		var envelope struct {
			Action string   `json:"action"`
			Sender *account `json:"sender"`
		}
		if err := json.Unmarshal(body, &envelope); err != nil {
			return bodyError(err, body, "a webhook")
		}
		ev.Action, ev.Sender = envelope.Action, envelope.Sender
		return nil
	}

	p := new(payload)
	if err := json.Unmarshal(body, p); err != nil {
		return bodyError(err, body, "the "+ev.Type)
	}
	ev.Payload, ev.Action, ev.Sender = p, p.Action, p.Sender
	if err := validate(ev.Type, p); err != nil {
		return fmt.Errorf("%w: %s event: %w", ErrMalformed, ev.Type, err)
	}
	return nil
}

// bodyError tells invalid JSON apart from valid JSON of the wrong shape.
func bodyError(err error, body []byte, payload string) error {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		if described := syntaxError(body); described != nil {
			err = described
		}
		return fmt.Errorf("%w: body is not valid JSON: %w", ErrMalformed, err)
	}
	return fmt.Errorf("%w: body does not match %s payload: %w", ErrMalformed, payload, err)
}

// syntaxError describes where body stops being JSON, in the standard library's words
// (segmentio's name the error less clearly). Only malformed bodies pay for the second pass.
func syntaxError(body []byte) error {
	return stdjson.Unmarshal(body, new(stdjson.RawMessage))
}

// requiredHeader returns a header that must be a non-empty string. AMQP tables carry
// strings as either "S" (string) or "x" (byte array) depending on the publisher.
func requiredHeader(h amqp.Table, name string) (string, error) {
	raw, ok := h[name]
	if !ok || raw == nil {
		return "", fmt.Errorf("%w: missing header %s", ErrMalformed, name)
	}
	s, ok := headerString(raw)
	if !ok {
		return "", fmt.Errorf("%w: header %s is a %T, want a string", ErrMalformed, name, raw)
	}
	if s == "" {
		return "", fmt.Errorf("%w: empty header %s", ErrMalformed, name)
	}
	return s, nil
}

// optionalHeader returns a string header, or "" when it is absent or not a string.
func optionalHeader(h amqp.Table, name string) string {
	s, _ := headerString(h[name])
	if !utf8.ValidString(s) {
		return ""
	}
	return s
}

func headerString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	default:
		return "", false
	}
}

// checkDeliveryID keeps the ledger key printable and bounded: it is a primary key and
// appears in logs and in the -error queue.
func checkDeliveryID(id string) error {
	if len(id) > maxDeliveryIDLength {
		return fmt.Errorf("%w: header %s is longer than %d bytes", ErrMalformed, HeaderDelivery, maxDeliveryIDLength)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: header %s is not valid UTF-8", ErrMalformed, HeaderDelivery)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: header %s contains the non-printable character %q", ErrMalformed, HeaderDelivery, r)
		}
	}
	return nil
}

// checkEventType accepts GitHub's event names (lower case and underscores), so an event
// name can be used as-is in the ledger and in logs.
func checkEventType(t string) error {
	if len(t) > maxEventTypeLength {
		return fmt.Errorf("%w: header %s is longer than %d bytes", ErrMalformed, HeaderEvent, maxEventTypeLength)
	}
	for _, r := range t {
		if (r < 'a' || r > 'z') && r != '_' {
			return fmt.Errorf("%w: header %s %q is not a GitHub event name", ErrMalformed, HeaderEvent, t)
		}
	}
	return nil
}

// deaths reads RabbitMQ's x-death header. It is written by the broker, not the producer,
// so entries that do not parse are skipped rather than making the delivery malformed.
func deaths(h amqp.Table) []death {
	var entries []any
	switch v := h[headerDeath].(type) {
	case []any:
		entries = v
	case []amqp.Table:
		for _, t := range v {
			entries = append(entries, t)
		}
	default:
		return nil
	}
	out := make([]death, 0, len(entries))
	for _, e := range entries {
		var t amqp.Table
		switch e := e.(type) {
		case amqp.Table:
			t = e
		case map[string]any:
			t = e
		default:
			continue
		}
		queue, _ := headerString(t["queue"])
		reason, _ := headerString(t["reason"])
		count, ok := toInt(t["count"])
		if !ok {
			continue
		}
		out = append(out, death{Queue: queue, Reason: reason, Count: count})
	}
	return out
}

func toInt(v any) (int, bool) {
	switch v := v.(type) {
	case int64:
		return int(v), true
	case int32:
		return int(v), true
	case int:
		return v, true
	case int16:
		return int(v), true
	case int8:
		return int(v), true
	case uint8:
		return int(v), true
	case uint16:
		return int(v), true
	case uint32:
		return int(v), true
	case uint64:
		if v > math.MaxInt64 {
			return -1, true // no count the broker writes; sane() reads it as used up
		}
		return int(v), true
	default:
		return 0, false
	}
}
