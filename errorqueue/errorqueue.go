// Package errorqueue is what an operator does with the {q}-error queues: list them
// without taking anything, show one message, requeue messages to their own queue on
// their own broker, and purge them. Nothing in brokerswitch reads -error otherwise.
//
// Reading a queue over AMQP 0-9-1 takes messages: a list gets each one with a manual
// acknowledgement and never acknowledges it, so that closing the channel gives them all
// back, in their order (classic queues put them back where they were; quorum queues give
// back a channel's messages in the order they were delivered). A quorum queue counts each
// such return as a delivery, and RabbitMQ 4.0 drops a message past a delivery limit of
// 20 unless the queue says otherwise (-error queues are declared without one, and have no
// dead-letter target): so a message seen with x-delivery-count at refreshAt or more is
// refreshed, copied to the tail of its -error queue with its headers and acknowledged once
// the broker confirmed the copy. Listing never gets a message near the limit.
package errorqueue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/ingest"
)

// refreshAt is the x-delivery-count at which a list refreshes a message of a quorum
// queue: half of RabbitMQ 4.0's default delivery limit of 20.
const refreshAt = 10

// DefaultBodyBytes is how much of a body Show returns unless asked otherwise.
const DefaultBodyBytes = 4096

// Channels opens channels on the configured brokers; *broker.Pool has it.
type Channels interface {
	Channel(ctx context.Context, index int) (*amqp.Channel, error)
	Endpoints() []broker.Endpoint
}

// Recorder counts what requeues and purges moved; *metrics.Metrics has it.
type Recorder interface {
	ErrorsRequeued(queue, reason string, n int)
	ErrorsPurged(queue, reason string, n int)
}

// Service reads and moves the messages of the -error queues of every configured broker.
type Service struct {
	// Brokers gives channels on each configured broker.
	Brokers Channels
	// DB is the database with the ledger (github_deliveries) and error_requeues.
	DB *gorm.DB
	// Queues are the logical queues; each has its {q}-error on every broker.
	Queues []string
	// Logger gets one line per requeue or purge run; nil means slog.Default().
	Logger *slog.Logger
	// Metrics counts requeued and purged messages; nil counts nothing.
	Metrics Recorder
	// afterMark, when set, runs between a copy's record in error_requeues and the take of
	// its original: a test's stand-in for a process killed there.
	afterMark func(Message) error
	// scans holds one scan at a time: two readers of one queue would each count the
	// other's unacknowledged messages as gone, and interleave the returns.
	scans sync.Mutex
}

// errorText is err's text for an answer, without any broker's credentials: the text of a
// failed dial may quote the broker's URL.
func (s *Service) errorText(err error) string {
	return broker.Redact(err.Error(), s.Brokers.Endpoints())
}

func (s *Service) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// Message is one message of a -error queue as a list shows it.
type Message struct {
	// ID is the delivery id (x-github-delivery), else the message id: what show and
	// requeue take. Two messages may share one (a delivery that failed twice).
	ID         string    `json:"id"`
	MessageID  string    `json:"messageId,omitempty"`
	Broker     int       `json:"broker"`
	Queue      string    `json:"queue"`
	Position   int       `json:"position"`
	Event      string    `json:"event,omitempty"`
	Action     string    `json:"action,omitempty"`
	Reason     string    `json:"reason"`
	ReasonKind string    `json:"reasonKind"`
	ErrorAt    time.Time `json:"errorAt,omitzero"`
	Size       int       `json:"size"`
	// AppliedSince is true when the ledger holds the delivery as applied (or ignored)
	// with this body: a later delivery of it got through, and it needs no requeue.
	AppliedSince bool `json:"appliedSince"`
	deliveryID   string
	key          []byte
	bodySHA      [32]byte
}

// describe reads what a list shows from d, found at position in {queue}-error.
func describe(d amqp.Delivery, index int, queue string, position int) Message {
	m := Message{
		MessageID:  d.MessageId,
		Broker:     index,
		Queue:      queue,
		Position:   position,
		Event:      headerString(d.Headers, ingest.HeaderEvent),
		Reason:     headerString(d.Headers, broker.HeaderErrorReason),
		Size:       len(d.Body),
		deliveryID: headerString(d.Headers, ingest.HeaderDelivery),
		bodySHA:    sha256.Sum256(d.Body),
	}
	m.ID = m.deliveryID
	if m.ID == "" {
		m.ID = m.MessageID
	}
	m.ReasonKind = classifyReason(m.Reason)
	if t, err := time.Parse(time.RFC3339, headerString(d.Headers, broker.HeaderErrorAt)); err == nil {
		m.ErrorAt = t
	}
	var payload struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(d.Body, &payload) == nil {
		m.Action = payload.Action
	}
	m.key = messageKey(index, queue, m, headerString(d.Headers, broker.HeaderErrorAt))
	return m
}

// messageKey names one message of a -error queue across runs: a message that fails
// again comes back with a new x-error-at, hence a new key.
func messageKey(index int, queue string, m Message, errorAt string) []byte {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(index)))
	for _, s := range []string{queue, m.deliveryID, m.MessageID, errorAt} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	h.Write(m.bodySHA[:])
	return h.Sum(nil)
}

func headerString(h amqp.Table, key string) string {
	switch v := h[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// reasonKinds are the kinds classifyReason gives, each with what its reasons contain; the
// first that matches wins.
var reasonKinds = []struct{ kind, marker string }{
	{"unreadable", "unreadable"},
	{"oversize", "MAX_MESSAGE_BYTES"},
	{"malformed", ingest.ErrMalformed.Error()},
	{"reused_id", "was taken before with another payload"},
	{"data", "Postgres cannot store this payload"},
	{"too_costly", "too costly to apply"},
	{"retries", "retry cycles"},
}

// ReasonKinds lists every kind classifyReason gives, "other" last.
func ReasonKinds() []string {
	out := make([]string, 0, len(reasonKinds)+1)
	for _, k := range reasonKinds {
		out = append(out, k.kind)
	}
	return append(out, "other")
}

// classifyReason sorts an x-error-reason into the few kinds metrics are labelled with.
func classifyReason(reason string) string {
	for _, k := range reasonKinds {
		if strings.Contains(reason, k.marker) {
			return k.kind
		}
	}
	return "other"
}
