package rawamqp

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQP methods the client uses, as class<<16 | method. The answer to each that has one,
// and to connection.start and connection.tune, is the next method of its class.
const (
	connStart    = 10<<16 | 10
	connTune     = 10<<16 | 30
	connOpen     = 10<<16 | 40
	connClose    = 10<<16 | 50
	chanOpen     = 20<<16 | 10
	chanClose    = 20<<16 | 40
	queueDeclare = 50<<16 | 10
	basicQos     = 60<<16 | 10
	basicConsume = 60<<16 | 20
	basicCancel  = 60<<16 | 30
	basicPublish = 60<<16 | 40
	basicReturn  = 60<<16 | 50
	basicAck     = 60<<16 | 80
	txSelect     = 90<<16 | 10
	txCommit     = 90<<16 | 20
)

const (
	// channel is the one channel the client speaks on.
	channel = 1
	// maxHeader bounds a content header frame the client reads: a header frame over the
	// broker's own frame_max is what it is there to read, but not without a limit.
	maxHeader = 64 << 20
	// maxFrame is the frame_max the client asks for, or less when the broker offers less:
	// it bounds every other frame it reads.
	maxFrame = 128 << 10
	// frameTimeout bounds the wait for each frame of a body, which the client reads from
	// end to end.
	frameTimeout = 15 * time.Second
	// closeTimeout bounds Close on a broker that no longer answers.
	closeTimeout = 5 * time.Second
)

// Conn is a connection that speaks on one channel, without heartbeats, and lives for
// seconds. It holds at once one content header (at most HeaderLimit) and one frame (at
// most the negotiated frame_max).
type Conn struct {
	conn     net.Conn
	r        Reader
	frameMax int
	// HeaderLimit bounds the content header frames it reads, a larger one being an error;
	// 0 means 64 MiB, which is also the most.
	HeaderLimit int
	tag         string // the consumer's, once Consume started it
}

// Dial logs in to uri's broker over the socket dial opens, as amqp091-go would (with the
// first of the URL's auth_mechanism it speaks, PLAIN or EXTERNAL, PLAIN when it names
// none), and opens the channel, within ctx.
func Dial(ctx context.Context, uri amqp.URI, dial func(context.Context) (net.Conn, error)) (*Conn, error) {
	if _, _, err := auth(uri); err != nil {
		return nil, err
	}
	nc, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	c := &Conn{conn: nc, r: NewReader(nc, 4096), frameMax: maxFrame}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	if err := c.open(uri); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// auth is the SASL mechanism and response the client logs in with. AMQPLAIN is refused,
// naming the parameter.
func auth(uri amqp.URI) (mechanism, response string, err error) {
	if len(uri.AuthMechanism) == 0 {
		return "PLAIN", "\x00" + uri.Username + "\x00" + uri.Password, nil
	}
	for _, m := range uri.AuthMechanism {
		switch strings.ToLower(strings.TrimSpace(m)) {
		case "plain":
			return "PLAIN", "\x00" + uri.Username + "\x00" + uri.Password, nil
		case "external":
			return "EXTERNAL", "", nil
		}
	}
	return "", "", errors.New("the broker URL's auth_mechanism names neither plain nor external, the mechanisms the client that moves messages to -error speaks")
}

func (c *Conn) open(uri amqp.URI) error {
	if _, err := c.conn.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	if _, err := c.expect(connStart); err != nil {
		return err
	}
	mechanism, response, _ := auth(uri)
	if err := c.method(0, connStart+1, args{}.table(nil).shortstr(mechanism).longstr(response).shortstr("en_US")); err != nil {
		return err
	}
	tune, err := c.expect(connTune)
	if err != nil {
		return err
	}
	if len(tune) < 8 {
		return errors.New("connection.tune too short")
	}
	channelMax, frameMax := binary.BigEndian.Uint16(tune), binary.BigEndian.Uint32(tune[2:])
	if uri.ChannelMax > 0 && (channelMax == 0 || uri.ChannelMax < channelMax) {
		channelMax = uri.ChannelMax
	}
	if frameMax == 0 || frameMax > maxFrame {
		frameMax = maxFrame
	}
	c.frameMax = int(frameMax)
	// No heartbeats, whatever the URL's heartbeat: the connection lives for seconds, and
	// every read it makes has a deadline of its own.
	if err := c.method(0, connTune+1, args{}.u16(channelMax).u32(frameMax).u16(0)); err != nil {
		return err
	}
	if err := c.call(0, connOpen, args{}.shortstr(uri.Vhost).shortstr("").u8(0)); err != nil {
		return err
	}
	return c.call(channel, chanOpen, args{}.shortstr(""))
}

// Close closes the connection; the broker puts back every delivery not acknowledged.
func (c *Conn) Close() error {
	_ = c.conn.SetDeadline(time.Now().Add(closeTimeout))
	_ = c.call(0, connClose, args{}.u16(200).shortstr("").u16(0).u16(0))
	return c.conn.Close()
}

// SetReadDeadline bounds the reads to come, as net.Conn's does.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// FrameMax is the frame_max the connection negotiated.
func (c *Conn) FrameMax() int { return c.frameMax }

// DeclarePassive fails when queue does not exist.
func (c *Conn) DeclarePassive(queue string) error {
	return c.call(channel, queueDeclare, args{}.u16(0).shortstr(queue).u8(1).table(nil)) // passive
}

// Consume sets the channel's prefetch to prefetch and consumes queue exclusively, with
// manual acks, in a transaction.
func (c *Conn) Consume(queue, tag string, prefetch int) error {
	if err := c.call(channel, txSelect, nil); err != nil {
		return fmt.Errorf("tx.select: %w", err)
	}
	if err := c.call(channel, basicQos, args{}.u32(0).u16(uint16(prefetch)).u8(0)); err != nil {
		return fmt.Errorf("basic.qos: %w", err)
	}
	// Exclusive; not no-local, not no-ack, not no-wait.
	if err := c.call(channel, basicConsume, args{}.u16(0).shortstr(queue).shortstr(tag).u8(4).table(nil)); err != nil {
		return fmt.Errorf("basic.consume: %w", err)
	}
	c.tag = tag
	return nil
}

// Next reads methods until a delivery, and its content header frame, leaving the body
// unread: it returns the delivery tag and the header frame's payload.
func (c *Conn) Next() (tag uint64, header []byte, err error) {
	for {
		id, a, err := c.nextMethod()
		if err != nil {
			return 0, nil, err
		}
		if id != BasicDeliver {
			continue
		}
		if len(a) < 1 || len(a) < 1+int(a[0])+8 {
			return 0, nil, errors.New("basic.deliver too short")
		}
		tag = binary.BigEndian.Uint64(a[1+int(a[0]):]) // after the consumer tag
		f, header, err := c.frame()
		if err != nil {
			return 0, nil, err
		}
		if f.Type != FrameHeader || len(header) < 14 {
			return 0, nil, fmt.Errorf("frame of type %d where a content header was due", f.Type)
		}
		return tag, header, nil
	}
}

// Body reads a body of size bytes, whose content header Next returned, frame by frame,
// and writes each frame's payload to w; a nil w reads it past, holding none of it.
func (c *Conn) Body(size uint64, w io.Writer) error {
	for size > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(frameTimeout))
		f, err := c.r.Next()
		if err != nil {
			return fmt.Errorf("read the body: %w", err)
		}
		if f.Type != FrameBody || uint64(f.Size) > size || (w != nil && f.Size > c.frameMax) {
			return fmt.Errorf("frame of type %d and %d bytes where %d bytes of body were due", f.Type, f.Size, size)
		}
		if w == nil {
			err = c.r.Skip(f)
		} else {
			var p []byte
			if p, err = c.r.Payload(f); err == nil {
				_, err = w.Write(p)
			}
		}
		if err != nil {
			return fmt.Errorf("pass the body on: %w", err)
		}
		size -= uint64(f.Size)
	}
	return nil
}

// Publish sends the method and content header of a mandatory message to queue through the
// default exchange, and returns the writer of its body: each write is a body frame of its
// own, of at most the negotiated frame_max.
func (c *Conn) Publish(queue string, header []byte) (io.Writer, error) {
	if err := c.method(channel, basicPublish, args{}.u16(0).shortstr("").shortstr(queue).u8(1)); err != nil { // mandatory
		return nil, err
	}
	return bodyWriter{c}, c.frameOut(FrameHeader, channel, header)
}

type bodyWriter struct{ c *Conn }

func (w bodyWriter) Write(p []byte) (int, error) {
	if err := w.c.frameOut(FrameBody, channel, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// AckAlone ends a move: it cancels the consumer, then acknowledges tag and commits, in the
// channel's transaction with what was published before. Cancelled first, the consumer
// gets nothing when the commit frees its prefetch: a message delivered to a connection
// about to close would be neither ready nor settled until the broker put it back, and a
// drain just ended could read its queue as emptier than it is.
func (c *Conn) AckAlone(tag uint64) error {
	if err := c.call(channel, basicCancel, args{}.shortstr(c.tag).u8(0)); err != nil {
		return fmt.Errorf("basic.cancel: %w", err)
	}
	if err := c.method(channel, basicAck, args{}.u64(tag).u8(0)); err != nil { // not multiple
		return fmt.Errorf("basic.ack: %w", err)
	}
	if err := c.call(channel, txCommit, nil); err != nil {
		return fmt.Errorf("tx.commit: %w", err)
	}
	return nil
}

// call sends a method on channel ch and waits for its answer.
func (c *Conn) call(ch uint16, id uint32, a args) error {
	if err := c.method(ch, id, a); err != nil {
		return err
	}
	_, err := c.expect(id + 1)
	return err
}

// expect reads methods until id comes. A delivery that comes meanwhile is read past and
// not kept (the connection's close puts it back); one that comes before basic.consume-ok,
// ahead of the deliveries the caller reads, is an error: the caller would miss it.
func (c *Conn) expect(id uint32) ([]byte, error) {
	for {
		got, a, err := c.nextMethod()
		switch {
		case err != nil:
			return nil, err
		case got == id:
			return a, nil
		case got == basicReturn:
			return nil, errors.New("the broker returned the copy: no queue took it")
		case got == BasicDeliver && id == basicConsume+1:
			return nil, errors.New("a delivery came before basic.consume-ok")
		case got == BasicDeliver:
			if err := c.skipContent(); err != nil {
				return nil, err
			}
		}
	}
}

// nextMethod reads the next frame, which must be a method, and returns its id and
// arguments; a close by the broker is an error.
func (c *Conn) nextMethod() (uint32, []byte, error) {
	f, p, err := c.frame()
	if err != nil {
		return 0, nil, err
	}
	id := MethodID(p)
	if f.Type != FrameMethod || id == 0 {
		return 0, nil, fmt.Errorf("frame of type %d where a method was due", f.Type)
	}
	if id == connClose || id == chanClose {
		e := &amqp.Error{Server: true}
		if a := p[4:]; len(a) >= 3 && len(a) >= 3+int(a[2]) { // reply-code, reply-text
			e.Code, e.Reason = int(binary.BigEndian.Uint16(a)), string(a[3:3+int(a[2])])
		}
		what := "connection"
		if id == chanClose {
			what = "channel"
		}
		return 0, nil, fmt.Errorf("%s closed by the broker: %w", what, e)
	}
	return id, p[4:], nil
}

// frame reads the next frame that is not a heartbeat, whole: a content header frame of at
// most HeaderLimit bytes, any other of at most the negotiated frame_max.
func (c *Conn) frame() (Frame, []byte, error) {
	for {
		f, err := c.r.Next()
		if err != nil {
			return f, nil, err
		}
		limit := c.frameMax
		if f.Type == FrameHeader {
			limit = min(cmp.Or(c.HeaderLimit, maxHeader), maxHeader)
		}
		if f.Size > limit {
			return f, nil, fmt.Errorf("frame of type %d and %d bytes, over the %d this client reads", f.Type, f.Size, limit)
		}
		p, err := c.r.Payload(f)
		if err != nil || f.Type != frameHeartbeat {
			return f, p, err
		}
	}
}

// skipContent reads past the content (header and body) of a delivery that came while an
// answer was awaited, holding none of it: the connection's close puts the message back.
func (c *Conn) skipContent() error {
	f, err := c.r.Next()
	if err != nil {
		return err
	}
	if f.Type != FrameHeader || f.Size < 14 {
		return fmt.Errorf("frame of type %d where a content header was due", f.Type)
	}
	head, err := c.r.Peek(12) // class, weight, body size
	if err != nil {
		return err
	}
	size := binary.BigEndian.Uint64(head[4:])
	if err := c.r.Skip(f); err != nil {
		return err
	}
	return c.Body(size, nil)
}

func (c *Conn) frameOut(typ byte, ch uint16, payload []byte) error {
	buf := Frame{Type: typ, Channel: ch, Size: len(payload)}.Append(make([]byte, 0, 8+len(payload)))
	_, err := c.conn.Write(append(append(buf, payload...), FrameEnd))
	return err
}

func (c *Conn) method(ch uint16, id uint32, a args) error {
	return c.frameOut(FrameMethod, ch, append(binary.BigEndian.AppendUint32(nil, id), a...))
}

// args builds a method's arguments.
type args []byte

func (a args) u8(v byte) args         { return append(a, v) }
func (a args) u16(v uint16) args      { return binary.BigEndian.AppendUint16(a, v) }
func (a args) u32(v uint32) args      { return binary.BigEndian.AppendUint32(a, v) }
func (a args) u64(v uint64) args      { return binary.BigEndian.AppendUint64(a, v) }
func (a args) shortstr(s string) args { return append(a.u8(byte(len(s))), s...) }
func (a args) longstr(s string) args  { return append(a.u32(uint32(len(s))), s...) }

// table appends a field table of already encoded entries.
func (a args) table(entries []byte) args { return append(a.u32(uint32(len(entries))), entries...) }
