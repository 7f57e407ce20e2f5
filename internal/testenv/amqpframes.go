package testenv

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
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

// Copy is a proxy's Copy that counts the methods of the broker's frames as they pass (the
// broker's own frame reader reads them). Every method counted goes from the broker to the
// client, so the client's frames, its protocol header first, pass unread.
func (c *FrameCounts) Copy(dst, src net.Conn, toServer bool) {
	if !toServer {
		c.count(io.TeeReader(src, dst))
	}
	// What a frame the counter could not read left unread passes on unread.
	Pass(dst, src, func([]byte) {})
}

// maxMethod bounds a method frame the counter reads whole: a larger one is read past.
const maxMethod = 64 << 10

// count reads the frames of r, which passes on what it reads, until it fails, and counts
// their methods; content bodies are read past without copying.
func (c *FrameCounts) count(r io.Reader) {
	frames := rawamqp.NewReader(r, 64<<10)
	for {
		f, err := frames.Next()
		if err != nil {
			return
		}
		if f.Type != rawamqp.FrameMethod || f.Size > maxMethod {
			if frames.Skip(f) != nil {
				return
			}
			continue
		}
		p, err := frames.Payload(f)
		if err != nil {
			return
		}
		switch rawamqp.MethodID(p) {
		case rawamqp.BasicDeliver: // consumer-tag, delivery-tag, redelivered
			c.Deliver.Add(1)
			if args := p[4:]; len(args) >= 1 {
				tagLen := int(args[0])
				if len(args) >= 1+tagLen+8+1 && args[1+tagLen+8]&1 == 1 {
					c.Redelivered.Add(1)
				}
			}
		case rawamqp.BasicGetOk:
			c.GetOK.Add(1)
		}
	}
}

// RawMessage is a message as ReadRaw read it: its content header frame's payload, and
// its body.
type RawMessage struct{ Header, Body []byte }

// ReadRaw takes n messages of queue on the broker of amqpURL with the client that reads
// what amqp091-go refuses (rawamqp), and lets go of them: they go back to the queue.
func ReadRaw(t T, amqpURL, queue string, n int) []RawMessage {
	t.Helper()
	uri, err := amqp.ParseURI(amqpURL)
	if err != nil {
		t.Fatalf("testenv: parse AMQP URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := rawamqp.Dial(ctx, uri, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
	})
	if err != nil {
		t.Fatalf("testenv: raw connection: %v", err)
	}
	defer c.Close()
	if err := c.Consume(queue, "testenv-read-raw", n); err != nil {
		t.Fatalf("testenv: consume %s: %v", queue, err)
	}
	var out []RawMessage
	for len(out) < n {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, header, err := c.Next()
		var body bytes.Buffer
		if err == nil {
			err = c.Body(binary.BigEndian.Uint64(header[4:]), &body)
		}
		if err != nil {
			t.Fatalf("testenv: read %s: %v", queue, err)
		}
		out = append(out, RawMessage{Header: header, Body: body.Bytes()})
	}
	return out
}

// NestedTable is a header table nested depth deep, which amqp091-go refuses past 32.
func NestedTable(depth int) amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for range depth {
		t = amqp.Table{"in": t}
	}
	return t
}
