package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target and can be cut and restored, so that a
// test can make a broker unreachable and bring it back on the same address.
type Proxy struct {
	target string
	addr   string

	mu       sync.Mutex
	listener net.Listener
	conns    map[net.Conn]struct{}
}

// NewProxy listens on a free loopback port and forwards to target until the test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &Proxy{target: target, addr: l.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(l)
	tb.Cleanup(p.Cut)
	return p
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener != nil {
		p.listener.Close()
		p.listener = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore accepts connections again on the same address.
func (p *Proxy) Restore(tb testing.TB) {
	tb.Helper()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		tb.Fatalf("testenv: proxy restore on %s: %v", p.addr, err)
	}
	p.serve(l)
}

func (p *Proxy) serve(l net.Listener) {
	p.mu.Lock()
	p.listener = l
	p.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			if !p.track(l, in, out) {
				continue
			}
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
}

// track registers a connection pair unless the proxy was cut meanwhile.
func (p *Proxy) track(l net.Listener, in, out net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener != l {
		in.Close()
		out.Close()
		return false
	}
	p.conns[in] = struct{}{}
	p.conns[out] = struct{}{}
	return true
}

func (p *Proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
