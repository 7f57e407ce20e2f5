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
	w := WatchDescriptors(10 * time.Millisecond)
	before := countDescriptors("self")
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
