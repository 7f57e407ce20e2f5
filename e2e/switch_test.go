package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// split gives each broker a consecutive part of the events, as a producer that rotates
// after every part would have published them.
func split(events []payloads.Event, parts int) [][]payloads.Event {
	out := make([][]payloads.Event, parts)
	for i, ev := range events {
		part := i * parts / len(events)
		out[part] = append(out[part], ev)
	}
	return out
}

// TestSwitchFollowsTheProducerOnceTheOldBrokerIsDrained: the producer rotated from broker 0
// to 1 with a backlog on 0; nothing from 1 may be applied before 0 is drained.
func TestSwitchFollowsTheProducerOnceTheOldBrokerIsDrained(t *testing.T) {
	s := newStack(t, 2, nil)
	events, err := payloads.Lifecycle(20)
	require.NoError(t, err)
	parts := split(events, 2)
	s.publish(0, parts[0]...)
	s.publish(1, parts[1]...)
	s.notify(1, time.Now())

	s.startWorker()
	s.waitFor("the switch to broker 1", time.Minute, func() bool { st := s.state(); return st.ActiveIndex == 1 && st.Pending == nil })
	s.waitFor("every event applied", time.Minute, func() bool { return s.deliveries() == int64(len(events)) })

	s.requireBrokerOrder(0, 1)
	assertRows(t, s, expectRows(events))
	last := s.state().LastSwitch
	require.Equal(t, 0, last.From)
	require.Equal(t, 1, last.To)
	require.GreaterOrEqual(t, last.Checks, 1)
	lag := s.switchLag(0)
	t.Logf("switch lag (last event of broker 0 applied → switch committed): %s", lag)
	require.Less(t, lag, 10*time.Second, "the flip follows the drain within seconds")
}

// TestRetryTailHoldsTheSwitch: a message waiting in the old broker's -retry queue keeps the
// switch pending until it has come back and been applied.
func TestRetryTailHoldsTheSwitch(t *testing.T) {
	s := newStack(t, 2, map[string]string{"RETRY_TTL": "4s"})
	tail, err := payloads.Build("issues", "opened", nil)
	require.NoError(t, err)
	s.startWorker()
	s.publishRaw(0, "issues-retry", amqp.Table{"x-github-event": tail.Event, "x-github-delivery": tail.DeliveryID}, tail.Body)
	s.notify(1, time.Now())

	s.waitFor("a drain check that sees the -retry tail", 30*time.Second, func() bool {
		c := s.state().LastDrainCheck
		return c != nil && c.Counts["issues-retry"] == 1
	})
	st := s.state()
	require.Equal(t, 0, st.ActiveIndex, "a -retry tail holds the switch")
	require.NotNil(t, st.Pending)

	s.waitFor("the switch after the tail is applied", 30*time.Second, func() bool { return s.state().ActiveIndex == 1 })
	s.waitFor("the tail in the ledger", 30*time.Second, func() bool { return outcome(s, tail.DeliveryID) != "" })
	var brokerIndex int
	require.NoError(t, s.db.Raw("SELECT broker_index FROM github_deliveries WHERE delivery_id = ?", tail.DeliveryID).Scan(&brokerIndex).Error)
	require.Equal(t, 0, brokerIndex, "the tail was read from the old broker, before the flip")
}

// TestDoubleRotationIsFollowedHopByHop: the producer went 0 → 1 → 2 before the first switch
// completed; 1's events are applied before 2's.
func TestDoubleRotationIsFollowedHopByHop(t *testing.T) {
	s := newStack(t, 3, nil)
	events, err := payloads.Lifecycle(15)
	require.NoError(t, err)
	parts := split(events, 3)
	for i, part := range parts {
		s.publish(i, part...)
	}
	now := time.Now()
	s.notify(1, now)
	s.notify(2, now.Add(time.Second))

	s.startWorker()
	s.waitFor("both hops", time.Minute, func() bool { st := s.state(); return st.ActiveIndex == 2 && st.Pending == nil })
	s.waitFor("every event applied", time.Minute, func() bool { return s.deliveries() == int64(len(events)) })

	s.requireBrokerOrder(0, 1)
	s.requireBrokerOrder(1, 2)
	assertRows(t, s, expectRows(events))
	require.Equal(t, 1, s.state().LastSwitch.From)
}

// TestStaleAndRepeatedNotificationsChangeNothing: late, repeated and backwards
// notifications from the producer's retry queue cannot move the broker.
func TestStaleAndRepeatedNotificationsChangeNothing(t *testing.T) {
	s := newStack(t, 3, nil)
	s.startWorker()
	at := time.Now()
	s.notify(1, at)
	s.waitFor("the switch to 1", 30*time.Second, func() bool { return s.state().ActiveIndex == 1 })

	s.notify(1, at)                     // repeated
	s.notify(2, at.Add(-time.Minute))   // older than the switch on record
	s.notify(0, at.Add(-2*time.Minute)) // back to the start, and older
	marker := time.Now().Add(30 * time.Minute)
	s.notify(1, marker) // newer, but for the active broker: changes nothing either
	s.waitFor("the notifications handled", 30*time.Second, func() bool { return s.state().SeenUntil.Equal(marker) })

	st := s.state()
	require.Equal(t, 1, st.ActiveIndex)
	require.Nil(t, st.Pending)
	require.Equal(t, 0, st.LastSwitch.From)
}

// TestForceAndCancelFromTheTemporalCLI: an operator's signals, typed in the Temporal CLI,
// move at once and drop a Pending Switch, or drop it without moving.
func TestForceAndCancelFromTheTemporalCLI(t *testing.T) {
	s := newStack(t, 3, nil)
	backlog, err := payloads.Lifecycle(2)
	require.NoError(t, err)
	s.startWorker()
	s.proxies[0].Cut() // broker 0 unreachable: the switch to 1 cannot complete by itself
	s.publish(0, backlog...)
	s.notify(1, time.Now())
	s.waitFor("the pending switch", 30*time.Second, func() bool { return s.state().Pending != nil })

	s.temporalCLI("workflow", "signal", "--workflow-id", workflows.BrokerSwitchWorkflowID,
		"--name", workflows.SignalForceSwitch, "--input", `{"index": 2}`)
	s.waitFor("the forced switch", 30*time.Second, func() bool { st := s.state(); return st.ActiveIndex == 2 && st.Pending == nil })
	require.True(t, s.state().LastSwitch.Forced)

	s.notify(0, time.Now().Add(time.Minute))
	s.waitFor("a new pending switch", 30*time.Second, func() bool { return s.state().Pending != nil })
	s.temporalCLI("workflow", "signal", "--workflow-id", workflows.BrokerSwitchWorkflowID, "--name", workflows.SignalCancelPendingSwitch)
	s.waitFor("the cancel", 30*time.Second, func() bool { return s.state().Pending == nil })
	require.Equal(t, 2, s.state().ActiveIndex, "cancel does not move")
	s.proxies[0].Restore(t)
}

// TestForceAndCancelOverHTTP: the operator's endpoints move at once, dropping the Pending
// Switch, or drop it without moving; the producer's token may do neither.
func TestForceAndCancelOverHTTP(t *testing.T) {
	s := newStack(t, 3, nil)
	s.startWorker()
	s.proxies[0].Cut()
	s.notify(1, time.Now())
	s.waitFor("the pending switch", 30*time.Second, func() bool { return s.state().Pending != nil })

	status, body := s.call(http.MethodPost, "/api/v1/broker/switch/2", producerToken, "")
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = s.call(http.MethodPost, "/api/v1/broker/switch/2", operatorToken, "")
	require.Equal(t, http.StatusOK, status, body)
	st := s.state()
	require.Equal(t, 2, st.ActiveIndex, "answered only once committed")
	require.Nil(t, st.Pending)

	s.notify(1, time.Now().Add(time.Minute))
	s.waitFor("a new pending switch", 30*time.Second, func() bool { return s.state().Pending != nil })
	for range 2 { // idempotent
		status, body = s.call(http.MethodDelete, "/api/v1/broker/pending-switch", operatorToken, "")
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	}
	s.waitFor("the cancel", 30*time.Second, func() bool { return s.state().Pending == nil })
	require.Equal(t, 2, s.state().ActiveIndex)

	status, body = s.call(http.MethodPost, "/api/v1/broker/pending-switch", producerToken,
		fmt.Sprintf(`{"host": "unknown.example.com", "vhost": "/", "switchedAt": %q}`, time.Now().Add(2*time.Minute).UTC().Format(time.RFC3339)))
	require.Equal(t, http.StatusNotFound, status, body)
	require.Nil(t, s.state().Pending, "an unknown endpoint changes nothing")
	s.proxies[0].Restore(t)
}

// TestActiveBrokerDownHoldsTheSwitch: an unreachable active broker cannot be verified
// drained, so the switch waits for it and completes once it is back and empty.
func TestActiveBrokerDownHoldsTheSwitch(t *testing.T) {
	s := newStack(t, 2, nil)
	s.startWorker()
	s.proxies[0].Cut()
	s.notify(1, time.Now())
	s.waitFor("a drain check that found the broker unreachable", 30*time.Second, func() bool {
		c := s.state().LastDrainCheck
		return c != nil && !c.Reachable
	})
	require.Equal(t, 0, s.state().ActiveIndex)
	status := s.switchStatus()
	require.Contains(t, status.Waiting, "unreachable")

	events, err := payloads.Lifecycle(2)
	require.NoError(t, err)
	s.publish(0, events...) // published while we could not see the broker
	s.proxies[0].Restore(t)
	s.waitFor("the switch once broker 0 is back and drained", time.Minute, func() bool { return s.state().ActiveIndex == 1 })
	s.waitFor("every event applied", 30*time.Second, func() bool { return s.deliveries() == int64(len(events)) })
	assertRows(t, s, expectRows(events))
}

// TestSpareBrokerDownDoesNotFailWindows: a spare broker that cannot be reached is skipped by
// the Leftover Drain with a warning; the windows go on consuming the active broker.
func TestSpareBrokerDownDoesNotFailWindows(t *testing.T) {
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "2s"})
	s.proxies[1].Cut()
	s.startWorker()
	first, err := payloads.Lifecycle(3)
	require.NoError(t, err)
	s.publish(0, first...)
	s.waitFor("the first events", 30*time.Second, func() bool { return s.deliveries() == int64(len(first)) })
	// Over several windows, each starting with a Leftover Drain that meets the dead spare.
	s.waitFor("several windows", 30*time.Second, func() bool { return s.windowRuns("issues") >= 3 })
	second, err := payloads.Lifecycle(3)
	require.NoError(t, err)
	s.publish(0, second...)
	s.waitFor("the later events", 30*time.Second, func() bool { return s.deliveries() == int64(len(first)+len(second)) })
	require.Empty(t, s.failedWindowRuns(), "no window failed")
}

// TestLeftoverDrainCollectsStragglers: a message nacked into the old broker's -retry after
// the flip comes back to the old queue; the next window's Leftover Drain applies it.
func TestLeftoverDrainCollectsStragglers(t *testing.T) {
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "3s"})
	s.startWorker()
	s.notify(1, time.Now())
	s.waitFor("the switch to 1", 30*time.Second, func() bool { return s.state().ActiveIndex == 1 })

	straggler, err := payloads.Build("issues", "opened", nil)
	require.NoError(t, err)
	s.publishRaw(0, "issues-retry", amqp.Table{"x-github-event": straggler.Event, "x-github-delivery": straggler.DeliveryID}, straggler.Body)
	s.waitFor("the straggler applied from the old broker", 30*time.Second, func() bool { return outcome(s, straggler.DeliveryID) == "applied" })
	var brokerIndex int
	require.NoError(t, s.db.Raw("SELECT broker_index FROM github_deliveries WHERE delivery_id = ?", straggler.DeliveryID).Scan(&brokerIndex).Error)
	require.Equal(t, 0, brokerIndex)
	require.Equal(t, 0, s.counts(0, "issues", "issues-retry")["issues"])
}

// TestLeftoverDrainStopsAtItsCap: one Leftover Drain takes at most LEFTOVER_DRAIN_CAP
// messages; the rest waits for the next window.
func TestLeftoverDrainStopsAtItsCap(t *testing.T) {
	s := newStack(t, 2, map[string]string{"LEFTOVER_DRAIN_CAP": "500", "CONSUMER_WINDOW": "3s"})
	var leftovers []payloads.Event
	for range 700 {
		ev, err := payloads.Build("push", "", nil)
		require.NoError(t, err)
		leftovers = append(leftovers, ev)
	}
	s.publish(1, leftovers...)
	s.startWorker()
	s.waitFor("the leftovers applied over two windows", time.Minute, func() bool { return s.deliveries() == 700 })
	require.Equal(t, []int{500, 200}, s.leftoverDrainTakes("pushes", 1), "each Leftover Drain stops at the cap")
}

// leftoverDrainTakes lists, in order, how many messages each Leftover Drain of a queue took
// from a broker, read from the results recorded in the window workflows' histories.
func (s *stack) leftoverDrainTakes(queue string, brokerIndex int) []int {
	s.t.Helper()
	ctx := context.Background()
	query := fmt.Sprintf("WorkflowId = '%s'", workflows.QueueWindowWorkflowID(queue))
	resp, err := s.temporal.ListWorkflow(ctx, listRequest(query))
	require.NoError(s.t, err)
	var takes []int
	runs := resp.GetExecutions()
	for i := len(runs) - 1; i >= 0; i-- { // oldest first
		for _, ev := range s.history(runs[i].GetExecution().GetWorkflowId(), runs[i].GetExecution().GetRunId()).GetEvents() {
			done := ev.GetActivityTaskCompletedEventAttributes()
			if done == nil {
				continue
			}
			var res activities.LeftoverDrainResult
			if converter.GetDefaultDataConverter().FromPayloads(done.GetResult(), &res) == nil && res.Taken[brokerIndex] > 0 {
				takes = append(takes, res.Taken[brokerIndex])
			}
		}
	}
	return takes
}

// switchLag is how long after the last event from broker `from` was applied the switch away
// from it was committed.
func (s *stack) switchLag(from int) time.Duration {
	s.t.Helper()
	var lastApplied time.Time
	require.NoError(s.t, s.db.Raw("SELECT max(applied_at) FROM github_deliveries WHERE broker_index = ?", from).Scan(&lastApplied).Error)
	return s.state().LastSwitch.CompletedAt.Sub(lastApplied)
}

// switchStatus queries the BrokerSwitch workflow.
func (s *stack) switchStatus() workflows.Status {
	s.t.Helper()
	v, err := s.temporal.QueryWorkflow(context.Background(), workflows.BrokerSwitchWorkflowID, "", workflows.QueryStatus)
	require.NoError(s.t, err)
	var st workflows.Status
	require.NoError(s.t, v.Get(&st))
	return st
}

// windowRuns counts the runs of a queue's window workflow so far.
func (s *stack) windowRuns(queue string) int {
	s.t.Helper()
	query := fmt.Sprintf("WorkflowId = '%s'", workflows.QueueWindowWorkflowID(queue))
	n, err := s.temporal.CountWorkflow(context.Background(), countRequest(query))
	require.NoError(s.t, err)
	return int(n.GetCount())
}

// failedWindowRuns lists the window runs that ended in failure.
func (s *stack) failedWindowRuns() []string {
	s.t.Helper()
	var failed []string
	for _, q := range s.cfg.Queues {
		query := fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'", workflows.QueueWindowWorkflowID(q))
		resp, err := s.temporal.ListWorkflow(context.Background(), listRequest(query))
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
	args = append(args, "--address", temporalServer.Address(), "--namespace", s.cfg.TemporalNamespace)
	out, err := exec.Command(exe, args...).CombinedOutput()
	require.NoError(s.t, err, "temporal %v: %s", args, out)
}
