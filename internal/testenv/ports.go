package testenv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// A dev server's ports must stay its own while it is down, or its restart fails "address
// already in use" and the test that stopped it with it (a soak seed's server did not come
// back: its port was taken while it was stopped). Two things take a free port: the kernel,
// which gives a port of its ephemeral range to every outgoing connection and every
// listener on port 0, and thousands of those are made while a test's server is down; and
// another test binary looking for free ports. So a server's ports are chosen outside the
// ephemeral range, and while no server listens on them they are held: bound but not
// listening, so that nobody else can bind them and a client is refused, as by a server
// that is down.
//
// A port is first held strictly, which fails where anything at all is bound, another
// binary's hold included. When the server stops, its own closed connections linger on the
// port in TIME_WAIT for a minute, so the port is held again as Go's listeners bind, with
// SO_REUSEADDR: that still keeps it from every outgoing connection, from every listener on
// port 0 and from every strict hold.

// portHold is one loopback port held so.
type portHold struct {
	port int
	fd   int
}

// holdPorts holds n distinct loopback ports outside the kernel's ephemeral range.
func holdPorts(n int) ([]portHold, error) {
	lo, hi := ephemeralRange()
	var held []portHold
	for tries := 0; len(held) < n; tries++ {
		if tries == 1000 {
			releasePorts(held)
			return nil, fmt.Errorf("testenv: no %d free loopback ports outside %d-%d", n, lo, hi)
		}
		port := 10000 + rand.IntN(55536)
		if port >= lo && port <= hi || holds(held, port) {
			continue
		}
		h, err := holdPort(port, false)
		if errors.Is(err, syscall.EADDRINUSE) {
			continue
		}
		if err != nil {
			releasePorts(held)
			return nil, err
		}
		held = append(held, h)
	}
	return held, nil
}

// holdPort binds 127.0.0.1:port without listening on it; again is a port whose server has
// just stopped.
func holdPort(port int, again bool) (portHold, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return portHold{}, fmt.Errorf("testenv: socket: %w", err)
	}
	if again {
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			_ = syscall.Close(fd)
			return portHold{}, fmt.Errorf("testenv: hold port %d: %w", port, err)
		}
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return portHold{}, fmt.Errorf("testenv: hold port %d: %w", port, err)
	}
	return portHold{port: port, fd: fd}, nil
}

// releasePorts lets the ports go, for the server that is about to listen on them.
func releasePorts(held []portHold) {
	for _, h := range held {
		_ = syscall.Close(h.fd)
	}
}

func holds(held []portHold, port int) bool {
	for _, h := range held {
		if h.port == port {
			return true
		}
	}
	return false
}

// ephemeralRange is the kernel's range of ports for outgoing connections and port 0,
// Linux's default when it cannot be read.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return lo, hi
	}
	return l, h
}
