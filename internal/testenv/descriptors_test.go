package testenv

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// A burst of connections to one server shows in the description as that many sockets to
// its port, and the watch's peak holds it after they are closed.
func TestDescriptorsNameTheirSource(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Counted before the watch starts: its samples briefly open descriptors of their own
	// (/proc's entries), which a count taken beside them would hold as the baseline.
	before := countDescriptors("self")
	w := WatchDescriptors(10 * time.Millisecond)
	var conns []net.Conn
	for range 50 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	want := fmt.Sprintf("50 tcp to :%s established", port)
	if got := DescribeDescriptors("self"); !strings.Contains(got, want) {
		t.Errorf("described %q, want it to hold %q", got, want)
	}
	err = WaitUntil(context.Background(), 10*time.Second, "a sample of the burst", func() (bool, error) {
		return w.Peak() >= before+50, nil
	})
	for _, c := range conns {
		c.Close()
	}
	report := w.Stop()
	if err != nil {
		t.Fatalf("%v: %s", err, report)
	}
	if !strings.Contains(report, "tcp to :"+port) {
		t.Errorf("the report does not name the burst's port %s: %s", port, report)
	}
}

// The sockets a proxy holds are described as that proxy's, by side and state, and a
// silent proxy says so and how many clients connected through the silence: a burst of
// retries through a silent link names its link.
func TestDescriptorsNameTheProxyThatHoldsThem(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // holds what it accepts until the listener closes
		var accepted []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range accepted {
					c.Close()
				}
				return
			}
			accepted = append(accepted, c)
		}
	}()
	p := NewProxy(t, l.Addr().String())
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 20 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	proxy := fmt.Sprintf("tcp of proxy %s → %s", p.Addr(), l.Addr())
	want := "40 " + proxy + " (20 client's side established, 20 target's side established)"
	var got string
	err = WaitUntil(context.Background(), 10*time.Second, "the proxy's sockets described", func() (bool, error) {
		got = DescribeDescriptors("self")
		return strings.Contains(got, want), nil
	})
	if err != nil {
		t.Fatalf("described %q, want it to hold %q", got, want)
	}
	p.Silence()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, c)
	want = proxy + ", silent for "
	err = WaitUntil(context.Background(), 10*time.Second, "the silent proxy described", func() (bool, error) {
		got = DescribeDescriptors("self")
		return strings.Contains(got, want) && strings.Contains(got, ", 1 clients connected since"), nil
	})
	if err != nil {
		t.Fatalf("described %q, want the proxy silent, one client connected since", got)
	}
}
