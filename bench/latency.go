package main

import (
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// On loopback a round trip costs microseconds, so one transaction per message is nearly
// free and every figure is bound by CPU. A service reaches CloudAMQP and a managed Postgres
// over a network; delay is a proxy's testenv.Copy that adds a fixed one-way delay to every
// byte in both directions (order kept, throughput not limited) to show what round trips cost.
type delay struct {
	oneWay time.Duration
	// counts are the round trips of each client connection, by the client's address.
	counts sync.Map // string → *turnCount
}

func newDelay(rtt time.Duration) *delay { return &delay{oneWay: rtt / 2} }

// turnsOf is how many round trips the client connection from addr has made.
func (p *delay) turnsOf(addr string) int64 {
	if c, ok := p.counts.Load(addr); ok {
		return c.(*turnCount).turns.Load()
	}
	return 0
}

// throughDelay is rawURL, an AMQP URL or a Postgres DSN, reaching its host through a
// proxy that delays by rtt, cut when the figure ends.
func throughDelay(s *figure, rawURL string, rtt time.Duration) string {
	u, err := url.Parse(rawURL)
	s.check(err, "parse a URL to delay")
	u.Host = delayProxy(s, u.Host, rtt).Addr()
	return u.String()
}

// delayProxy is a proxy to target that delays by rtt, cut when the figure ends.
func delayProxy(s *figure, target string, rtt time.Duration) *testenv.Proxy {
	p, err := testenv.ListenProxy(target, newDelay(rtt).copy)
	s.check(err, "proxy")
	s.Cleanup(p.Cut)
	return p
}

type chunk struct {
	due  time.Time
	data []byte
}

// copy delays every chunk by the one-way time, keeping order: a reader stamps chunks
// as they arrive and the writer releases each when it is due.
func (p *delay) copy(dst, src net.Conn, toServer bool) {
	client := dst
	if toServer {
		client = src
	}
	c, _ := p.counts.LoadOrStore(client.RemoteAddr().String(), &turnCount{})
	count := c.(*turnCount)
	queue := make(chan chunk, 4096)
	go func() {
		defer close(queue)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if toServer {
					count.sent()
				} else {
					count.answered.Store(true)
				}
				queue <- chunk{time.Now().Add(p.oneWay), append([]byte(nil), buf[:n]...)}
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
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	src.Close() // ends the reader
	for range queue {
	}
}

// measureRTT is the round trip through a delay proxy, as measured: sleeps on this kind of
// machine are rounded up to about a millisecond, so the injected delay is reported as seen.
func measureRTT(s *figure, rtt time.Duration) time.Duration {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	s.check(err, "echo listen")
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	p := delayProxy(s, l.Addr().String(), rtt)
	c, err := net.Dial("tcp", p.Addr())
	s.check(err, "dial delay proxy")
	defer c.Close()
	var xs []float64
	b := []byte{1}
	for range 50 {
		began := time.Now()
		if _, err := c.Write(b); err != nil {
			s.check(err, "ping")
		}
		if _, err := c.Read(b); err != nil {
			s.check(err, "pong")
		}
		xs = append(xs, float64(time.Since(began)))
	}
	return time.Duration(median(xs))
}
