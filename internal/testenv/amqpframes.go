package testenv

import (
	"encoding/binary"
	"net"
	"sync/atomic"
)

// RabbitMQ without its management plugin keeps no delivery counters, and CloudAMQP bills
// deliveries; so the service's broker connections go through this proxy, which reads the
// AMQP 0-9-1 frames on the wire and counts the methods that matter.

// FrameCounts are totals over every connection of the proxies that share them.
type FrameCounts struct {
	Deliver     atomic.Int64 // basic.deliver (server → client)
	Redelivered atomic.Int64 // … of which with the redelivered flag
	GetOK       atomic.Int64 // basic.get-ok
}

// FrameSnapshot is a plain copy of FrameCounts.
type FrameSnapshot struct{ Deliver, Redelivered, GetOK int64 }

// Snapshot is the counts so far.
func (c *FrameCounts) Snapshot() FrameSnapshot {
	return FrameSnapshot{c.Deliver.Load(), c.Redelivered.Load(), c.GetOK.Load()}
}

// Minus is a less b: what was counted between two snapshots.
func (a FrameSnapshot) Minus(b FrameSnapshot) FrameSnapshot {
	return FrameSnapshot{a.Deliver - b.Deliver, a.Redelivered - b.Redelivered, a.GetOK - b.GetOK}
}

// Deliveries is what CloudAMQP counts as messages delivered: consumer deliveries and
// basic.get answers that carried a message.
func (a FrameSnapshot) Deliveries() int64 { return a.Deliver + a.GetOK }

// Copy is a proxy's Copy that reads the broker's frames through a frame parser,
// the counts kept here. Every method counted goes from the broker to the client, so the
// client's frames, its protocol header first, pass unread.
func (c *FrameCounts) Copy(dst, src net.Conn, toServer bool) {
	see := (&frameParser{counts: c}).feed
	if toServer {
		see = func([]byte) {}
	}
	Pass(dst, src, see)
}

// frameParser reads a stream of AMQP frames incrementally: frame header (type, channel,
// size), payload, frame-end. Method frames are small and kept whole; content bodies are
// skipped without copying.
type frameParser struct {
	counts *FrameCounts
	head   []byte // collected header (7 bytes) or method payload
	need   int    // bytes of the current frame's payload and frame-end still to read: 0 between frames
	method bool   // the current frame is a method frame
}

func (f *frameParser) feed(b []byte) {
	for len(b) > 0 {
		if f.need == 0 {
			n := min(7-len(f.head), len(b))
			f.head = append(f.head, b[:n]...)
			b = b[n:]
			if len(f.head) < 7 {
				return
			}
			f.method = f.head[0] == 1
			f.need = int(binary.BigEndian.Uint32(f.head[3:7])) + 1 // payload and frame-end
			f.head = f.head[:0]
			continue
		}
		n := min(f.need, len(b))
		if f.method {
			f.head = append(f.head, b[:n]...)
		}
		f.need -= n
		b = b[n:]
		if f.need == 0 {
			if f.method {
				f.onMethod(f.head[:len(f.head)-1])
			}
			f.head = f.head[:0]
		}
	}
}

// classBasic is AMQP 0-9-1's basic class.
const classBasic = 60

func (f *frameParser) onMethod(p []byte) {
	if len(p) < 4 {
		return
	}
	class, method := binary.BigEndian.Uint16(p[0:2]), binary.BigEndian.Uint16(p[2:4])
	c := f.counts
	switch {
	case class == classBasic && method == 60: // deliver: consumer-tag, delivery-tag, redelivered
		c.Deliver.Add(1)
		args := p[4:]
		if len(args) >= 1 {
			tagLen := int(args[0])
			if len(args) >= 1+tagLen+8+1 && args[1+tagLen+8]&1 == 1 {
				c.Redelivered.Add(1)
			}
		}
	case class == classBasic && method == 71:
		c.GetOK.Add(1)
	}
}
