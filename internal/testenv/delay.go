package testenv

import (
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// On loopback a round trip costs microseconds, so one transaction per message is nearly
// free and every figure is bound by CPU. A service reaches CloudAMQP and a managed Postgres
// over a network; a Delay is a proxy's Copy that adds a fixed one-way delay to every byte
// in both directions (order kept, throughput not limited) to show what round trips cost,
// and counts the round trips of each client connection on the wire.
type Delay struct {
	oneWay time.Duration
	counts sync.Map // the client's address → *turnCount
	// buffers are the chunks' buffers, reused: the proxy shares the CPUs with what it
	// measures, and a fresh buffer per chunk (zeroed, then collected) cost the worker's
	// process a tenth of its CPU at 2 ms, which a real network never charges.
	buffers sync.Pool
}

// NewDelay is a Delay of rtt per round trip.
func NewDelay(rtt time.Duration) *Delay { return &Delay{oneWay: rtt / 2} }

// turnCount is the round trips of one client connection through a proxy.
type turnCount struct {
	turns    atomic.Int64
	answered atomic.Bool // the server has sent something since the client last wrote
}

// sent notes bytes from the client: a new round trip if the server answered before.
func (c *turnCount) sent() {
	if c.answered.Swap(false) {
		c.turns.Add(1)
	}
}

// TurnsOf is how many round trips the client connection from addr has made: a client
// write after an answer is one.
func (p *Delay) TurnsOf(addr string) int64 {
	if c, ok := p.counts.Load(addr); ok {
		return c.(*turnCount).turns.Load()
	}
	return 0
}

// ThroughDelay is rawURL, an AMQP URL or a Postgres DSN, reaching its host through a
// proxy that delays by rtt, cut when the test ends.
func ThroughDelay(tb T, rawURL string, rtt time.Duration) string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatalf("parse a URL to delay: %v", err)
	}
	u.Host = delayProxy(tb, u.Host, rtt).Addr()
	return u.String()
}

// delayProxy is a proxy to target that delays by rtt, cut when the test ends.
func delayProxy(tb T, target string, rtt time.Duration) *Proxy {
	tb.Helper()
	p, err := ListenProxy(target, NewDelay(rtt).Copy)
	if err != nil {
		tb.Fatalf("delay proxy: %v", err)
	}
	tb.Cleanup(p.Cut)
	return p
}

type chunk struct {
	due time.Time
	buf *[]byte // from Delay.buffers
	n   int
}

// chunkSize is the most a chunk holds: what one read of the source returns.
const chunkSize = 64 << 10

func (p *Delay) buffer() *[]byte {
	if b, ok := p.buffers.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, chunkSize)
	return &b
}

// Copy delays every chunk by the one-way time, keeping order: a reader stamps chunks
// as they arrive and the writer releases each when it is due.
func (p *Delay) Copy(dst, src net.Conn, toServer bool) {
	client := dst
	if toServer {
		client = src
	}
	c, _ := p.counts.LoadOrStore(client.RemoteAddr().String(), &turnCount{})
	count := c.(*turnCount)
	queue := make(chan chunk, 4096)
	go func() {
		defer close(queue)
		for {
			buf := p.buffer()
			n, err := src.Read(*buf)
			if n > 0 {
				if toServer {
					count.sent()
				} else {
					count.answered.Store(true)
				}
				queue <- chunk{time.Now().Add(p.oneWay), buf, n}
			} else {
				p.buffers.Put(buf)
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range queue {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		_, err := dst.Write((*c.buf)[:c.n])
		p.buffers.Put(c.buf)
		if err != nil {
			break
		}
	}
	src.Close() // ends the reader
	for range queue {
	}
}

// MeasureRTT is the median round trip through a delay proxy of rtt, as measured: sleeps
// on this kind of machine are rounded up to about a millisecond, so an injected delay is
// reported as seen.
func MeasureRTT(tb T, rtt time.Duration) time.Duration {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("echo listen: %v", err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // the echo
	}()
	c, err := net.Dial("tcp", delayProxy(tb, l.Addr().String(), rtt).Addr())
	if err != nil {
		tb.Fatalf("dial the delay proxy: %v", err)
	}
	defer c.Close()
	var trips []time.Duration
	b := []byte{1}
	for range 50 {
		began := time.Now()
		if _, err := c.Write(b); err != nil {
			tb.Fatalf("ping: %v", err)
		}
		if _, err := c.Read(b); err != nil {
			tb.Fatalf("pong: %v", err)
		}
		trips = append(trips, time.Since(began))
	}
	slices.Sort(trips)
	return trips[len(trips)/2]
}
