package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// largeMessageBytes is the body of each message of the peak-RSS figure: GitHub's cap on a
// webhook payload, 25 MB, just under the default MAX_MESSAGE_BYTES (25 MiB).
const largeMessageBytes = 25_000_000

// rssResult is the peak resident set of `brokerswitch worker` while it applies a queue of
// 25 MB messages with one configuration.
type rssResult struct {
	Messages    int
	Prefetch    int
	MemoryLimit string // MEMORY_LIMIT, "" when not set
	WorstCaseMB float64
	PeakRSSMB   float64
	Done        time.Duration
}

// largePush is a push event padded to largeMessageBytes with a field no table stores.
func largePush(s *scope) payloads.Event {
	ev, err := payloads.Build("push", "", func(p map[string]any) { p["padding"] = "" })
	s.check(err, "push")
	pad := largeMessageBytes - len(ev.Body)
	ev, err = payloads.Build("push", "", func(p map[string]any) { p["padding"] = strings.Repeat("x", pad) })
	s.check(err, "push")
	return ev
}

// runRSS publishes n messages of 25 MB to pushes, starts `brokerswitch worker` as its own
// process with env on top of the defaults, and samples its resident set until all are
// applied. Prefetch counts messages, so the consumer holds up to min(n, PREFETCH) of them.
func runRSS(s *scope, n int, env map[string]string, binary, logDir string) rssResult {
	ctx := context.Background()
	st := newStack(s, 1, stackOptions{env: env})
	p := st.producer()
	for range n { // one 25 MB body at a time in this process
		s.check(p.Publish(ctx, messages(nil, largePush(s))...), "publish")
	}
	_ = p.Close()

	worst, _ := st.cfg.WorstCaseMemory()
	res := rssResult{Messages: n, Prefetch: st.cfg.Prefetch, MemoryLimit: env["MEMORY_LIMIT"], WorstCaseMB: float64(worst) / (1 << 20)}
	began := time.Now()
	w := st.startWorkerProcess(binary, logDir)
	s.check(st.waitApplied(ctx, int64(n), 10*time.Minute), "apply the large messages (worker log: "+w.logPath+")")
	res.Done = time.Since(began)
	res.PeakRSSMB = w.peakRSSMB()
	w.stop()
	if e := st.errors(ctx); e > 0 {
		s.Fatalf("%d large messages ended in error", e)
	}
	return res
}

// rssConfigs are the peak-RSS figure's settings: the defaults, and a prefetch of 2 under a
// MEMORY_LIMIT that its worst case fits.
func rssConfigs() []map[string]string {
	return []map[string]string{
		{},
		{"PREFETCH": "2", "MEMORY_LIMIT": strconv.Itoa(1300 << 20)},
	}
}
