package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A silenced proxy holds what either side sends without closing anything, and delivers it
// once it speaks again.
func TestASilencedProxyHoldsTrafficWithoutClosing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = io.Copy(c, c) // echo
		}
	}()
	p := NewProxy(t, l.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	echo := func(within time.Duration) (string, error) {
		buf := make([]byte, 2)
		_ = c.SetReadDeadline(time.Now().Add(within))
		_, err := io.ReadFull(c, buf)
		return string(buf), err
	}

	_, err = c.Write([]byte("a1"))
	require.NoError(t, err)
	got, err := echo(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "a1", got)

	p.Silence()
	_, err = c.Write([]byte("b2"))
	require.NoError(t, err, "the link is silent, not closed")
	_, err = echo(300 * time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "nothing comes back, and nothing closes: %v", err)

	p.Speak()
	got, err = echo(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "b2", got)
}

// A silent link carries no SYN: a client that connects meanwhile does not reach the
// target, which hears from it only once the link speaks, if the client still waits,
// with what it sent meanwhile first.
func TestASilentLinkCarriesNoNewConnection(t *testing.T) {
	target, accepted := acceptingTarget(t)
	p := NewProxy(t, target)
	p.Silence()
	gaveUp, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = gaveUp.Write([]byte("first"))
	require.NoError(t, err)
	require.NoError(t, gaveUp.Close())
	waits, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = waits.Close() })
	_, err = waits.Write([]byte("second"))
	require.NoError(t, err)

	// The one that gave up is let go; the one that waits is held, and nothing is dialed.
	require.NoError(t, WaitUntil(context.Background(), 5*time.Second, "the proxy to hold the waiting client alone", func() (bool, error) {
		n := proxyHolds(p)
		return n == 1, fmt.Errorf("%d sockets", n)
	}))
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("the target was reached through a silent link")
	case <-time.After(300 * time.Millisecond): // nothing may arrive: the link is silent
	}

	p.Speak()
	var c net.Conn
	select {
	case c = <-accepted:
		t.Cleanup(func() { _ = c.Close() })
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting client does not reach the target once the link speaks")
	}
	got := make([]byte, len("second"))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, "second", string(got), "what the waiting client sent comes first")
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("the client that gave up reached the target once the link spoke")
	default:
	}
}

// A side that closes while the link is silent is let go at once; the other side's socket
// stays, as a real partition leaves it, and learns of the close once the link speaks,
// after what was held for it.
func TestACloseDuringSilenceReachesTheOtherSideOnlyOnSpeak(t *testing.T) {
	target, accepted := acceptingTarget(t)
	p := NewProxy(t, target)
	client, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	s := <-accepted
	t.Cleanup(func() { _ = s.Close() })

	p.Silence()
	_, err = client.Write([]byte("bye"))
	require.NoError(t, err)
	require.NoError(t, client.Close())
	require.NoError(t, WaitUntil(context.Background(), 5*time.Second, "the client's side let go", func() (bool, error) {
		n := proxyHolds(p)
		return n == 1, fmt.Errorf("%d sockets", n)
	}))
	require.NoError(t, s.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = s.Read(make([]byte, 1))
	require.True(t, isTimeout(err), "the server hears nothing while the link is silent: %v", err)

	p.Speak()
	require.NoError(t, s.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, err := io.ReadAll(s)
	require.NoError(t, err, "the close arrives after the held bytes")
	require.Equal(t, "bye", string(got))
}

// proxyHolds is how many sockets p holds.
func proxyHolds(p *Proxy) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// acceptingTarget listens on a loopback port until the test ends and hands over every
// connection it accepts, for the test to close.
func acceptingTarget(t *testing.T) (string, <-chan net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return l.Addr().String(), accepted
}
