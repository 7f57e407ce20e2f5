package main

import (
	"encoding/binary"
	"net"
	"sync/atomic"
)

// RabbitMQ without its management plugin keeps no delivery counters, and CloudAMQP bills
// deliveries; so the service's broker connections go through this proxy, which reads the
// AMQP 0-9-1 frames on the wire and counts the methods that matter.

// frameCounts are totals over every connection of one proxy.
type frameCounts struct {
	Connections atomic.Int64 // TCP connections accepted
	Deliver     atomic.Int64 // basic.deliver (server → client)
	Redelivered atomic.Int64 // … of which with the redelivered flag
	GetOK       atomic.Int64 // basic.get-ok
	GetEmpty    atomic.Int64 // basic.get-empty
	Get         atomic.Int64 // basic.get (client → server)
	Ack         atomic.Int64 // basic.ack frames (one may settle many deliveries)
	Nack        atomic.Int64 // basic.nack and basic.reject
	Declare     atomic.Int64 // queue.declare, passive or not
	ChannelOpen atomic.Int64 // channel.open
}

// snapshot is a plain copy of frameCounts.
type snapshot struct {
	Connections, Deliver, Redelivered, GetOK, GetEmpty, Get, Ack, Nack, Declare, ChannelOpen int64
}

func (c *frameCounts) snapshot() snapshot {
	return snapshot{c.Connections.Load(), c.Deliver.Load(), c.Redelivered.Load(), c.GetOK.Load(),
		c.GetEmpty.Load(), c.Get.Load(), c.Ack.Load(), c.Nack.Load(), c.Declare.Load(), c.ChannelOpen.Load()}
}

func (a snapshot) minus(b snapshot) snapshot {
	return snapshot{a.Connections - b.Connections, a.Deliver - b.Deliver, a.Redelivered - b.Redelivered,
		a.GetOK - b.GetOK, a.GetEmpty - b.GetEmpty, a.Get - b.Get, a.Ack - b.Ack, a.Nack - b.Nack,
		a.Declare - b.Declare, a.ChannelOpen - b.ChannelOpen}
}

func (a snapshot) plus(b snapshot) snapshot {
	return snapshot{a.Connections + b.Connections, a.Deliver + b.Deliver, a.Redelivered + b.Redelivered,
		a.GetOK + b.GetOK, a.GetEmpty + b.GetEmpty, a.Get + b.Get, a.Ack + b.Ack, a.Nack + b.Nack,
		a.Declare + b.Declare, a.ChannelOpen + b.ChannelOpen}
}

// deliveries is what CloudAMQP counts as messages delivered: consumer deliveries and
// basic.get answers that carried a message.
func (a snapshot) deliveries() int64 { return a.Deliver + a.GetOK }

// copy is a proxy's testenv.Copy that moves one direction through a frame parser, the
// counts kept here; the client opens with the 8-byte protocol header "AMQP\x00\x00\x09\x01".
func (c *frameCounts) copy(dst, src net.Conn, toServer bool) {
	fp := &frameParser{counts: c}
	if toServer {
		c.Connections.Add(1)
		fp.skipHeader = 8
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			fp.feed(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// frameParser reads a stream of AMQP frames incrementally: frame header (type, channel,
// size), payload, frame-end. Method frames are small and kept whole; content bodies are
// skipped without copying.
type frameParser struct {
	counts     *frameCounts
	skipHeader int    // protocol header bytes still to skip
	head       []byte // collected header (7 bytes) or method payload
	need       int    // bytes of the current frame's payload still to read
	method     bool   // the current frame is a method frame
	inFrame    bool
}

func (f *frameParser) feed(b []byte) {
	for len(b) > 0 {
		if f.skipHeader > 0 {
			n := min(f.skipHeader, len(b))
			f.skipHeader -= n
			b = b[n:]
			continue
		}
		if !f.inFrame {
			n := min(7-len(f.head), len(b))
			f.head = append(f.head, b[:n]...)
			b = b[n:]
			if len(f.head) < 7 {
				return
			}
			f.method = f.head[0] == 1
			f.need = int(binary.BigEndian.Uint32(f.head[3:7])) + 1 // payload and frame-end
			f.head = f.head[:0]
			f.inFrame = true
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
			f.inFrame = false
		}
	}
}

// AMQP 0-9-1 class and method ids.
const (
	classChannel = 20
	classQueue   = 50
	classBasic   = 60
)

func (f *frameParser) onMethod(p []byte) {
	if len(p) < 4 {
		return
	}
	class, method := binary.BigEndian.Uint16(p[0:2]), binary.BigEndian.Uint16(p[2:4])
	c := f.counts
	switch {
	case class == classChannel && method == 10:
		c.ChannelOpen.Add(1)
	case class == classQueue && method == 10:
		c.Declare.Add(1)
	case class == classBasic && method == 60: // deliver: consumer-tag, delivery-tag, redelivered
		c.Deliver.Add(1)
		args := p[4:]
		if len(args) >= 1 {
			tagLen := int(args[0])
			if len(args) >= 1+tagLen+8+1 && args[1+tagLen+8]&1 == 1 {
				c.Redelivered.Add(1)
			}
		}
	case class == classBasic && method == 70:
		c.Get.Add(1)
	case class == classBasic && method == 71:
		c.GetOK.Add(1)
	case class == classBasic && method == 72:
		c.GetEmpty.Add(1)
	case class == classBasic && method == 80:
		c.Ack.Add(1)
	case class == classBasic && (method == 90 || method == 120):
		c.Nack.Add(1)
	}
}
