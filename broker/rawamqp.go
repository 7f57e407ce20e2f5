package broker

import (
	"bufio"
	"bytes"
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

// rawConn is the least of an AMQP 0-9-1 client that moves a message amqp091-go cannot
// read: it handles frames as bytes and never decodes a header table. It speaks on one
// channel, without heartbeats, and is meant to live for seconds. It never holds a body:
// a body is read past or passed on frame by frame, so what it holds at once is one
// content header (at most headerLimit) and one frame (at most frameMax).
type rawConn struct {
	conn     net.Conn
	r        *bufio.Reader
	frameMax int // negotiated; the largest frame it sends, and reads but for a content header
	// headerLimit is the largest content header frame it reads; a larger one is an error.
	headerLimit int
	// tag is the consumer's tag, once consume has started it.
	tag string
}

// AMQP frame types and the frame end octet.
const (
	rawFrameMethod    = 1
	rawFrameHeader    = 2
	rawFrameBody      = 3
	rawFrameHeartbeat = 8
	rawFrameEnd       = 0xCE
	// rawMaxFrame bounds a content header frame the raw client reads when no
	// MAX_MESSAGE_BYTES is set: a header frame over the broker's own frame_max is what it
	// is there to read, but not without a limit.
	rawMaxFrame = 64 << 20
	// rawFrameMax is the frame_max the raw client asks for, or less when the broker offers
	// less: it bounds every other frame it reads.
	rawFrameMax = 128 << 10
)

// AMQP class and method ids the raw client uses, as class<<16 | method.
const (
	mConnStart     = 10<<16 | 10
	mConnStartOk   = 10<<16 | 11
	mConnTune      = 10<<16 | 30
	mConnTuneOk    = 10<<16 | 31
	mConnOpen      = 10<<16 | 40
	mConnOpenOk    = 10<<16 | 41
	mConnClose     = 10<<16 | 50
	mConnCloseOk   = 10<<16 | 51
	mChanOpen      = 20<<16 | 10
	mChanOpenOk    = 20<<16 | 11
	mChanClose     = 20<<16 | 40
	mQueueDeclare  = 50<<16 | 10
	mQueueDeclOk   = 50<<16 | 11
	mBasicQos      = 60<<16 | 10
	mBasicQosOk    = 60<<16 | 11
	mBasicConsume  = 60<<16 | 20
	mBasicConsOk   = 60<<16 | 21
	mBasicCancel   = 60<<16 | 30
	mBasicCancelOk = 60<<16 | 31
	mBasicPublish  = 60<<16 | 40
	mBasicReturn   = 60<<16 | 50
	mBasicDeliver  = 60<<16 | 60
	mBasicAck      = 60<<16 | 80
	mTxSelect      = 90<<16 | 10
	mTxSelectOk    = 90<<16 | 11
	mTxCommit      = 90<<16 | 20
	mTxCommitOk    = 90<<16 | 21
	rawChannel     = 1
	rawConnTimeout = 15 * time.Second
)

// dialRaw connects to ep as amqp091-go would (amqps with the URL's TLS files or the
// system's roots), logs in with the URL's auth_mechanism and opens channel rawChannel,
// within the URL's connection_timeout. Errors never include the URL.
func dialRaw(ctx context.Context, ep Endpoint) (*rawConn, error) {
	uri, err := amqp.ParseURI(ep.URL)
	if err != nil {
		return nil, errors.New("parse the broker's URL")
	}
	if _, _, err := rawAuth(uri); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, connectionTimeout(uri, rawConnTimeout))
	defer cancel()
	var d net.Dialer
	addr := net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, scrub(err, ep)
	}
	if uri.Scheme == "amqps" {
		tc, err := clientTLS(ctx, nc, uri)
		if err != nil {
			nc.Close()
			return nil, scrub(err, ep)
		}
		nc = tc
	}
	c := &rawConn{conn: nc, r: bufio.NewReader(nc), frameMax: rawFrameMax, headerLimit: rawMaxFrame}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	if err := c.open(uri); err != nil {
		nc.Close()
		return nil, scrub(err, ep)
	}
	return c, nil
}

// rawAuth is the SASL mechanism and response the raw client logs in with: the first of
// the URL's auth_mechanism list it speaks (PLAIN, or EXTERNAL for a client certificate),
// PLAIN when the URL names none. AMQPLAIN is refused, naming the parameter.
func rawAuth(uri amqp.URI) (mechanism, response string, err error) {
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

func (c *rawConn) open(uri amqp.URI) error {
	if _, err := c.conn.Write([]byte("AMQP\x00\x00\x09\x01")); err != nil {
		return err
	}
	if _, err := c.expect(mConnStart); err != nil {
		return err
	}
	mechanism, response, err := rawAuth(uri)
	if err != nil {
		return err
	}
	var w rawWriter
	w.table(nil)
	w.shortstr(mechanism)
	w.longstr(response)
	w.shortstr("en_US")
	if err := c.method(0, mConnStartOk, w.b.Bytes()); err != nil {
		return err
	}
	tune, err := c.expect(mConnTune)
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
	if frameMax == 0 || frameMax > rawFrameMax {
		frameMax = rawFrameMax
	}
	c.frameMax = int(frameMax)
	w = rawWriter{}
	w.u16(channelMax)
	w.u32(frameMax)
	// No heartbeats, whatever the URL's heartbeat: the connection lives for seconds, and
	// every read it makes has a deadline of its own.
	w.u16(0)
	if err := c.method(0, mConnTuneOk, w.b.Bytes()); err != nil {
		return err
	}
	w = rawWriter{}
	w.shortstr(uri.Vhost)
	w.shortstr("")
	w.u8(0)
	if err := c.method(0, mConnOpen, w.b.Bytes()); err != nil {
		return err
	}
	if _, err := c.expect(mConnOpenOk); err != nil {
		return err
	}
	w = rawWriter{}
	w.shortstr("")
	if err := c.method(rawChannel, mChanOpen, w.b.Bytes()); err != nil {
		return err
	}
	_, err = c.expect(mChanOpenOk)
	return err
}

// Close closes the connection; the broker puts back every delivery not acknowledged.
func (c *rawConn) Close() error {
	var w rawWriter
	w.u16(200)
	w.shortstr("")
	w.u16(0)
	w.u16(0)
	_ = c.conn.SetDeadline(time.Now().Add(closeTimeout))
	if err := c.method(0, mConnClose, w.b.Bytes()); err == nil {
		_, _ = c.expect(mConnCloseOk)
	}
	return c.conn.Close()
}

func (c *rawConn) frame(typ byte, channel uint16, payload []byte) error {
	buf := make([]byte, 0, 8+len(payload))
	buf = append(buf, typ)
	buf = binary.BigEndian.AppendUint16(buf, channel)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(payload)))
	buf = append(buf, payload...)
	buf = append(buf, rawFrameEnd)
	_, err := c.conn.Write(buf)
	return err
}

func (c *rawConn) method(channel uint16, id uint32, args []byte) error {
	payload := binary.BigEndian.AppendUint32(nil, id)
	return c.frame(rawFrameMethod, channel, append(payload, args...))
}

// readFrame reads the next frame that is not a heartbeat: a content header frame of at
// most headerLimit bytes, any other of at most frameMax.
func (c *rawConn) readFrame() (typ byte, payload []byte, err error) {
	for {
		typ, size, err := c.frameStart()
		if err != nil {
			return 0, nil, err
		}
		limit := c.frameMax
		if typ == rawFrameHeader {
			limit = c.headerLimit
		}
		if size > limit {
			return 0, nil, fmt.Errorf("frame of type %d and %d bytes, over the %d this client reads", typ, size, limit)
		}
		payload = make([]byte, size+1)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			return 0, nil, err
		}
		if payload[size] != rawFrameEnd {
			return 0, nil, errors.New("frame without its end octet")
		}
		if typ != rawFrameHeartbeat {
			return typ, payload[:size], nil
		}
	}
}

// frameStart reads a frame's type and size; its payload and end octet follow.
func (c *rawConn) frameStart() (typ byte, size int, err error) {
	var h [7]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return 0, 0, err
	}
	return h[0], int(binary.BigEndian.Uint32(h[3:])), nil
}

// skipFrame reads a frame past, whatever its size, holding none of it, and returns its type.
func (c *rawConn) skipFrame() (byte, int, error) {
	typ, size, err := c.frameStart()
	if err != nil {
		return 0, 0, err
	}
	if _, err := c.r.Discard(size); err != nil {
		return 0, 0, err
	}
	if end, err := c.r.ReadByte(); err != nil || end != rawFrameEnd {
		return 0, 0, errors.Join(errors.New("frame without its end octet"), err)
	}
	return typ, size, nil
}

// skipBody reads a body of size bytes past, frame by frame, holding none of it.
func (c *rawConn) skipBody(size uint64) error {
	for size > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(rawConnTimeout))
		typ, n, err := c.skipFrame()
		if err != nil {
			return err
		}
		if typ != rawFrameBody || uint64(n) > size {
			return fmt.Errorf("frame of type %d and %d bytes where %d bytes of body were due", typ, n, size)
		}
		size -= uint64(n)
	}
	return nil
}

// skipContent reads past the content (header and body) of a delivery that came while an
// answer was awaited, holding none of it: the connection's close puts the message back.
func (c *rawConn) skipContent() error {
	typ, size, err := c.frameStart()
	if err != nil {
		return err
	}
	if typ != rawFrameHeader || size < 14 {
		return fmt.Errorf("frame of type %d where a content header was due", typ)
	}
	var head [12]byte // class, weight, body size
	if _, err := io.ReadFull(c.r, head[:]); err != nil {
		return err
	}
	if _, err := c.r.Discard(size - len(head) + 1); err != nil {
		return err
	}
	return c.skipBody(binary.BigEndian.Uint64(head[4:]))
}

// passBody reads a body of size bytes and publishes it on, frame by frame, as the body of
// the message whose header publishHeader sent.
func (c *rawConn) passBody(size uint64) error {
	for size > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(rawConnTimeout))
		typ, body, err := c.readFrame()
		if err != nil {
			return fmt.Errorf("read the body: %w", err)
		}
		if typ != rawFrameBody || uint64(len(body)) > size {
			return fmt.Errorf("frame of type %d and %d bytes where %d bytes of body were due", typ, len(body), size)
		}
		if err := c.frame(rawFrameBody, rawChannel, body); err != nil {
			return fmt.Errorf("copy the body: %w", err)
		}
		size -= uint64(len(body))
	}
	return nil
}

// expect reads methods until id comes. A delivery that comes meanwhile is read past and
// not kept (the connection's close puts it back); one that comes before basic.consume-ok,
// ahead of the deliveries the caller reads, is an error: the caller would miss it.
func (c *rawConn) expect(id uint32) ([]byte, error) {
	for {
		typ, p, err := c.readFrame()
		if err != nil {
			return nil, err
		}
		if typ != rawFrameMethod || len(p) < 4 {
			return nil, fmt.Errorf("frame of type %d where a method was due", typ)
		}
		got, args := binary.BigEndian.Uint32(p), p[4:]
		switch got {
		case id:
			return args, nil
		case mConnClose, mChanClose:
			return nil, closeError(got, args)
		case mBasicReturn:
			return nil, errors.New("the broker returned the copy: no queue took it")
		case mBasicDeliver:
			if id == mBasicConsOk {
				return nil, errors.New("a delivery came before basic.consume-ok")
			}
			if err := c.skipContent(); err != nil {
				return nil, err
			}
		}
	}
}

func closeError(id uint32, args []byte) error {
	r := rawReader{b: args}
	code, text := r.u16(), r.shortstr()
	what := "connection"
	if id == mChanClose {
		what = "channel"
	}
	return fmt.Errorf("%s closed by the broker: %w", what, &amqp.Error{Code: int(code), Reason: text, Server: true})
}

// consume sets the channel's prefetch to prefetch and consumes queue exclusively, with
// manual acks, in a transaction.
func (c *rawConn) consume(queue, tag string, prefetch int) error {
	if err := c.call(mTxSelect, nil, mTxSelectOk); err != nil {
		return fmt.Errorf("tx.select: %w", err)
	}
	var w rawWriter
	w.u32(0)
	w.u16(uint16(prefetch))
	w.u8(0)
	if err := c.call(mBasicQos, w.b.Bytes(), mBasicQosOk); err != nil {
		return fmt.Errorf("basic.qos: %w", err)
	}
	w = rawWriter{}
	w.u16(0)
	w.shortstr(queue)
	w.shortstr(tag)
	w.u8(4) // exclusive; not no-local, not no-ack, not no-wait
	w.table(nil)
	if err := c.call(mBasicConsume, w.b.Bytes(), mBasicConsOk); err != nil {
		return fmt.Errorf("basic.consume: %w", err)
	}
	c.tag = tag
	return nil
}

// declarePassive fails when queue does not exist.
func (c *rawConn) declarePassive(queue string) error {
	var w rawWriter
	w.u16(0)
	w.shortstr(queue)
	w.u8(1) // passive
	w.table(nil)
	return c.call(mQueueDeclare, w.b.Bytes(), mQueueDeclOk)
}

// settleMove ends a move to -error, in the channel's transaction with the copy published
// before it: it cancels the consumer, then acknowledges tag and commits. Cancelled first,
// the consumer gets nothing when the commit frees its prefetch: a message delivered to a
// connection about to close would be neither ready nor settled until the broker put it
// back, and a drain just ended could read its queue as emptier than it is.
func (c *rawConn) settleMove(tag uint64) error {
	var w rawWriter
	w.shortstr(c.tag)
	w.u8(0) // not no-wait
	if err := c.call(mBasicCancel, w.b.Bytes(), mBasicCancelOk); err != nil {
		return fmt.Errorf("basic.cancel: %w", err)
	}
	w = rawWriter{}
	w.u64(tag)
	w.u8(0) // not multiple
	if err := c.method(rawChannel, mBasicAck, w.b.Bytes()); err != nil {
		return fmt.Errorf("basic.ack: %w", err)
	}
	if err := c.call(mTxCommit, nil, mTxCommitOk); err != nil {
		return fmt.Errorf("tx.commit: %w", err)
	}
	return nil
}

// call sends a method on the channel and waits for its answer.
func (c *rawConn) call(id uint32, args []byte, answer uint32) error {
	if err := c.method(rawChannel, id, args); err != nil {
		return err
	}
	_, err := c.expect(answer)
	return err
}

// rawWriter builds a method's arguments.
type rawWriter struct{ b bytes.Buffer }

func (w *rawWriter) u8(v byte)    { w.b.WriteByte(v) }
func (w *rawWriter) u16(v uint16) { w.b.Write(binary.BigEndian.AppendUint16(nil, v)) }
func (w *rawWriter) u32(v uint32) { w.b.Write(binary.BigEndian.AppendUint32(nil, v)) }
func (w *rawWriter) u64(v uint64) { w.b.Write(binary.BigEndian.AppendUint64(nil, v)) }
func (w *rawWriter) shortstr(s string) {
	w.u8(byte(len(s)))
	w.b.WriteString(s)
}
func (w *rawWriter) longstr(s string) {
	w.u32(uint32(len(s)))
	w.b.WriteString(s)
}

// table writes a field table of already encoded entries.
func (w *rawWriter) table(entries []byte) {
	w.u32(uint32(len(entries)))
	w.b.Write(entries)
}

// rawReader reads a method's arguments; the first short read sets err.
type rawReader struct {
	b   []byte
	err error
}

func (r *rawReader) take(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.err = errors.New("arguments too short")
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *rawReader) u16() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *rawReader) u64() uint64 { return binary.BigEndian.Uint64(r.take(8)) }
func (r *rawReader) shortstr() string {
	n := r.take(1)[0]
	return string(r.take(int(n)))
}
