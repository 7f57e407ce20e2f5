package quarantine

import (
	"encoding/binary"
	"net"
	"sync"
	"time"

	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
)

// guardBuffer is the read buffer of a guarded socket: bodies are read past through it in
// pieces of this size.
const guardBuffer = 64 << 10

// Guard wraps conn, the socket of a consumer's connection as amqp091-go reads it. The
// library holds every prefetched delivery whole, however large (RabbitMQ refuses a body
// only over its max_message_size: 16 MiB by default on 4.x, 128 MiB on 3.x, and a shared
// plan may not let it be changed), so without a bound of ours a consumer could hold any of
// them. The guard reads the frames as they pass and, for a delivery whose content header
// announces a body over Limit (which must be positive), hands the library a stand-in body (Mark and the real size,
// which Cut finds) and reads the real one past, discarding it. It never waits on anything
// but the socket, so it cannot stall the replies that follow a body.
func (q Quarantine) Guard(conn net.Conn) net.Conn {
	return &guard{Conn: conn, r: rawamqp.NewReader(conn, guardBuffer), limit: uint64(q.Limit), mark: q.Mark,
		deliver: map[uint16]bool{}, skip: map[uint16]uint64{}}
}

type guard struct {
	net.Conn
	r     rawamqp.Reader
	limit uint64
	mark  Mark

	// pending are bytes for the library: a frame's first bytes, as read or rewritten, in
	// head. pass is how much of the current frame is still to be passed on, end octet
	// included; then comes inject, the stand-in body frame of an oversize delivery, if any.
	head    [19]byte
	pending []byte
	pass    int
	inject  []byte
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

// SetReadDeadline records the library's heartbeat window.
func (g *guard) SetReadDeadline(t time.Time) error {
	g.track(t)
	return g.Conn.SetReadDeadline(t)
}

// SetDeadline records the read side as SetReadDeadline does.
func (g *guard) SetDeadline(t time.Time) error {
	g.track(t)
	return g.Conn.SetDeadline(t)
}

func (g *guard) track(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.window = 0
	if !t.IsZero() {
		g.window = time.Until(t)
	}
}

// Read hands the library the frames as rewritten.
func (g *guard) Read(p []byte) (int, error) {
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
			if err := g.next(); err != nil {
				return 0, err
			}
		}
	}
}

// next reads the next frame's first bytes (and those of a method or content header) and
// decides what the library gets of it.
func (g *guard) next() error {
	f, err := g.r.Next()
	if err != nil {
		return err
	}
	g.pending, g.pass = f.Append(g.head[:0]), f.Size+1
	switch {
	case f.Type == rawamqp.FrameBody && g.skip[f.Channel] > 0:
		g.pending, g.pass = nil, 0
		g.skip[f.Channel] -= min(g.skip[f.Channel], uint64(f.Size))
		return g.discard(f.Size + 1)
	case f.Type == rawamqp.FrameMethod && f.Size >= 4:
		id, err := g.r.Peek(4)
		if err != nil {
			return err
		}
		g.deliver[f.Channel] = rawamqp.MethodID(id) == rawamqp.BasicDeliver
	case f.Type == rawamqp.FrameHeader && f.Size >= 12 && g.deliver[f.Channel]:
		g.deliver[f.Channel] = false
		head, err := g.r.Peek(12) // class, weight, body size
		if err != nil {
			return err
		}
		if body := bodySize(head); body > g.limit {
			stand := binary.BigEndian.AppendUint64(append([]byte(nil), g.mark...), body)
			g.pending = binary.BigEndian.AppendUint64(append(g.pending, head[:4]...), uint64(len(stand)))
			g.pass, g.skip[f.Channel] = f.Size-12+1, body
			g.inject = rawamqp.Frame{Type: rawamqp.FrameBody, Channel: f.Channel, Size: len(stand)}.Append(nil)
			g.inject = append(append(g.inject, stand...), rawamqp.FrameEnd)
			_, err := g.r.Discard(12)
			return err
		}
	}
	return nil
}

// discard reads n bytes of an oversize delivery's body past.
func (g *guard) discard(n int) error {
	for n > 0 {
		d, err := g.r.Discard(min(n, guardBuffer))
		n -= d
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
	return nil
}
