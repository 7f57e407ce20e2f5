package main

import (
	"net"
	"strings"
	"sync"
	"time"
)

// On loopback a round trip costs microseconds, so one transaction per message is nearly
// free and every figure is bound by CPU. A service reaches CloudAMQP and a managed Postgres
// over a network; delayProxy adds a fixed one-way delay to every byte in both directions
// (order kept, throughput not limited) to show what round trips cost.
type delayProxy struct {
	target   string
	oneWay   time.Duration
	listener net.Listener
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func newDelayProxy(s *scope, target string, rtt time.Duration) *delayProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	s.check(err, "delay proxy listen")
	p := &delayProxy{target: target, oneWay: rtt / 2, listener: l, conns: map[net.Conn]struct{}{}}
	go p.serve()
	s.Cleanup(p.close)
	return p
}

func (p *delayProxy) addr() string { return p.listener.Addr().String() }

// via rewrites a URL or DSN that names target to go through the proxy.
func (p *delayProxy) via(url string) string { return strings.Replace(url, p.target, p.addr(), 1) }

func (p *delayProxy) close() {
	p.listener.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *delayProxy) serve() {
	for {
		in, err := p.listener.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

type chunk struct {
	due  time.Time
	data []byte
}

func (p *delayProxy) pipe(dst, src net.Conn) {
	queue := make(chan chunk, 4096)
	go func() {
		defer close(queue)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
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
	dst.Close()
	src.Close()
	for range queue { // the reader ends once src is closed
	}
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// measureRTT is the round trip through a delay proxy, as measured: sleeps on this kind of
// machine are rounded up to about a millisecond, so the injected delay is reported as seen.
func measureRTT(s *scope, rtt time.Duration) time.Duration {
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
	p := newDelayProxy(s, l.Addr().String(), rtt)
	c, err := net.Dial("tcp", p.addr())
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
