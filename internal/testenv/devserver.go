package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The pinned dev server (server 1.29.1 on modernc.org/sqlite v1.34.1) keeps its whole
// database behind one SQLite connection. A call cancelled mid-statement, as a client's
// deadline or a killed worker's dropped connection does, interrupts that connection, and
// now and then it stays interrupted: every later call answers "interrupted (9)", and the
// clients read "Namespace test-N is not found". A fresh clone's CI run lost the RabbitMQ
// 4.0 quorum pass that way (six tests, 3 minutes of nothing but that answer). Upstream
// fixed it later (modernc.org/sqlite v1.51.0), in releases that do not build here. So the
// harness watches the server's log and, when it sees the database stuck, kills the server
// and starts it again on the same port and database file: to the service and the tests
// it is a short Temporal outage, which the service rides out, with every namespace and
// workflow kept.

// stuckInterrupts in stuckWindow is a database answering every call "interrupted (9)":
// a call cancelled now and then logs one or two such lines; the stuck one logged about 30
// a second.
const (
	stuckInterrupts = 50
	stuckWindow     = 5 * time.Second
)

// interruptedMark is how the server logs a call its database refused as interrupted.
var interruptedMark = []byte("interrupted (9)")

// databaseStuck tells whether the interruptions seen, oldest first, are a stuck
// database rather than calls cancelled now and then.
func databaseStuck(seen []time.Time, now time.Time) bool {
	recent := 0
	for _, at := range seen {
		if now.Sub(at) <= stuckWindow {
			recent++
		}
	}
	return recent >= stuckInterrupts
}

// stuckWatch passes a dev server's log on to out and calls stuck, on its own goroutine,
// once the log shows the database stuck; it then starts counting afresh.
type stuckWatch struct {
	out   io.Writer
	stuck func()

	mu   sync.Mutex
	seen []time.Time
}

func (w *stuckWatch) Write(b []byte) (int, error) {
	if n := bytes.Count(b, interruptedMark); n > 0 {
		w.mu.Lock()
		now := time.Now()
		for range n {
			w.seen = append(w.seen, now)
		}
		if len(w.seen) > stuckInterrupts {
			w.seen = w.seen[len(w.seen)-stuckInterrupts:]
		}
		stuck := databaseStuck(w.seen, now)
		if stuck {
			w.seen = nil
		}
		w.mu.Unlock()
		if stuck && w.stuck != nil {
			go w.stuck()
		}
	}
	return w.out.Write(b)
}

// restart kills the dev server and starts it again on the same address, metrics port and
// database file. The kill loses nothing committed: a commit has written the write-ahead
// log, and without fsync it sits in the page cache, which outlives the process.
func (t *Temporal) restart() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.server == nil {
		return nil // stopped on purpose: nothing to restart
	}
	fmt.Fprintf(os.Stderr, "testenv: the dev server at %s answers every database call %q; restarting it on the same port and database file\n", t.addr, interruptedMark)
	killDevServer(t.addr)
	_ = t.stopLocked() // reaps the killed process
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := t.startLocked(ctx); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	t.restarts++
	return nil
}

// killDevServer sends SIGKILL to the dev server this process started on addr: a stuck
// server may not finish a graceful stop.
func killDevServer(addr string) {
	_, port, _ := strings.Cut(addr, ":")
	for _, pid := range descendants(os.Getpid()) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && args[1] == "server" && args[2] == "start-dev" && hasPort(args, port) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// hasPort tells whether a command line sets --port to port.
func hasPort(args []string, port string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--port" && args[i+1] == port {
			return true
		}
	}
	return false
}
