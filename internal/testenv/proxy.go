package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
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
	port   int
	addr   string
	copy   Copy

	mu       sync.Mutex
	listener net.Listener
	held     []portHold         // the port while cut (ports.go says why)
	stopDial context.CancelFunc // ends the dials of the clients listener accepted
	// conns are the sockets the proxy holds, both sides of every connection, each with
	// its inode, by which a description of the process's descriptors names the proxy.
	conns map[net.Conn]uint64
	// quiet is open while the proxy is silent (Silence), closed by Speak or Cut; nil
	// while it forwards. silentSince is when it went silent, and silentAccepts how
	// many clients connected since.
	quiet         chan struct{}
	silentSince   time.Time
	silentAccepts int
}

// NewProxy listens on a free loopback port and forwards to target until the test ends.
func NewProxy(tb T, target string) *Proxy {
	tb.Helper()
	p, err := ListenProxy(target, nil)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// ListenProxy listens on a free loopback port and forwards to target through copy (nil
// copies bytes as they come) until Cut; the caller closes it when done.
func ListenProxy(target string, copy Copy) (*Proxy, error) {
	held, err := holdPorts(1)
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	if copy == nil {
		copy = func(dst, src net.Conn, _ bool) { _, _ = io.Copy(dst, src) }
	}
	port := held[0].port
	p := &Proxy{target: target, port: port, addr: "127.0.0.1:" + strconv.Itoa(port), copy: copy, conns: map[net.Conn]uint64{}, held: held}
	if err := p.listen(); err != nil {
		return nil, err
	}
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.addr }

// Silence stops forwarding, both ways, on every connection and every new one, without
// closing any, as on a link gone silent (a partition, a lost NAT entry, a peer's host
// frozen), until Speak or Cut. Neither side learns of it but by its own timeouts.
//
// What either side sends is held (heldMax bytes a direction, then the sender's socket
// buffers fill) and delivered on Speak. A side that closes meanwhile is let go at once:
// the other side learns of the close only once the link speaks, after what was held
// for it. A client that connects meanwhile reaches nothing, as its SYN would not: the
// target is dialed for it once the link speaks, if it still waits, and one that gave up
// leaves nothing behind. So a client that retries through a silent link costs the
// proxy nothing per attempt.
func (p *Proxy) Silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet == nil {
		p.quiet = make(chan struct{})
		p.silentSince, p.silentAccepts = time.Now(), 0
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

// silent is the channel Speak closes while the proxy is silent, nil while it forwards.
func (p *Proxy) silent() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quiet
}

// awaitSpeaking blocks while the proxy is silent.
func (p *Proxy) awaitSpeaking() {
	for q := p.silent(); q != nil; q = p.silent() {
		<-q
	}
}

// Cut closes every connection and refuses new ones, keeping the port for Restore.
func (p *Proxy) Cut() {
	defer proxies.forget(p)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.speak()
	if p.listener != nil {
		p.listener.Close()
		p.listener = nil
		p.stopDial()
		if h, err := holdPort(p.port, true); err == nil {
			p.held = []portHold{h} // else Restore says the port was taken
		}
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Close cuts the proxy for good and lets its port go.
func (p *Proxy) Close() {
	p.Cut()
	p.mu.Lock()
	defer p.mu.Unlock()
	releasePorts(p.held)
	p.held = nil
}

// Restore accepts connections again on the same address.
func (p *Proxy) Restore(tb T) {
	tb.Helper()
	if err := p.listen(); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

// listen lets the held port go and listens on it.
func (p *Proxy) listen() error {
	p.mu.Lock()
	releasePorts(p.held)
	p.held = nil
	p.mu.Unlock()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("proxy listen on %s: %w", p.addr, err)
	}
	p.serve(l)
	return nil
}

func (p *Proxy) serve(l net.Listener) {
	ctx, stop := context.WithCancel(context.Background())
	p.mu.Lock()
	p.listener, p.stopDial = l, stop
	p.mu.Unlock()
	proxies.add(p)
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

// connect dials the target for a client accepted on l, once the link speaks, and pipes
// the two, unless the client gave up or the proxy was cut meanwhile: a cut ends the
// dial (ctx).
func (p *Proxy) connect(ctx context.Context, l net.Listener, in net.Conn) {
	if !p.track(l, in) {
		return
	}
	src, waits := p.awaitLink(in)
	if !waits {
		p.drop(in)
		return
	}
	d := net.Dialer{Timeout: proxyDialTimeout}
	out, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		p.drop(in)
		return
	}
	if !p.track(l, out) {
		p.drop(in)
		return
	}
	go p.pipe(&heldConn{Conn: out, p: p}, src, true)
	go p.pipe(&heldConn{Conn: in, p: p}, out, false)
}

// track registers a connection unless the proxy was cut, or cut and restored, since l
// accepted it; then it closes it.
func (p *Proxy) track(l net.Listener, c net.Conn) bool {
	ino := socketInode(c)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener != l {
		c.Close()
		return false
	}
	if p.quiet != nil && c.LocalAddr().String() == p.addr {
		p.silentAccepts++
	}
	p.conns[c] = ino
	return true
}

// drop closes a connection the proxy holds and forgets it.
func (p *Proxy) drop(c net.Conn) {
	if h, ok := c.(heardConn); ok {
		c = h.Conn
	}
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst until src's side ends: its peer closed, or dst failed. The peer
// that closed learns nothing more and is let go at once; dst's learns of the close once
// the link speaks, after what was held for it, as a silent link does not carry a close.
func (p *Proxy) pipe(dst *heldConn, src net.Conn, toServer bool) {
	p.copy(dst, src, toServer)
	p.drop(src)
	p.awaitSpeaking()
	dst.mu.Lock()
	_ = dst.flush()
	dst.mu.Unlock()
	p.drop(dst.Conn)
}

// heldMax is the most a silent proxy holds in memory for one direction of a connection:
// about what a socket's buffers take on loopback. Past it the copy waits, the sender's
// buffers fill, and its writes block, as on a real silent link.
const heldMax = 256 << 10

// heldConn is one side of a proxied connection, written by one direction's copy: while
// the proxy is silent its writes are held, up to heldMax, and written once it speaks.
// A write that returns at once lets the copy read on, and see its source close.
type heldConn struct {
	net.Conn
	p *Proxy

	mu   sync.Mutex
	held []byte
	err  error // of writing what was held: the connection is gone
}

func (c *heldConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		q := c.p.silent()
		if q == nil {
			if err := c.flush(); err != nil {
				return 0, err
			}
			return c.Conn.Write(b)
		}
		if len(c.held)+len(b) <= heldMax {
			if len(c.held) == 0 {
				go c.flushOnSpeaking()
			}
			c.held = append(c.held, b...)
			return len(b), nil
		}
		c.mu.Unlock()
		<-q
		c.mu.Lock()
	}
}

// flush writes what was held; c.mu is held.
func (c *heldConn) flush() error {
	if c.err == nil && len(c.held) > 0 {
		_, c.err = c.Conn.Write(c.held)
		c.held = nil
	}
	return c.err
}

// flushOnSpeaking writes what was held once the proxy speaks, should the copy have
// nothing more to write by then.
func (c *heldConn) flushOnSpeaking() {
	for {
		c.p.awaitSpeaking()
		c.mu.Lock()
		if c.p.silent() == nil {
			_ = c.flush()
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// awaitLink keeps a client accepted while the proxy is silent until it speaks: a silent
// link carries no SYN, so the target is not dialed for it yet. It reads what the client
// sends meanwhile, to let it go as soon as it gives up (closes), and returns it to be read
// from, what it sent first, and whether it still waits.
func (p *Proxy) awaitLink(in net.Conn) (net.Conn, bool) {
	var heard []byte
	buf := make([]byte, 4<<10)
	for q := p.silent(); q != nil; q = p.silent() {
		if len(heard) >= heldMax {
			<-q
			continue
		}
		n, err := readUntilClosed(in, buf, q)
		heard = append(heard, buf[:n]...)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, false
		}
	}
	if len(heard) == 0 {
		return in, true
	}
	return heardConn{Conn: in, r: io.MultiReader(bytes.NewReader(heard), in)}, true
}

// readUntilClosed reads once from c, or until q closes: then the read ends as past its
// deadline.
func readUntilClosed(c net.Conn, b []byte, q <-chan struct{}) (int, error) {
	stop, woken := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(woken)
		select {
		case <-q:
			_ = c.SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	n, err := c.Read(b)
	close(stop)
	<-woken
	_ = c.SetReadDeadline(time.Time{})
	return n, err
}

// heardConn is a client's connection whose reads start with what it sent while the link
// was silent.
type heardConn struct {
	net.Conn
	r io.Reader
}

func (c heardConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// proxyRegistry is the proxies of the test process that listen, for a description of its
// descriptors to name the sockets each holds (DescribeDescriptors): a proxy and the
// watch that describes the process meet nowhere else, so this is the package's one
// shared state.
type proxyRegistry struct {
	mu   sync.Mutex
	live map[*Proxy]struct{}
}

var proxies = &proxyRegistry{live: map[*Proxy]struct{}{}}

func (r *proxyRegistry) add(p *Proxy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live[p] = struct{}{}
}

func (r *proxyRegistry) forget(p *Proxy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.live, p)
}

// proxySocket is a socket a proxy holds: which proxy, and which side of a connection.
type proxySocket struct{ proxy, side string }

// sockets maps the inode of every socket a live proxy holds to what it is.
func (r *proxyRegistry) sockets() map[uint64]proxySocket {
	r.mu.Lock()
	live := slices.Collect(maps.Keys(r.live))
	r.mu.Unlock()
	out := map[uint64]proxySocket{}
	for _, p := range live {
		p.describeSockets(out)
	}
	return out
}

// describeSockets adds the proxy's sockets to into, by inode: the proxy named by its
// address and target and, while it is silent, since when and how many clients
// connected since (a client that retries through it), and the side of each.
func (p *Proxy) describeSockets(into map[uint64]proxySocket) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := fmt.Sprintf("proxy %s → %s", p.addr, p.target)
	if p.quiet != nil {
		name += fmt.Sprintf(", silent for %s, %d clients connected since",
			time.Since(p.silentSince).Round(100*time.Millisecond), p.silentAccepts)
	}
	for c, ino := range p.conns {
		side := "target's side"
		if c.LocalAddr().String() == p.addr {
			side = "client's side"
		}
		into[ino] = proxySocket{name, side}
	}
}

// socketInode is the inode of c's socket, by which /proc/PID/fd names it
// (socket:[inode]); 0 when it has none.
func socketInode(c net.Conn) uint64 {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var ino uint64
	_ = raw.Control(func(fd uintptr) {
		var st syscall.Stat_t
		if syscall.Fstat(int(fd), &st) == nil {
			ino = st.Ino
		}
	})
	return ino
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
