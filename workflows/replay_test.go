package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// TestReplayRecordedHistories replays BrokerSwitch and QueueWindow histories recorded
// from real runs of the end-to-end tests (go test ./e2e -record-histories) under the
// worker's interceptors: a change to the workflow code that would alter the commands of
// running workflows fails here. Record new ones when the workflow changes on purpose (see
// "Changing a workflow" in docs/development.md), and keep the old ones as long as such runs may
// still exist.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "recorded histories are part of the repository")
	seen := map[string]bool{}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			require.NoError(t, err)
			defer f.Close()
			history, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			require.NoError(t, err)
			seen[history.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()] = true
			replayer, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{Interceptors: worker.Options(config.Config{}).Interceptors})
			require.NoError(t, err)
			replayer.RegisterWorkflow(workflows.BrokerSwitch)
			replayer.RegisterWorkflow(workflows.QueueWindow)
			require.NoError(t, replayer.ReplayWorkflowHistory(nil, history))
		})
	}
	require.Equal(t, map[string]bool{"BrokerSwitch": true, "QueueWindow": true}, seen, "both workflows have recorded histories")
}
