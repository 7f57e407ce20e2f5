//go:build integration

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// summary is one scenario's line in the table TestMain prints at the end.
type summary struct {
	Scenario  string
	Published int
	Poison    int
	Applied   int
	Dups      int
	Order     int
	Lost      int
	Lag       string
	Took      time.Duration
	Passed    bool
}

var (
	summariesMu sync.Mutex
	summaries   []summary
)

// producer builds a simulator publishing to the stack's brokers directly and notifying
// its API with the producer token; its log goes to a file the oracle reads back.
func (s *stack) producer(modify func(*simulate.Config)) (*simulate.Producer, string) {
	s.t.Helper()
	path := filepath.Join(s.t.TempDir(), "simulate.jsonl")
	f, err := os.Create(path)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { f.Close() })
	cfg := s.ProducerConfig()
	cfg.Log = f
	if modify != nil {
		modify(&cfg)
	}
	p, err := simulate.New(cfg)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = p.Close() })
	return p, path
}

// workload builds a workload's messages.
func (s *stack) workload(w simulate.Workload) []simulate.Message {
	s.t.Helper()
	msgs, err := w.Messages()
	require.NoError(s.t, err)
	return msgs
}

// report records the scenario's summary line, logs it, and fails the test on any
// difference the oracle found.
func (s *stack) report(v verdict, lag string) {
	s.t.Helper()
	line := summary{
		Scenario: s.t.Name(), Published: v.Published, Poison: v.Poison, Applied: v.Applied, Dups: v.Duplicates,
		Order: v.OrderViolations, Lost: v.Lost, Lag: lag, Took: time.Since(s.Began).Round(100 * time.Millisecond),
		Passed: len(v.Diffs) == 0,
	}
	summariesMu.Lock()
	summaries = append(summaries, line)
	summariesMu.Unlock()
	s.t.Logf("SUMMARY published=%d (poison %d) applied=%d duplicates=%d order-violations=%d lost=%d switch-lag=%s took=%s",
		line.Published, line.Poison, line.Applied, line.Dups, line.Order, line.Lost, line.Lag, line.Took)
	if v.OrderViolations > 0 {
		for _, q := range s.Config.Queues {
			s.t.Logf("window workflow of %s:\n  %s", q, strings.Join(s.windowTrail(q), "\n  "))
		}
	}
	requireClean(s.t, v)
}

// lagOf is how long after the last event from broker `from` was applied the switch away
// from it was committed, for the summary: "-" when there was no switch.
func (s *stack) lagOf() string {
	st := s.State()
	if st.LastSwitch == nil || st.LastSwitch.Forced {
		return "-"
	}
	var last *time.Time
	require.NoError(s.t, s.DB.Raw("SELECT max(applied_at) FROM github_deliveries WHERE broker_index = ? AND applied_at <= ?",
		st.LastSwitch.From, st.LastSwitch.CompletedAt).Scan(&last).Error)
	if last == nil {
		return "-"
	}
	return st.LastSwitch.CompletedAt.Sub(*last).Round(10 * time.Millisecond).String()
}

// printSummaries prints the scenarios' summary table.
func printSummaries(w io.Writer) {
	summariesMu.Lock()
	defer summariesMu.Unlock()
	if len(summaries) == 0 {
		return
	}
	sort.SliceStable(summaries, func(i, j int) bool { return summaries[i].Scenario < summaries[j].Scenario })
	fmt.Fprintln(w, "\ne2e scenarios (oracle: simulator log vs Postgres and brokers)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tpublished\tpoison\tapplied\tduplicates\torder violations\tlost\tswitch lag\ttook\tresult")
	for _, l := range summaries {
		result := "ok"
		if !l.Passed {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", strings.TrimPrefix(l.Scenario, "Test"),
			l.Published, l.Poison, l.Applied, l.Dups, l.Order, l.Lost, l.Lag, l.Took, result)
	}
	tw.Flush()
}

// drained is true when the queues and -retry queues of broker index hold nothing ready.
func (s *stack) drained(index int) bool {
	n, err := s.Ready(index, withRetryQueues(s.Config.Queues)...)
	return err == nil && n == 0
}

// windowTrail lists what a queue's window workflow did, run by run, for a failure message:
// each activity with its input, and how it ended.
func (s *stack) windowTrail(queue string) []string {
	s.t.Helper()
	ctx := context.Background()
	query := fmt.Sprintf("WorkflowId = '%s'", workflows.QueueWindowWorkflowID(queue))
	var out []string
	var token []byte
	var runs []string
	for {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		require.NoError(s.t, err)
		for _, e := range resp.GetExecutions() {
			runs = append(runs, e.GetExecution().GetRunId())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	for i := len(runs) - 1; i >= 0; i-- {
		scheduled := map[int64]string{}
		for _, ev := range s.history(workflows.QueueWindowWorkflowID(queue), runs[i]).GetEvents() {
			at := ev.GetEventTime().AsTime().Format("15:04:05.000")
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
				var in any
				_ = converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in)
				scheduled[ev.GetEventId()] = fmt.Sprintf("%s %v", a.GetActivityType().GetName(), in)
			}
			if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
				var res any
				_ = converter.GetDefaultDataConverter().FromPayloads(a.GetResult(), &res)
				out = append(out, fmt.Sprintf("%s %s → %v", at, scheduled[a.GetScheduledEventId()], res))
			}
			if a := ev.GetActivityTaskFailedEventAttributes(); a != nil {
				out = append(out, fmt.Sprintf("%s %s → failed: %s", at, scheduled[a.GetScheduledEventId()], a.GetFailure().GetMessage()))
			}
			if a := ev.GetActivityTaskCanceledEventAttributes(); a != nil {
				out = append(out, fmt.Sprintf("%s %s → canceled", at, scheduled[a.GetScheduledEventId()]))
			}
			if ev.GetWorkflowExecutionSignaledEventAttributes() != nil {
				out = append(out, at+" signal "+ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName())
			}
		}
	}
	return out
}
