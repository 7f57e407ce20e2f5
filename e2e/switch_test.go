//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/windowplan"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// TestLeftoverDrainStopsAtItsCap: one Leftover Drain takes at most LEFTOVER_DRAIN_CAP
// messages; the rest waits for the next window.
func TestLeftoverDrainStopsAtItsCap(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, map[string]string{"LEFTOVER_DRAIN_CAP": "500", "CONSUMER_WINDOW": "3s"})
	var leftovers []payloads.Event
	for range 700 {
		ev, err := payloads.Build("push", "", nil)
		require.NoError(t, err)
		leftovers = append(leftovers, ev)
	}
	// The producer never announced broker 1, so only stragglers are read there before the
	// grace: these an operator moved back from -error, as their header says.
	for _, ev := range leftovers {
		s.PublishRaw(1, ev.Queue, amqp.Table{"x-github-event": ev.Event, "x-github-delivery": ev.DeliveryID,
			broker.HeaderRetryCycles: int64(1),
			broker.HeaderErrorQueue:  ev.Queue, broker.HeaderErrorAt: time.Now().UTC().Format(time.RFC3339),
			broker.HeaderErrorReason: "moved back by an operator"}, ev.Body)
	}
	s.StartWorker()
	s.waitFor("the leftovers applied over two windows", time.Minute, func() bool { return s.deliveries() == 700 })
	// The rows commit inside the second Leftover Drain; its result reaches the history, and
	// a new run the visibility store, only after that.
	var takes []int
	s.waitUntil("both Leftover Drains in the histories", 30*time.Second, func() (bool, string) {
		takes = s.leftoverDrainTakes("pushes", 1)
		total := 0
		for _, n := range takes {
			total += n
		}
		return total >= 700, fmt.Sprintf("takes so far %v", takes)
	})
	require.Equal(t, []int{500, 200}, takes, "each Leftover Drain stops at the cap")
}

// leftoverDrainTakes lists, in order, how many messages each Leftover Drain of a queue took
// from a broker, read from the results recorded in the window workflows' histories.
func (s *stack) leftoverDrainTakes(queue string, brokerIndex int) []int {
	s.t.Helper()
	ctx := context.Background()
	query := fmt.Sprintf("WorkflowId = '%s'", workflows.QueueWindowWorkflowID(queue))
	resp, err := s.Temporal.ListWorkflow(ctx, listRequest(query))
	require.NoError(s.t, err)
	var takes []int
	runs := resp.GetExecutions()
	for i := len(runs) - 1; i >= 0; i-- { // oldest first
		for _, ev := range s.history(runs[i].GetExecution().GetWorkflowId(), runs[i].GetExecution().GetRunId()).GetEvents() {
			done := ev.GetActivityTaskCompletedEventAttributes()
			if done == nil {
				continue
			}
			// PrepareWindow returns the Leftover Drain's result with the plan; windows
			// started before it ran LeftoverDrain on its own.
			var prepared activities.PreparedWindow
			var drained windowplan.LeftoverDrainResult
			dc := converter.GetDefaultDataConverter()
			switch {
			case dc.FromPayloads(done.GetResult(), &prepared) == nil && prepared.Drained.Taken[brokerIndex] > 0:
				takes = append(takes, prepared.Drained.Taken[brokerIndex])
			case dc.FromPayloads(done.GetResult(), &drained) == nil && drained.Taken[brokerIndex] > 0:
				takes = append(takes, drained.Taken[brokerIndex])
			}
		}
	}
	return takes
}

// switchStatus queries the BrokerSwitch workflow.
func (s *stack) switchStatus() workflows.Status {
	s.t.Helper()
	v, err := s.Temporal.QueryWorkflow(context.Background(), workflows.BrokerSwitchWorkflowID, "", workflows.QueryStatus)
	require.NoError(s.t, err)
	var st workflows.Status
	require.NoError(s.t, v.Get(&st))
	return st
}

// windowRuns counts the runs of a queue's window workflow so far.
func (s *stack) windowRuns(queue string) int {
	s.t.Helper()
	query := fmt.Sprintf("WorkflowId = '%s'", workflows.QueueWindowWorkflowID(queue))
	n, err := s.Temporal.CountWorkflow(context.Background(), countRequest(query))
	require.NoError(s.t, err)
	return int(n.GetCount())
}

// failedWindowRuns lists the window runs that ended in failure.
func (s *stack) failedWindowRuns() []string {
	s.t.Helper()
	var failed []string
	for _, q := range s.Config.Queues {
		query := fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'", workflows.QueueWindowWorkflowID(q))
		resp, err := s.Temporal.ListWorkflow(context.Background(), listRequest(query))
		require.NoError(s.t, err)
		for _, e := range resp.GetExecutions() {
			if e.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				failed = append(failed, fmt.Sprintf("%s %s: %s", q, e.GetExecution().GetRunId(), e.GetStatus()))
			}
		}
	}
	return failed
}

// temporalCLI runs the pinned Temporal CLI against the test's namespace, as an operator would.
func (s *stack) temporalCLI(args ...string) {
	s.t.Helper()
	exe, err := testenv.TemporalCLI()
	require.NoError(s.t, err)
	args = append(args, "--address", temporalServer.Address(), "--namespace", s.Config.TemporalNamespace)
	out, err := exec.Command(exe, args...).CombinedOutput()
	require.NoError(s.t, err, "temporal %v: %s", args, out)
}

// A spare's leftovers include large payloads on a slow link: a drain round waits longer
// for one than it waits for a delivery. The drain used to take that for an empty spare
// and let the window read the active broker, whose events then overtook the spare's.
// Now a drain that did not see its spare empty ends the window as the cap does.
func TestASlowSpareIsNotOvertaken(t *testing.T) {
	t.Parallel()
	s := newStackWith(t, stacktest.Options{Brokers: 2, Copies: map[int]testenv.Copy{0: testenv.SlowLargeFrames(2 * time.Second)},
		Env: map[string]string{"CONSUMER_WINDOW": "2s", "PREFETCH": "5"}})
	p, log := s.producer(func(c *simulate.Config) { c.Notify = simulate.NotifyNow })
	ctx := context.Background()
	msgs := s.workload(mixed(3, 193))
	for i := range msgs {
		if i%6 == 1 { // JSON allows trailing whitespace: the payload stays the same event
			msgs[i].Body = append(msgs[i].Body, bytes.Repeat([]byte(" "), 64<<10)...)
		}
	}
	half := len(msgs) / 2
	require.NoError(t, p.Publish(ctx, msgs[:half]...))
	// The operator forced broker 1 before anything read broker 0: what it holds are a
	// spare's leftovers.
	_, err := s.Store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
		return st.Force(1, time.Now(), time.Now()), nil
	})
	require.NoError(t, err)
	_, err = p.Rotate(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, msgs[half:]...))
	require.False(t, s.drained(0), "broker 0 holds leftovers")

	s.StartWorker()
	v := s.verify(log, 3*time.Minute)
	s.requireBrokerOrder(0, 1)
	s.report(v, "-")
}
