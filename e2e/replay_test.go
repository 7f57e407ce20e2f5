//go:build integration

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

var recordHistories = flag.Bool("record-histories", false,
	"write the BrokerSwitch history and one finished window of each e2e test to workflows/testdata/histories, for the replay test there")

var showSlowTasks = flag.Bool("show-slow-tasks", false,
	"log the BrokerSwitch workflow's slow and failed workflow tasks of every e2e test, not only of a failed one")

// maxWindowHistory bounds the events of one finished window run; the benchmark saw 17.
const maxWindowHistory = 64

// replayHistories replays every workflow run of the test's namespace against the current
// workflow code: a change that breaks determinism fails the scenario that exercised it.
func (s *stack) replayHistories() {
	s.t.Helper()
	ctx := context.Background()
	// As the workers run it: with the interceptor that queues the orders as they arrive.
	replayer, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{Interceptors: worker.Options(config.Config{}).Interceptors})
	require.NoError(s.t, err)
	replayer.RegisterWorkflow(workflows.QueueWindow)
	replayer.RegisterWorkflow(workflows.BrokerSwitch)

	var token []byte
	windowRecorded := false
	for {
		resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{NextPageToken: token})
		require.NoError(s.t, err)
		for _, e := range resp.GetExecutions() {
			id, run := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			history := s.history(id, run)
			if len(history.GetEvents()) < 3 {
				continue // started, but no workflow task completed yet: nothing to replay
			}
			require.NoError(s.t, replayer.ReplayWorkflowHistory(nil, history), "replay of %s run %s", id, run)
			// Messages never travel through Temporal: a window that ran to its end has the same
			// few events whether it applied one message or a whole backlog.
			if strings.HasPrefix(id, workflows.QueueWindowWorkflowID("")) && e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				require.LessOrEqual(s.t, len(history.GetEvents()), maxWindowHistory, "events in window %s run %s", id, run)
			}
			if *recordHistories && id == workflows.BrokerSwitchWorkflowID && len(history.GetEvents()) > 10 {
				s.writeHistory(id, run, history)
			}
			// A window that ran to its end: its start, its activities and its continue-as-new.
			if *recordHistories && !windowRecorded && strings.HasPrefix(id, workflows.QueueWindowWorkflowID("")) &&
				e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
				s.writeHistory(id, run, history)
				windowRecorded = true
			}
			if (s.t.Failed() || *showSlowTasks) && id == workflows.BrokerSwitchWorkflowID {
				s.showSlowTasks(run, history)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return
		}
	}
}

func (s *stack) history(id, run string) *historypb.History {
	s.t.Helper()
	h, err := s.History(context.Background(), id, run)
	require.NoError(s.t, err)
	return h
}

func (s *stack) writeHistory(id, run string, h *historypb.History) {
	s.t.Helper()
	root, err := testenv.ModuleRoot()
	require.NoError(s.t, err)
	dir := filepath.Join(root, "workflows", "testdata", "histories")
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(s.t, err)
	name := fmt.Sprintf("%s.%s.%s.json", strings.ToLower(strings.ReplaceAll(s.t.Name(), "/", "_")), id, run[:8])
	require.NoError(s.t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
}

// slowTask is how long a workflow task may wait or run before a failed test shows it.
const slowTask = time.Second

// showSlowTasks logs, for a failed test, the BrokerSwitch run's workflow tasks that waited
// for a worker or ran for longer than slowTask, and every failed or timed-out one: what
// held the workflow when an order was not answered in time. The whole history goes to a
// file, in the JSON that the replay tests read.
func (s *stack) showSlowTasks(run string, h *historypb.History) {
	s.t.Helper()
	var scheduled, started time.Time
	var attempt int32
	for _, ev := range h.GetEvents() {
		at := ev.GetEventTime().AsTime()
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			scheduled, attempt = at, ev.GetWorkflowTaskScheduledEventAttributes().GetAttempt()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started = at
			if wait := at.Sub(scheduled); wait > slowTask {
				s.t.Logf("history %s event %d at %s: workflow task waited %s for a worker (attempt %d)",
					run[:8], ev.GetEventId(), at.Format("15:04:05.000"), wait, attempt)
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			if took := at.Sub(started); took > slowTask {
				s.t.Logf("history %s event %d at %s: workflow task took %s", run[:8], ev.GetEventId(), at.Format("15:04:05.000"), took)
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
			a := ev.GetWorkflowTaskFailedEventAttributes()
			s.t.Logf("history %s event %d at %s: workflow task failed after %s: %s %s", run[:8], ev.GetEventId(),
				at.Format("15:04:05.000"), at.Sub(started), a.GetCause(), a.GetFailure().GetMessage())
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			s.t.Logf("history %s event %d at %s: workflow task timed out (%s)", run[:8], ev.GetEventId(),
				at.Format("15:04:05.000"), ev.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType())
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			s.t.Logf("history %s event %d at %s: %s", run[:8], ev.GetEventId(), at.Format("15:04:05.000"), ev.GetEventType())
		}
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(s.t, err)
	file := filepath.Join(os.TempDir(), fmt.Sprintf("brokerswitch-%s-%s.json", strings.ReplaceAll(s.t.Name(), "/", "_"), run[:8]))
	require.NoError(s.t, os.WriteFile(file, b, 0o644))
	s.t.Logf("history %s of %s (%d events) written to %s", run[:8], workflows.BrokerSwitchWorkflowID, len(h.GetEvents()), file)
}

// requireOrdersAnsweredInTheirTask fails unless every order the BrokerSwitch workflow's
// current run took as a Workflow Update was answered in the workflow task that accepted
// it. An order that waits on further tasks waits, on a busy worker, for a poller each
// time: a cancel that needed four workflow tasks and three activity tasks was answered
// after the API's 45 s.
func (s *stack) requireOrdersAnsweredInTheirTask() {
	s.t.Helper()
	desc, err := s.Temporal.DescribeWorkflowExecution(context.Background(), workflows.BrokerSwitchWorkflowID, "")
	require.NoError(s.t, err)
	run := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	h := s.history(workflows.BrokerSwitchWorkflowID, run)
	tasksSince := map[string]int{} // update id → workflow tasks completed since its acceptance
	answered := 0
	for _, ev := range h.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			tasksSince[ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetMeta().GetUpdateId()] = 0
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			for id := range tasksSince {
				tasksSince[id]++
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
			id := ev.GetWorkflowExecutionUpdateCompletedEventAttributes().GetMeta().GetUpdateId()
			n, ok := tasksSince[id]
			require.True(s.t, ok, "update %s completed, never accepted", id)
			require.Zero(s.t, n, "the order (update %s) was answered %d workflow tasks after the one that accepted it (history %s event %d)",
				id, n, run[:8], ev.GetEventId())
			delete(tasksSince, id)
			answered++
		}
	}
	require.Positive(s.t, answered, "the BrokerSwitch workflow's run %s answered no order", run[:8])
	require.Empty(s.t, tasksSince, "orders accepted and never answered")
}
