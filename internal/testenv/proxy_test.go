package testenv

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A cut closes a client whose proxy is still dialing a target that does not answer (a
// stopped process, a full backlog): the client sees its connection end at once, and
// clients accepted meanwhile are not held behind the stuck dial.
func TestACutClosesAClientWhoseTargetDoesNotAnswer(t *testing.T) {
	target := unansweringTarget(t)
	p, err := ListenProxy(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range 3 { // the first fills the target's backlog; the others' dials hang
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	// The three accepted, and the first one's target dialed.
	err = WaitUntil(context.Background(), 5*time.Second, "the proxy to hold four sockets", func() (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.conns) >= 4, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	for i, c := range clients {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("client %d: the cut did not close its connection (%v)", i+1, err)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// unansweringTarget listens on a loopback port with a backlog of one and never accepts:
// once the backlog is full the kernel drops further connection attempts, which wait.
func unansweringTarget(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

// A cut proxy keeps its port, refusing clients, so that Restore finds it free; Close lets
// it go.
func TestACutProxyKeepsItsPortUntilClosed(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	listen := func() *Proxy {
		p, err := ListenProxy(target.Addr().String(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	p := listen()
	p.Cut()
	if _, err := holdPort(p.port, false); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("the port of a cut proxy was free to take: %v", err)
	}
	if _, err := net.Dial("tcp", p.Addr()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a cut proxy should refuse: %v", err)
	}
	p.Close()
	h, err := holdPort(p.port, false) // no connection was made that could linger on it
	if err != nil {
		t.Fatalf("a closed proxy kept its port: %v", err)
	}
	releasePorts([]portHold{h})

	q := listen()
	defer q.Close()
	q.Cut()
	q.Restore(t)
	c, err := net.Dial("tcp", q.Addr())
	if err != nil {
		t.Fatalf("a restored proxy should accept: %v", err)
	}
	c.Close()
}
