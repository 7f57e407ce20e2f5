package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/workflows"
)

var recordHistories = flag.Bool("record-histories", false,
	"write the BrokerSwitch histories of the e2e tests to workflows/testdata/histories, for the replay test there")

// replayHistories replays every workflow run of the test's namespace against the current
// workflow code: a change that breaks determinism fails the scenario that exercised it.
func (s *stack) replayHistories() {
	s.t.Helper()
	ctx := context.Background()
	// As the workers run it: with the interceptor that records the signals' arrival order.
	replayer, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{&workflows.SignalArrival{}},
	})
	require.NoError(s.t, err)
	replayer.RegisterWorkflow(workflows.QueueWindow)
	replayer.RegisterWorkflow(workflows.BrokerSwitch)

	var token []byte
	for {
		resp, err := s.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{NextPageToken: token})
		require.NoError(s.t, err)
		for _, e := range resp.GetExecutions() {
			id, run := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			history := s.history(id, run)
			if len(history.GetEvents()) < 3 {
				continue // started, but no workflow task completed yet: nothing to replay
			}
			require.NoError(s.t, replayer.ReplayWorkflowHistory(nil, history), "replay of %s run %s", id, run)
			if *recordHistories && id == workflows.BrokerSwitchWorkflowID && len(history.GetEvents()) > 10 {
				s.writeHistory(id, run, history)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return
		}
	}
}

func (s *stack) history(id, run string) *historypb.History {
	s.t.Helper()
	it := s.temporal.GetWorkflowHistory(context.Background(), id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(s.t, err)
		h.Events = append(h.Events, ev)
	}
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
