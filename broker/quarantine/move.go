package quarantine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
)

const (
	// idle is how long a move waits for the next delivery before it takes the queue's
	// ready head to be all read.
	idle = 2 * time.Second
	// busy bounds the wait for the stopped consumer to be gone from the queue (its
	// exclusive consume is released once the broker has seen its channel close).
	busy = 10 * time.Second
)

// moved is the message a move moved: reason is "" when it found none.
type moved struct {
	id, reason string
	size       uint64
}

// move consumes t.Queue exclusively on a raw connection, at most scan deliveries, and
// copies the first that poison gives a reason for to t.ErrorQueue, with the reason, and
// acknowledges it, in one transaction. It holds one content header at a time and no body:
// the bodies of the others are read past, and the moved message's body is passed on frame
// by frame. Every other delivery goes back to the head, in order, when the connection
// closes.
func (q Quarantine) move(ctx context.Context, t Target, scan int, poison func(header []byte) string) (moved, error) {
	c, err := q.consume(ctx, t, scan)
	if err != nil {
		return moved{}, err
	}
	defer c.Close()
	for range scan {
		_ = c.SetReadDeadline(time.Now().Add(idle))
		tag, header, err := c.Next()
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			return moved{}, nil
		}
		if err != nil {
			return moved{}, fmt.Errorf("read %s: %w", t.Queue, err)
		}
		m := moved{size: bodySize(header), reason: poison(header)}
		if m.reason != "" {
			m.id, err = moveHead(c, t, tag, header, m.reason)
			if err != nil {
				return moved{}, err
			}
			return m, nil
		}
		if err := c.Body(m.size, nil); err != nil {
			return moved{}, fmt.Errorf("read %s: %w", t.Queue, err)
		}
	}
	return moved{}, nil
}

// consume dials t's broker and consumes t.Queue exclusively with prefetch, once it saw
// that t.ErrorQueue exists: a move that cannot be made takes no delivery. While the
// stopped consumer's place is not free yet (403), it tries again.
func (q Quarantine) consume(ctx context.Context, t Target, prefetch int) (*rawamqp.Conn, error) {
	deadline := time.Now().Add(busy)
	for {
		c, err := t.Dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", t.Broker, err)
		}
		// A move holds no more than a consumer's delivery would.
		c.HeaderLimit = q.Limit
		if err := c.DeclarePassive(t.ErrorQueue); err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", t.ErrorQueue, err)
		}
		err = c.Consume(t.Queue, "brokerswitch-unreadable-"+rand.Text()[:12], prefetch)
		if err == nil {
			return c, nil
		}
		c.Close()
		var e *amqp.Error
		if !errors.As(err, &e) || e.Code != amqp.AccessRefused || time.Now().After(deadline) {
			return nil, fmt.Errorf("consume %s: %w", t.Queue, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// moveHead copies the delivery tag, whose content header was just read and whose body
// comes next, to t.ErrorQueue with reason, passing its body on frame by frame, and
// acknowledges it in the same transaction. It returns the message id.
func moveHead(c *rawamqp.Conn, t Target, tag uint64, header []byte, reason string) (string, error) {
	copied, id := errorCopy(header, reason, t.Queue, c.FrameMax())
	body, err := c.Publish(t.ErrorQueue, copied)
	if err != nil {
		return id, fmt.Errorf("copy to %s: %w", t.ErrorQueue, err)
	}
	if err := c.Body(bodySize(header), body); err != nil {
		return id, fmt.Errorf("move %s to %s: %w", t.Queue, t.ErrorQueue, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := c.AckAlone(tag); err != nil {
		return id, fmt.Errorf("commit the move to %s: %w", t.ErrorQueue, err)
	}
	return id, nil
}

// bodySize is the body size a content header frame's payload announces.
func bodySize(header []byte) uint64 { return binary.BigEndian.Uint64(header[4:]) }

// closedBy is the reason the channel closed under a call that failed with err because of
// it, or nil. amqp091-go notifies close listeners before a call on the closed channel
// fails, so the reason is there already.
func closedBy(closed <-chan *amqp.Error, err error) *amqp.Error {
	if e := (*amqp.Error)(nil); errors.As(err, &e) && e.Code != amqp.ChannelError {
		return e
	}
	if !errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	select {
	case e := <-closed:
		return e
	default:
		return nil
	}
}

// unreadableClose tells whether e is amqp091-go's own shutdown of a connection for a frame
// it could not parse, rather than a network error or a close by the broker. The library
// reports both with code 501; only the parse errors carry these reasons.
func unreadableClose(e *amqp.Error) bool {
	if e == nil || e.Server {
		return false
	}
	for _, known := range []*amqp.Error{amqp.ErrSyntax, amqp.ErrFrame, amqp.ErrFrameTooLarge} {
		if strings.Contains(e.Reason, known.Reason) {
			return true
		}
	}
	return false
}
