package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// ErrOversize is wrapped into the error of Consume or Drain when a delivery's body was
// larger than Pool.MaxMessageBytes: the consumer let go of its channel so that the message
// could be moved to {q}-error (see moveOversize).
var ErrOversize = errors.New("a message's body is larger than MAX_MESSAGE_BYTES")

// ErrMovedToError is wrapped, beside ErrOversize or ErrUnreadable, into the error of
// Consume or Drain when the message that ended it is in {q}-error and gone from the head:
// the queue can be read on at once. Without it, the message is still at the head.
var ErrMovedToError = errors.New("the message was moved to its -error queue")

// oversizeError is what settler.handle returns on reaching a delivery whose body the
// guard left out.
type oversizeError struct {
	id   string
	size uint64
}

func (e *oversizeError) Error() string {
	return fmt.Sprintf("message %s: body of %d bytes: %v", e.id, e.size, ErrOversize)
}

func (e *oversizeError) Unwrap() error { return ErrOversize }

// newOversizeMark returns the prefix that marks a body the guard left out: random, so that
// no producer can forge it.
func newOversizeMark() []byte {
	return []byte("\x00brokerswitch-oversize-" + rand.Text() + ":")
}

// oversize tells whether d's body is the guard's stand-in, and the size of the body it
// stands for.
func (p *Pool) oversize(d amqp.Delivery) (uint64, bool) {
	if len(p.oversizeMark) == 0 || len(d.Body) != len(p.oversizeMark)+8 || !bytes.HasPrefix(d.Body, p.oversizeMark) {
		return 0, false
	}
	return binary.BigEndian.Uint64(d.Body[len(p.oversizeMark):]), true
}

// beforeOversize cuts batch before its first delivery whose body the guard left out, and
// returns that one's error.
func (p *Pool) beforeOversize(batch []amqp.Delivery) ([]amqp.Delivery, error) {
	for i, d := range batch {
		if size, ok := p.oversize(d); ok {
			return batch[:i], &oversizeError{id: d.MessageId, size: size}
		}
	}
	return batch, nil
}

// afterOversize is what Consume and Drain do when they reached a delivery whose body the
// guard left out: they close their channel, which puts it back at the head of the queue
// with what came after it, and it is moved to {q}-error by a client that streams its body
// through, frame by frame, instead of holding it. It returns the error they return, op ("consume", "drain") naming which.
func (p *Pool) afterOversize(ctx context.Context, ep Endpoint, ch *amqp.Channel, op, queue string, cause error) error {
	ctx = context.WithoutCancel(ctx)
	_ = ch.Close()
	id, size, err := p.moveOversize(ctx, ep, queue)
	switch {
	case err != nil:
		p.Metrics.Oversize(queue, metrics.OversizeNotMoved)
		p.logger.ErrorContext(ctx, "a message over MAX_MESSAGE_BYTES could not be moved to -error",
			"queue", queue, "broker", ep, "error", err)
	case size == 0:
		p.Metrics.Oversize(queue, metrics.OversizeNotMoved)
		p.logger.ErrorContext(ctx, "a message over MAX_MESSAGE_BYTES was not at the head of its queue any more",
			"queue", queue, "broker", ep)
	default:
		p.Metrics.Oversize(queue, metrics.OversizeMoved)
		p.Metrics.Routed(queue, metrics.RouteError)
		p.logger.WarnContext(ctx, "message over MAX_MESSAGE_BYTES moved to -error unread", "queue", queue, "broker", ep,
			"message_id", id, "body_bytes", size, "max_message_bytes", p.MaxMessageBytes)
		return fmt.Errorf("%s %s on %s: %w: %w", op, queue, ep, cause, ErrMovedToError)
	}
	return fmt.Errorf("%s %s on %s: %w", op, queue, ep, cause)
}

// moveOversize consumes queue exclusively on a raw connection with a prefetch of one and,
// when the delivery at its head has a body over Pool.MaxMessageBytes, copies it to
// {q}-error with the reason, passing each body frame on as it arrives, and acknowledges
// it, in one transaction. It returns the message id and the body's size, or 0 when the
// head was not such a message (it goes back when the connection closes).
func (p *Pool) moveOversize(ctx context.Context, ep Endpoint, queue string) (id string, size uint64, err error) {
	c, err := consumeRaw(ctx, ep, queue, 1, p.rawHeaderLimit(), ErrorQueue(queue))
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	_ = c.conn.SetReadDeadline(time.Now().Add(unreadableIdle))
	tag, header, err := c.nextHeader()
	if err != nil {
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			return "", 0, nil
		}
		return "", 0, fmt.Errorf("read %s: %w", queue, err)
	}
	size = binary.BigEndian.Uint64(header[4:])
	if size <= uint64(p.MaxMessageBytes) {
		return "", 0, nil
	}
	reason := fmt.Sprintf("a body of %d bytes, over MAX_MESSAGE_BYTES (%d): moved unread", size, p.MaxMessageBytes)
	if id, err = c.moveHead(queue, tag, header, reason); err != nil {
		return id, 0, err
	}
	return id, size, nil
}

// guardBuffer is the read buffer of a guarded connection: bodies are left out through
// it in pieces of this size.
const guardBuffer = 64 << 10

// guardConn is a consumer connection's socket as amqp091-go reads it. The library holds
// every prefetched delivery whole, however large (RabbitMQ refuses a body only over its
// max_message_size: 16 MiB by default on 4.x, 128 MiB on 3.x, and a shared plan may not
// let it be changed), so without a bound of ours a consumer could hold any of them. The guard
// reads the frames as they pass and, for a delivery whose content header announces a body
// over limit, hands the library a stand-in body (mark and the real size) and reads the
// real one past, discarding it: no consumer ever holds a body over limit. It never waits
// on anything but the socket, so it cannot stall the replies that follow a body.
type guardConn struct {
	net.Conn
	r     *bufio.Reader
	limit uint64
	mark  []byte

	// pending are bytes for the library: a frame's first bytes, as read or rewritten.
	pending []byte
	// pass is how much of the current frame is still to be passed on, end octet included;
	// then comes inject, the stand-in body frame of an oversize delivery, if any.
	pass   int
	inject []byte
	// deliver tells, by channel, that the last method was a basic.deliver: its content
	// header comes next. skip is, by channel, the body bytes still to discard.
	deliver map[uint16]bool
	skip    map[uint16]uint64

	// window is how long the library lets a read wait (its heartbeat deadline): a body
	// being discarded keeps the deadline that far ahead of each piece, as the frames
	// handed to the library would.
	mu     sync.Mutex
	window time.Duration
}

func newGuardConn(conn net.Conn, limit int, mark []byte) *guardConn {
	return &guardConn{Conn: conn, r: bufio.NewReaderSize(conn, guardBuffer), limit: uint64(limit), mark: mark,
		deliver: map[uint16]bool{}, skip: map[uint16]uint64{}}
}

// SetReadDeadline records the library's heartbeat window.
func (g *guardConn) SetReadDeadline(t time.Time) error {
	g.track(t)
	return g.Conn.SetReadDeadline(t)
}

// SetDeadline records the read side as SetReadDeadline does.
func (g *guardConn) SetDeadline(t time.Time) error {
	g.track(t)
	return g.Conn.SetDeadline(t)
}

func (g *guardConn) track(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.window = 0
	if !t.IsZero() {
		g.window = time.Until(t)
	}
}

// Read hands the library the frames as rewritten.
func (g *guardConn) Read(p []byte) (int, error) {
	for {
		switch {
		case len(g.pending) > 0:
			n := copy(p, g.pending)
			g.pending = g.pending[n:]
			return n, nil
		case g.pass > 0:
			n, err := g.r.Read(p[:min(len(p), g.pass)])
			g.pass -= n
			return n, err
		case g.inject != nil:
			g.pending, g.inject = g.inject, nil
		default:
			if err := g.nextFrame(); err != nil {
				return 0, err
			}
		}
	}
}

// nextFrame reads the next frame's header (and the first bytes of a method or content
// header) and decides what the library gets of it.
func (g *guardConn) nextFrame() error {
	h, err := g.r.Peek(7)
	if err != nil {
		return err
	}
	typ, channel, size := h[0], binary.BigEndian.Uint16(h[1:]), int(binary.BigEndian.Uint32(h[3:]))
	switch {
	case typ == rawFrameBody && g.skip[channel] > 0:
		return g.discard(channel, size)
	case typ == rawFrameMethod && size >= 4:
		b, err := g.r.Peek(11)
		if err != nil {
			return err
		}
		g.deliver[channel] = binary.BigEndian.Uint32(b[7:]) == mBasicDeliver
	case typ == rawFrameHeader && size >= 12 && g.deliver[channel]:
		g.deliver[channel] = false
		b, err := g.r.Peek(19)
		if err != nil {
			return err
		}
		if body := binary.BigEndian.Uint64(b[11:]); body > g.limit {
			frame := append([]byte(nil), b...)
			stand := binary.BigEndian.AppendUint64(append([]byte(nil), g.mark...), body)
			binary.BigEndian.PutUint64(frame[11:], uint64(len(stand)))
			if _, err := g.r.Discard(len(frame)); err != nil {
				return err
			}
			g.pending, g.pass, g.skip[channel] = frame, size-12+1, body
			g.inject = binary.BigEndian.AppendUint32(append([]byte{rawFrameBody}, byte(channel>>8), byte(channel)), uint32(len(stand)))
			g.inject = append(append(g.inject, stand...), rawFrameEnd)
			return nil
		}
	}
	g.pass = 7 + size + 1
	return nil
}

// discard reads a body frame of an oversize delivery past.
func (g *guardConn) discard(channel uint16, size int) error {
	for left := 7 + size + 1; left > 0; {
		n, err := g.r.Discard(min(left, guardBuffer))
		left -= n
		if err != nil {
			return err
		}
		g.mu.Lock()
		window := g.window
		g.mu.Unlock()
		if window > 0 {
			if err := g.Conn.SetReadDeadline(time.Now().Add(window)); err != nil {
				return err
			}
		}
	}
	g.skip[channel] -= min(g.skip[channel], uint64(size))
	return nil
}

// nextHeader reads methods until a basic.deliver, and its content header frame, leaving
// the body unread: it returns the delivery tag and the header frame's payload.
func (c *rawConn) nextHeader() (uint64, []byte, error) {
	for {
		typ, p, err := c.readFrame()
		if err != nil {
			return 0, nil, err
		}
		if typ != rawFrameMethod || len(p) < 4 {
			return 0, nil, fmt.Errorf("frame of type %d where a method was due", typ)
		}
		switch id, args := binary.BigEndian.Uint32(p), p[4:]; id {
		case mConnClose, mChanClose:
			return 0, nil, closeError(id, args)
		case mBasicDeliver:
			r := rawReader{b: args}
			r.shortstr() // consumer tag
			tag := r.u64()
			if r.err != nil {
				return 0, nil, r.err
			}
			typ, header, err := c.readFrame()
			if err != nil {
				return 0, nil, err
			}
			if typ != rawFrameHeader || len(header) < 14 {
				return 0, nil, fmt.Errorf("frame of type %d where a content header was due", typ)
			}
			return tag, header, nil
		}
	}
}

// publishHeader sends the method and content header of a mandatory message to queue
// through the default exchange; its body frames follow.
func (c *rawConn) publishHeader(queue string, header []byte) error {
	var w rawWriter
	w.u16(0)
	w.shortstr("")
	w.shortstr(queue)
	w.u8(1) // mandatory
	if err := c.method(rawChannel, mBasicPublish, w.b.Bytes()); err != nil {
		return err
	}
	return c.frame(rawFrameHeader, rawChannel, header)
}
