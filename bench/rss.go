package main

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// largeMessageBytes is the body of each message of the peak-RSS figure's first cases:
// GitHub's cap on a webhook payload, 25 MB, just under the default MAX_MESSAGE_BYTES
// (25 MiB).
const largeMessageBytes = 25_000_000

// brokerMaxMessageBytes is RabbitMQ 4's default max_message_size: the largest body a
// broker left at its defaults takes (3.x takes up to 128 MiB).
const brokerMaxMessageBytes = 16 << 20

// rssResult is the peak resident set of `brokerswitch worker` while it works through one
// case of the peak-RSS figure.
type rssResult struct {
	Case        string
	Messages    int // applied
	ToError     int // moved to -error unread, over MAX_MESSAGE_BYTES
	Prefetch    int
	MemoryLimit string // MEMORY_LIMIT, "" when not set
	LimitMB     float64
	WorstCaseMB float64
	PeakRSSMB   float64
	Done        time.Duration
}

// rssCase is one setting of the peak-RSS figure: the worker's environment on top of the
// stack's, and what waits on the queues when it starts.
type rssCase struct {
	name string
	env  map[string]string
	// fitLimit sets MEMORY_LIMIT to the least that start-up accepts for env's settings:
	// the worst case under the Go runtime's soft limit. Derived, not written down, so that
	// a change to the worst case's arithmetic cannot make the worker refuse the case.
	fitLimit bool
	// rtt, when set, is the round trip added between the worker and RabbitMQ and Postgres:
	// what arrives while a client waits for the broker's answer grows with it.
	rtt time.Duration
	// fill publishes the case's messages and says how many the worker must apply and how
	// many it must move to -error.
	fill func(s *figure, p *simulate.Producer) (applied, toError int)
}

// kubernetesSample is the worker's memory settings in deploy/k8s (configmap.yaml and the
// container's limit, which the Deployment passes as MEMORY_LIMIT).
func kubernetesSample() map[string]string {
	return map[string]string{"PREFETCH": "13", "MAX_MESSAGE_BYTES": strconv.Itoa(4 << 20), "MAX_BATCH_BYTES": strconv.Itoa(4 << 20), "MEMORY_LIMIT": "512Mi"}
}

// rssCases are the peak-RSS figure's cases: 25 MB pushes with the defaults and with a
// prefetch of 2 under the least MEMORY_LIMIT its worst case fits; then, with the Kubernetes
// sample's settings, bodies as large as a broker at its defaults takes on every queue, and
// the costliest bodies to apply.
func rssCases(n int) []rssCase {
	// An event of each of the four default queues, installations last.
	rssEvents := []string{"pull_request", "issues", "push", "installation"}
	pushes := func(s *figure, p *simulate.Producer) (int, int) {
		for range n { // one body at a time in this process
			publish(s, p, padded(s, "push", largeMessageBytes))
		}
		return n, 0
	}
	return []rssCase{
		{name: fmt.Sprintf("%d pushes of 25 MB, defaults", n), fill: pushes},
		{name: fmt.Sprintf("%d pushes of 25 MB, PREFETCH 2", n), env: map[string]string{"PREFETCH": "2"}, fitLimit: true, fill: pushes},
		{name: "Kubernetes sample, 20 bodies of 16 MiB on each queue, each followed by a small event", env: kubernetesSample(),
			fill: func(s *figure, p *simulate.Producer) (int, int) {
				for range 20 {
					for _, event := range rssEvents {
						publish(s, p, padded(s, event, brokerMaxMessageBytes))
						publish(s, p, padded(s, event, 0))
					}
				}
				return 20 * len(rssEvents), 20 * len(rssEvents)
			}},
		unreadableAhead("on loopback", 0),
		unreadableAhead("the broker and Postgres 20 ms away", 20*time.Millisecond),
		{name: "Kubernetes sample, the costliest bodies: 4 installations listing repositories, 20 bodies on each other queue, all just under MAX_MESSAGE_BYTES", env: kubernetesSample(),
			fill: func(s *figure, p *simulate.Producer) (int, int) {
				const size = 4<<20 - 1<<10
				for range 4 {
					ev, err := payloads.RepositoryList("installation", size)
					s.check(err, "installation")
					publish(s, p, ev)
				}
				for range 20 {
					for _, event := range rssEvents[:3] {
						publish(s, p, padded(s, event, size))
					}
				}
				return 4 + 20*3, 0
			}},
	}
}

// unreadableAhead is the case of an unreadable message (headers nested 33 deep) at the
// head of each queue, ahead of 10 bodies of 16 MiB (over the Kubernetes sample's
// MAX_MESSAGE_BYTES) each followed by a small event: the move to -error scans PREFETCH+1
// deliveries with those bodies among them.
func unreadableAhead(where string, rtt time.Duration) rssCase {
	rssEvents := []string{"pull_request", "issues", "push", "installation"}
	return rssCase{name: "Kubernetes sample, an unreadable message (headers nested 33 deep) at the head of each queue, ahead of 10 bodies of 16 MiB each followed by a small event, " + where,
		env: kubernetesSample(), rtt: rtt,
		fill: func(s *figure, p *simulate.Producer) (int, int) {
			unreadable := amqp.Table{"x-deep": nestedTable(33)}
			for _, event := range rssEvents {
				s.check(p.Publish(context.Background(), messages(unreadable, padded(s, event, 0))...), "publish")
			}
			for range 10 {
				for _, event := range rssEvents {
					publish(s, p, padded(s, event, brokerMaxMessageBytes))
					publish(s, p, padded(s, event, 0))
				}
			}
			return 10 * len(rssEvents), 11 * len(rssEvents)
		}}
}

// nestedTable is a header table nested depth deep: amqp091-go refuses to read one
// nested more than 32 deep, so a message carrying it is moved to -error by the raw client.
func nestedTable(depth int) amqp.Table {
	t := amqp.Table{"leaf": "x"}
	for range depth {
		t = amqp.Table{"in": t}
	}
	return t
}

// padded is an event padded to size bytes (at least its example's) with a field no table
// stores.
func padded(s *figure, event string, size int) payloads.Event {
	ev, err := payloads.Build(event, "", func(p map[string]any) { p["padding"] = "" })
	s.check(err, event)
	if pad := size - len(ev.Body); pad > 0 {
		ev, err = payloads.Build(event, "", func(p map[string]any) { p["padding"] = strings.Repeat("x", pad) })
		s.check(err, event)
	}
	return ev
}

func publish(s *figure, p *simulate.Producer, ev payloads.Event) {
	s.check(p.Publish(context.Background(), messages(nil, ev)...), "publish")
}

// runRSS publishes a case's messages, starts `brokerswitch worker` as its own process with
// the case's environment, and samples its resident set until all are applied or moved.
func runRSS(s *figure, c rssCase) rssResult {
	ctx := context.Background()
	st := s.newStack(1, stackOptions{env: c.env, rtt: c.rtt})
	p := st.producer()
	applied, toError := c.fill(s, p)
	_ = p.Close()

	worst, _ := st.Config.WorstCaseMemory()
	limit, env := st.Config.MemoryLimit, map[string]string{}
	if c.fitLimit {
		limit = fittedMemoryLimit(worst)
		env["MEMORY_LIMIT"] = strconv.FormatInt(limit, 10)
	}
	res := rssResult{Case: c.name, Messages: applied, ToError: toError, Prefetch: st.Config.Prefetch, MemoryLimit: cmp.Or(env["MEMORY_LIMIT"], c.env["MEMORY_LIMIT"]),
		LimitMB: float64(limit) / (1 << 20), WorstCaseMB: float64(worst) / (1 << 20)}
	began := time.Now()
	w := st.startWorkerProcess(env)
	s.check(st.waitApplied(int64(applied), 10*time.Minute), "apply the messages (worker log: "+w.Log+")")
	s.check(testenv.WaitUntil(ctx, 5*time.Minute, fmt.Sprintf("%d messages in -error", toError), func() (bool, error) {
		n, err := st.Ready(0, st.ErrorQueues()...)
		return err == nil && n >= toError, err
	}), "move the large messages (worker log: "+w.Log+")")
	res.Done = time.Since(began)
	res.PeakRSSMB = w.PeakRSSMB()
	w.Stop()
	if e := st.InError(); e > 0 {
		s.Fatalf("%d messages ended in error in the ledger (worker log: %s)", e, w.Log)
	}
	return res
}

// fittedMemoryLimit is the least MEMORY_LIMIT, in whole MiB, whose soft limit (90%,
// config.SoftMemoryLimit) holds worst.
func fittedMemoryLimit(worst int64) int64 {
	limit := (worst + 8) / 9 * 10
	return (limit + 1<<20 - 1) >> 20 << 20
}

// rssRows are the peak-RSS figure's rows: each case's peak beside its worst case, and
// whether it stayed within MEMORY_LIMIT where one is set.
func (r *results) rssRows(add func(row)) {
	for _, c := range r.RSS {
		settings := fmt.Sprintf("PREFETCH %d, worst case %.0f MiB", c.Prefetch, c.WorstCaseMB)
		target, st := "", ""
		if c.LimitMB > 0 {
			target, st = fmt.Sprintf("≤ MEMORY_LIMIT (%s)", c.MemoryLimit), status(c.PeakRSSMB <= c.LimitMB)
		}
		done := fmt.Sprintf("%d applied", c.Messages)
		if c.ToError > 0 {
			done += fmt.Sprintf(", %d moved to -error unread", c.ToError)
		}
		add(row{"Peak RSS of `brokerswitch worker` (VmHWM): " + c.Case, fmt.Sprintf("%.0f MB", c.PeakRSSMB), "1 run",
			fmt.Sprintf("%s; %s in %.1f s", settings, done, c.Done.Seconds()), target, st})
	}
}
