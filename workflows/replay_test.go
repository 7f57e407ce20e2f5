package workflows

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
)

// TestReplayRecordedHistories replays BrokerSwitch histories recorded from real runs of
// the end-to-end tests (go test ./e2e -record-histories): a change to the workflow code that
// would break running workflows fails here. Record new ones when the workflow changes on
// purpose, and keep the old ones as long as such runs may still exist.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "recorded histories are part of the repository")
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			require.NoError(t, err)
			defer f.Close()
			history, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			require.NoError(t, err)
			replayer, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
				Interceptors: []interceptor.WorkerInterceptor{&SignalArrival{}},
			})
			require.NoError(t, err)
			replayer.RegisterWorkflow(BrokerSwitch)
			replayer.RegisterWorkflow(QueueWindow)
			require.NoError(t, replayer.ReplayWorkflowHistory(nil, history))
		})
	}
}
