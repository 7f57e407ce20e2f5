// Package quarantine takes poison out of a queue: a message that no consumer can take, its
// body over MAX_MESSAGE_BYTES or its headers past what amqp091-go reads, is moved to the
// queue's -error queue by a client that never holds its body nor decodes its headers,
// and the queue is read on behind it. A consumer meets it through three calls: Guard wraps
// the socket its AMQP client reads, Cut stops a batch before a body the guard left out,
// and Move moves the message that stopped the consumer.
package quarantine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
	"github.com/brokerswitch/brokerswitch/metrics"
)

var (
	// ErrOversize is wrapped into a consumer's error when a delivery's body was larger than
	// MAX_MESSAGE_BYTES: the guard left it out (see Guard, Cut).
	ErrOversize = errors.New("a message's body is larger than MAX_MESSAGE_BYTES")
	// ErrUnreadable is wrapped into a consumer's error when its connection was cut because
	// a message's content header could not be read by amqp091-go, which closes the whole
	// connection on a header table or array nested more than 32 deep or holding more than
	// 8,192 entries, or a frame over frame_max.
	ErrUnreadable = errors.New("a message's headers could not be read")
	// ErrMoved is wrapped, beside ErrOversize or ErrUnreadable, when the message that
	// stopped the consumer is in -error and gone from the head: the queue can be read on
	// at once. Without it, the message is still at the head.
	ErrMoved = errors.New("the message was moved to its -error queue")
)

// Headers of a copy in -error.
const (
	HeaderReason = "x-error-reason" // why it was moved
	HeaderAt     = "x-error-at"     // when, RFC 3339 UTC
	HeaderQueue  = "x-error-queue"  // the queue it was moved from
	HeaderCut    = "x-error-cut"    // what the copy left out to fit frame_max, if anything
)

// Quarantine is what the three calls share: a consumer pool's limit, mark and reports.
type Quarantine struct {
	// Limit is the largest body a consumer holds (MAX_MESSAGE_BYTES); 0 means no bound.
	Limit int
	// Mark marks a body the guard left out (NewMark): the same for Guard and Cut.
	Mark Mark
	// Metrics counts the moves; nil counts nothing.
	Metrics *metrics.Metrics
	// Logger logs each move; it must not be nil.
	Logger *slog.Logger
}

// Mark is the prefix of a stand-in body: random, so that no producer can forge it.
type Mark []byte

// NewMark returns a new random Mark.
func NewMark() Mark { return Mark("\x00brokerswitch-oversize-" + rand.Text() + ":") }

// Cut cuts batch before its first delivery whose body the guard left out, and returns
// that one's error, which wraps ErrOversize: the caller settles what comes before it, and
// stops.
func (q Quarantine) Cut(batch []amqp.Delivery) ([]amqp.Delivery, error) {
	m := q.Mark
	for i, d := range batch {
		if len(m) > 0 && len(d.Body) == len(m)+8 && bytes.HasPrefix(d.Body, m) {
			size := binary.BigEndian.Uint64(d.Body[len(m):])
			return batch[:i], fmt.Errorf("message %s: body of %d bytes: %w", d.MessageId, size, ErrOversize)
		}
	}
	return batch, nil
}

// Target is the queue whose consumer stopped, for Move.
type Target struct {
	Queue, ErrorQueue string
	// Broker names the broker in logs.
	Broker fmt.Stringer
	// Dial connects the client that moves the message to the queue's broker.
	Dial func(context.Context) (*rawamqp.Conn, error)
	// FrameMax is the frame_max the queue's consumers negotiate: a larger content header
	// frame is one amqp091-go refuses.
	FrameMax int
	// Prefetch is the consumer's: an unreadable message was at most that far behind the head.
	Prefetch int
	// Closed, when not nil, tells why the consumer's channel closed (amqp091-go's
	// NotifyClose): a shutdown of amqp091-go's own for a frame it could not parse.
	Closed <-chan *amqp.Error
}

// Move moves the message that stopped t's consumer with err to t.ErrorQueue when err says
// one did (a body Cut stopped at, or a connection amqp091-go cut over headers it could not
// read), and returns err, wrapping ErrMoved once the message is gone from the head: the
// consumer can start again at once. Any other err comes back as it is. The caller closes
// its channel first, which puts the message back at the head of the queue with what
// followed it. Only the message moves: what it scans ahead of an unreadable one goes back
// to the head, in order. The move is logged and counted, and not cut short by ctx's end.
func (q Quarantine) Move(ctx context.Context, t Target, err error) error {
	k := q.oversize()
	if !errors.Is(err, ErrOversize) {
		e := closedBy(t.Closed, err)
		if !unreadableClose(e) {
			return err
		}
		if !errors.Is(err, e) {
			err = fmt.Errorf("%w (channel closed: %w)", err, e)
		}
		k, err = q.unreadable(t), fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	ctx = context.WithoutCancel(ctx)
	m, merr := q.move(ctx, t, k.scan, k.poison)
	log := q.Logger.With("queue", t.Queue, "broker", t.Broker)
	switch {
	case merr != nil:
		k.count(q.Metrics, t.Queue, k.notMoved)
		log.ErrorContext(ctx, k.failed, "error", merr)
	case m.reason == "":
		k.count(q.Metrics, t.Queue, k.notMoved)
		log.ErrorContext(ctx, k.notFound, "scanned", k.scan)
	default:
		k.count(q.Metrics, t.Queue, k.moved)
		q.Metrics.Routed(t.Queue, metrics.RouteError)
		log.WarnContext(ctx, k.done, "message_id", m.id, "body_bytes", m.size, "reason", m.reason)
		return fmt.Errorf("%w: %w", err, ErrMoved)
	}
	return err
}

// kind is a kind of poison: how a move finds it, and how it is logged and counted.
type kind struct {
	// scan is how many deliveries at the head the move reads to find it; poison says why a
	// content header is the poison's, "" when it is not.
	scan   int
	poison func(header []byte) string
	count  func(m *metrics.Metrics, queue, outcome string)
	// moved and notMoved are count's outcomes; done, notFound and failed the log messages.
	moved, notMoved        string
	done, notFound, failed string
}

func (q Quarantine) oversize() kind {
	return kind{
		scan: 1,
		poison: func(header []byte) string {
			if size := bodySize(header); q.Limit > 0 && size > uint64(q.Limit) {
				return fmt.Sprintf("a body of %d bytes, over MAX_MESSAGE_BYTES (%d): moved unread", size, q.Limit)
			}
			return ""
		},
		count: (*metrics.Metrics).Oversize, moved: metrics.OversizeMoved, notMoved: metrics.OversizeNotMoved,
		done:     "message over MAX_MESSAGE_BYTES moved to -error unread",
		notFound: "a message over MAX_MESSAGE_BYTES was not at the head of its queue any more",
		failed:   "a message over MAX_MESSAGE_BYTES could not be moved to -error",
	}
}

// unreadable is the kind of a message that cut t's consumer: the move scans as many
// deliveries as the consumer could have had ahead of it, and it.
func (q Quarantine) unreadable(t Target) kind {
	return kind{
		scan: t.Prefetch + 1,
		poison: func(header []byte) string {
			if why := checkContentHeader(header, t.FrameMax); why != "" {
				return "unreadable: " + why
			}
			return ""
		},
		count: (*metrics.Metrics).Unreadable, moved: metrics.UnreadableMoved, notMoved: metrics.UnreadableNotFound,
		done:     "unreadable message moved to -error",
		notFound: "connection cut by an unreadable message, but none was found at the head of the queue",
		failed:   "connection cut by an unreadable message, which could not be moved to -error",
	}
}
