package broker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// ErrUnreadable is wrapped into Consume's error when its connection was cut because a
// message's content header could not be read by the AMQP client (amqp091-go closes the
// whole connection on a header table or array nested more than 32 deep or holding more
// than 8,192 entries, or a frame over frame_max).
var ErrUnreadable = errors.New("a message's headers could not be read")

// The limits amqp091-go's frame reader enforces on a header table (its maxFieldDepth and
// maxContainerElements): past them it closes the connection.
const (
	clientMaxDepth    = 32
	clientMaxElements = 8192
)

// Scan bounds of moveUnreadable.
const (
	// unreadableIdle is how long the scan waits for the next delivery before it takes the
	// queue's ready head to be all read.
	unreadableIdle = 2 * time.Second
	// unreadableBusy bounds the wait for the cut consumer to be gone from the queue (its
	// exclusive consume is released once the broker has seen the connection close).
	unreadableBusy = 10 * time.Second
)

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

// afterUnreadable is what Consume does when its connection was cut by an unreadable
// message: the message would come back to the head and cut the next consumer too, for
// good, so it is moved to {q}-error by a client that never decodes its headers. Good
// messages ahead of it go back to the head of the queue, in order. It returns the error
// Consume returns.
func (p *Pool) afterUnreadable(ctx context.Context, ep Endpoint, queue string, frameMax, prefetch int, cause error) error {
	ctx = context.WithoutCancel(ctx)
	id, reason, err := p.moveUnreadable(ctx, ep, queue, frameMax, prefetch)
	switch {
	case err != nil:
		p.Metrics.Unreadable(queue, metrics.UnreadableNotFound)
		p.logger.ErrorContext(ctx, "connection cut by an unreadable message, which could not be moved to -error",
			"queue", queue, "broker", ep, "error", err)
	case reason == "":
		p.Metrics.Unreadable(queue, metrics.UnreadableNotFound)
		p.logger.ErrorContext(ctx, "connection cut by an unreadable message, but none was found at the head of the queue",
			"queue", queue, "broker", ep, "scanned", prefetch+1)
	default:
		p.Metrics.Unreadable(queue, metrics.UnreadableMoved)
		p.Metrics.Routed(queue, metrics.RouteError)
		p.logger.WarnContext(ctx, "unreadable message moved to -error", "queue", queue, "broker", ep,
			"message_id", id, "reason", reason)
		return fmt.Errorf("consume %s on %s: %w: %w: %w", queue, ep, ErrUnreadable, cause, ErrMovedToError)
	}
	return fmt.Errorf("consume %s on %s: %w: %w", queue, ep, ErrUnreadable, cause)
}

// moveUnreadable consumes queue exclusively on a raw connection, as many deliveries as a
// consumer with prefetch could have had ahead of the one that cut it and that one, and
// copies the first whose content header amqp091-go would refuse (frameMax is the frame_max
// its consumers negotiate) to {q}-error, with the reason, and acknowledges it, in one
// transaction. It checks that {q}-error exists before it consumes. It holds one content
// header at a time and no body: the bodies of the others are read past, and the moved
// message's body is passed on frame by frame. Every other delivery goes back to the head,
// in order, when the connection closes. It returns the message id and the reason, or ""
// when every delivery was readable.
func (p *Pool) moveUnreadable(ctx context.Context, ep Endpoint, queue string, frameMax, prefetch int) (id, reason string, err error) {
	c, err := consumeRaw(ctx, ep, queue, prefetch+1, p.rawHeaderLimit(), ErrorQueue(queue))
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	for range prefetch + 1 {
		_ = c.conn.SetReadDeadline(time.Now().Add(unreadableIdle))
		tag, header, err := c.nextHeader()
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				return "", "", nil
			}
			return "", "", fmt.Errorf("read %s: %w", queue, err)
		}
		size := binary.BigEndian.Uint64(header[4:])
		if reason = checkContentHeader(header, frameMax); reason == "" {
			if err := c.skipBody(size); err != nil {
				return "", "", fmt.Errorf("read %s: %w", queue, err)
			}
			continue
		}
		id, err = c.moveHead(queue, tag, header, "unreadable: "+reason)
		if err != nil {
			return id, "", err
		}
		return id, reason, nil
	}
	return "", "", nil
}

// moveHead copies the delivery tag, whose content header was just read and whose body
// comes next, to {q}-error with reason, passing its body on frame by frame, and
// acknowledges it in the same transaction. It returns the message id.
func (c *rawConn) moveHead(queue string, tag uint64, header []byte, reason string) (string, error) {
	size := binary.BigEndian.Uint64(header[4:])
	header, id := unreadableCopy(header, reason, queue, c.frameMax)
	if err := c.publishHeader(ErrorQueue(queue), header); err != nil {
		return id, fmt.Errorf("copy to %s: %w", ErrorQueue(queue), err)
	}
	if err := c.passBody(size); err != nil {
		return id, fmt.Errorf("move %s to %s: %w", queue, ErrorQueue(queue), err)
	}
	_ = c.conn.SetReadDeadline(time.Time{})
	if err := c.settleMove(tag); err != nil {
		return id, fmt.Errorf("commit the move to %s: %w", ErrorQueue(queue), err)
	}
	return id, nil
}

// rawHeaderLimit is the largest content header the raw client reads: MAX_MESSAGE_BYTES,
// so that a move holds no more than a consumer's delivery would.
func (p *Pool) rawHeaderLimit() int {
	if p.MaxMessageBytes > 0 && p.MaxMessageBytes < rawMaxFrame {
		return p.MaxMessageBytes
	}
	return rawMaxFrame
}

// consumeRaw dials ep and consumes queue exclusively with prefetch, reading content
// headers of at most headerLimit bytes, after checking that the queues passive name exist
// (before, so that nothing is delivered to a move that cannot be made). While the cut
// consumer's place is not free yet (403), it tries again.
func consumeRaw(ctx context.Context, ep Endpoint, queue string, prefetch, headerLimit int, passive ...string) (*rawConn, error) {
	deadline := time.Now().Add(unreadableBusy)
	for {
		c, err := dialRaw(ctx, ep)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", ep, err)
		}
		c.headerLimit = headerLimit
		for _, q := range passive {
			if err := c.declarePassive(q); err != nil {
				c.Close()
				return nil, fmt.Errorf("%s: %w", q, err)
			}
		}
		err = c.consume(queue, "brokerswitch-unreadable-"+rand.Text()[:12], prefetch)
		if err == nil {
			return c, nil
		}
		c.Close()
		if !isCode(err, amqp.AccessRefused) || time.Now().After(deadline) {
			return nil, fmt.Errorf("consume %s: %w", queue, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkContentHeader says why amqp091-go would refuse a content header frame's payload
// on a connection of frame_max frameMax, or "" when it would read it. It walks the header
// table as the library reads it, without building it.
func checkContentHeader(header []byte, frameMax int) string {
	if frameMax > 0 && len(header)+8 > frameMax {
		return fmt.Sprintf("a header frame of %d bytes, over the frame_max of %d its consumer negotiated", len(header)+8, frameMax)
	}
	props, err := splitProperties(header)
	if err != nil {
		return "a content header that does not parse: " + err.Error()
	}
	if t, ok := props[flagHeaders]; ok {
		if why := checkTable(t[4:], 0); why != "" {
			return "headers amqp091-go refuses: " + why
		}
	}
	return ""
}

// checkTable walks the entries of a field table (without its length) at depth.
func checkTable(b []byte, depth int) string {
	if depth > clientMaxDepth {
		return fmt.Sprintf("tables or arrays nested more than %d deep", clientMaxDepth)
	}
	keys := map[string]struct{}{}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n {
			return "a table key past its table's end"
		}
		rest, why := checkField(b[1+n:], depth)
		if why != "" {
			return why
		}
		if len(keys) >= clientMaxElements {
			return fmt.Sprintf("a table of more than %d entries", clientMaxElements)
		}
		keys[string(b[1:1+n])] = struct{}{}
		b = rest
	}
	return ""
}

// checkField walks one field value, returning what follows it.
func checkField(b []byte, depth int) ([]byte, string) {
	if len(b) < 1 {
		return nil, "a field without its type"
	}
	fixed := map[byte]int{'t': 1, 'B': 1, 'b': 1, 's': 2, 'u': 2, 'I': 4, 'i': 4, 'f': 4, 'l': 8, 'd': 8, 'T': 8, 'D': 5, 'V': 0}
	typ, b := b[0], b[1:]
	if n, ok := fixed[typ]; ok {
		if len(b) < n {
			return nil, "a field past its table's end"
		}
		return b[n:], ""
	}
	switch typ {
	case 'S', 'x', 'A', 'F':
		if len(b) < 4 {
			return nil, "a field past its table's end"
		}
		n := int(binary.BigEndian.Uint32(b))
		if n < 0 || len(b) < 4+n {
			return nil, "a field past its table's end"
		}
		inner, rest := b[4:4+n], b[4+n:]
		switch typ {
		case 'A':
			if why := checkArray(inner, depth+1); why != "" {
				return nil, why
			}
		case 'F':
			if why := checkTable(inner, depth+1); why != "" {
				return nil, why
			}
		}
		return rest, ""
	}
	return nil, fmt.Sprintf("a field of unknown type %q", typ)
}

func checkArray(b []byte, depth int) string {
	if depth > clientMaxDepth {
		return fmt.Sprintf("tables or arrays nested more than %d deep", clientMaxDepth)
	}
	for n := 0; len(b) > 0; n++ {
		if n >= clientMaxElements {
			return fmt.Sprintf("an array of more than %d entries", clientMaxElements)
		}
		rest, why := checkField(b, depth)
		if why != "" {
			return why
		}
		b = rest
	}
	return ""
}

// Content header property flags, in the order the properties follow them.
const (
	flagContentType     = 0x8000
	flagContentEncoding = 0x4000
	flagHeaders         = 0x2000
	flagDeliveryMode    = 0x1000
	flagPriority        = 0x0800
	flagCorrelationID   = 0x0400
	flagReplyTo         = 0x0200
	flagExpiration      = 0x0100
	flagMessageID       = 0x0080
	flagTimestamp       = 0x0040
	flagType            = 0x0020
	flagUserID          = 0x0010
	flagAppID           = 0x0008
)

// splitProperties returns each property of a content header's payload as its encoded
// bytes (a short string with its length, a table with its length), by flag.
func splitProperties(header []byte) (map[uint16][]byte, error) {
	if len(header) < 14 {
		return nil, errors.New("too short")
	}
	flags := binary.BigEndian.Uint16(header[12:])
	b := header[14:]
	props := map[uint16][]byte{}
	for bit := uint16(0x8000); bit > 0x0004; bit >>= 1 {
		if flags&bit == 0 {
			continue
		}
		var n int
		switch bit {
		case flagHeaders:
			if len(b) < 4 {
				return nil, errors.New("headers past the frame's end")
			}
			n = 4 + int(binary.BigEndian.Uint32(b))
		case flagDeliveryMode, flagPriority:
			n = 1
		case flagTimestamp:
			n = 8
		default:
			if len(b) < 1 {
				return nil, errors.New("a property past the frame's end")
			}
			n = 1 + int(b[0])
		}
		if n < 0 || len(b) < n {
			return nil, errors.New("a property past the frame's end")
		}
		props[bit], b = b[:n], b[n:]
	}
	return props, nil
}

// unreadableCopy builds the content header of a copy to {q}-error of the message whose
// content header is original, with reason in HeaderErrorReason: its properties as
// they were (but reply-to, expiration, priority and user-id, like errorCopy), persistent,
// with the reject headers appended to its header table, undecoded. When that would not fit
// frameMax, the copy carries the reject headers alone and says so in HeaderErrorCut. It
// returns the header and the message id.
func unreadableCopy(original []byte, reason, queue string, frameMax int) ([]byte, string) {
	props, _ := splitProperties(original) // checkContentHeader parsed it already
	id := ""
	if v, ok := props[flagMessageID]; ok {
		id = string(v[1:])
	}
	ours := func(cut string) []byte {
		var w rawWriter
		for _, kv := range [][2]string{
			{HeaderErrorReason, reason},
			{HeaderErrorAt, time.Now().UTC().Format(time.RFC3339)},
			{HeaderErrorQueue, queue},
			{HeaderErrorCut, cut},
		} {
			if kv[1] == "" {
				continue
			}
			w.shortstr(kv[0])
			w.u8('S')
			w.longstr(kv[1])
		}
		return w.b.Bytes()
	}
	build := func(table []byte) []byte {
		var w rawWriter
		w.b.Write(original[:12]) // class, weight, body size
		flags := uint16(flagHeaders | flagDeliveryMode)
		for _, f := range []uint16{flagContentType, flagContentEncoding, flagCorrelationID, flagMessageID, flagTimestamp, flagType, flagAppID} {
			if _, ok := props[f]; ok {
				flags |= f
			}
		}
		w.u16(flags)
		for bit := uint16(0x8000); bit > 0x0004; bit >>= 1 {
			switch {
			case flags&bit == 0:
			case bit == flagHeaders:
				w.table(table)
			case bit == flagDeliveryMode:
				w.u8(2)
			default:
				w.b.Write(props[bit])
			}
		}
		return w.b.Bytes()
	}
	var table []byte
	if t, ok := props[flagHeaders]; ok {
		table = t[4:]
	}
	whole := build(append(append([]byte(nil), table...), ours("")...))
	if len(whole)+8 <= frameMax {
		return whole, id
	}
	cut := fmt.Sprintf("left out the original's header table (%d bytes) to fit frame_max %d", len(table), frameMax)
	return build(ours(cut)), id
}
