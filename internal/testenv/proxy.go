package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Copy moves one direction of a proxied connection, from src to dst, until either side
// fails; toServer tells which direction it is. io.Copy fits, and the benchmark's proxies
// count AMQP frames or add latency on the way.
type Copy func(dst, src net.Conn, toServer bool)

// Proxy forwards TCP connections to a target and can be cut and restored, so that a
// test can make a broker unreachable and bring it back on the same address.
type Proxy struct {
	target string
	addr   string
	copy   Copy

	mu       sync.Mutex
	listener net.Listener
	stopDial context.CancelFunc // ends the dials of the clients listener accepted
	conns    map[net.Conn]struct{}
	// quiet is open while the proxy is silent (Silence), closed by Speak or Cut; nil
	// while it forwards.
	quiet chan struct{}
}

// NewProxy listens on a free loopback port and forwards to target until the test ends.
func NewProxy(tb T, target string) *Proxy {
	tb.Helper()
	p, err := ListenProxy(target, nil)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(p.Cut)
	return p
}

// ListenProxy listens on a free loopback port and forwards to target through copy (nil
// copies bytes as they come) until Cut; the caller cuts it when done.
func ListenProxy(target string, copy Copy) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	if copy == nil {
		copy = func(dst, src net.Conn, _ bool) { _, _ = io.Copy(dst, src) }
	}
	p := &Proxy{target: target, addr: l.Addr().String(), copy: copy, conns: map[net.Conn]struct{}{}}
	p.serve(l)
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.addr }

// Silence stops forwarding, both ways, on every connection and every new one, without
// closing any: what either side sends is held, unacknowledged past the socket buffers, as
// on a link gone silent (a partition, a lost NAT entry, a peer's host frozen), until
// Speak or Cut. Neither side learns of it but by its own timeouts.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet == nil {
		p.quiet = make(chan struct{})
	}
}

// Speak forwards again what Silence held, and what comes next.
func (p *Proxy) Speak() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.speak()
}

func (p *Proxy) speak() {
	if p.quiet != nil {
		close(p.quiet)
		p.quiet = nil
	}
}

// awaitSpeaking blocks while the proxy is silent.
func (p *Proxy) awaitSpeaking() {
	p.mu.Lock()
	q := p.quiet
	p.mu.Unlock()
	if q != nil {
		<-q
	}
}

// heldConn is one side of a proxied connection whose writes wait while the proxy is silent.
type heldConn struct {
	net.Conn
	p *Proxy
}

func (c heldConn) Write(b []byte) (int, error) {
	c.p.awaitSpeaking()
	return c.Conn.Write(b)
}

// Cut closes every connection and refuses new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.speak()
	if p.listener != nil {
		p.listener.Close()
		p.listener = nil
		p.stopDial()
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore accepts connections again on the same address.
func (p *Proxy) Restore(tb T) {
	tb.Helper()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		tb.Fatalf("testenv: proxy restore on %s: %v", p.addr, err)
	}
	p.serve(l)
}

func (p *Proxy) serve(l net.Listener) {
	ctx, stop := context.WithCancel(context.Background())
	p.mu.Lock()
	p.listener, p.stopDial = l, stop
	p.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			// Dialed apart: a target that is slow to answer must not hold up the next
			// client, nor keep this one past a cut.
			go p.connect(ctx, l, in)
		}
	}()
}

// proxyDialTimeout bounds a proxy's dial of its target: on loopback a dial answers at
// once unless the target is stopped (SIGSTOP) or its backlog is full.
const proxyDialTimeout = 5 * time.Second

// connect dials the target for a client accepted on l and pipes the two, unless the proxy
// was cut meanwhile: a cut ends the dial (ctx).
func (p *Proxy) connect(ctx context.Context, l net.Listener, in net.Conn) {
	if !p.track(l, in) {
		return
	}
	d := net.Dialer{Timeout: proxyDialTimeout}
	out, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		p.forget(in)
		in.Close()
		return
	}
	if !p.track(l, out) {
		p.forget(in)
		in.Close()
		return
	}
	go p.pipe(out, in, true)
	go p.pipe(in, out, false)
}

// track registers a connection unless the proxy was cut, or cut and restored, since l
// accepted it; then it closes it.
func (p *Proxy) track(l net.Listener, c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener != l {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) pipe(dst, src net.Conn, toServer bool) {
	p.copy(heldConn{Conn: dst, p: p}, src, toServer)
	// A close is news too: a silent link does not carry it.
	p.awaitSpeaking()
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// SlowLargeFrames is a Copy that holds every read from the broker larger than 16 KiB (a
// large payload) for delay, as a slow link does, and lets the rest through at once.
func SlowLargeFrames(delay time.Duration) Copy {
	return func(dst, src net.Conn, toServer bool) {
		Pass(dst, src, func(b []byte) {
			if !toServer && len(b) > 16<<10 {
				time.Sleep(delay)
			}
		})
	}
}

// Pass copies src to dst until either side fails, showing each read to see before it is
// written on: the body of a Copy that watches or slows the traffic.
func Pass(dst, src net.Conn, see func([]byte)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			see(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
