package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
)

func records(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(out) {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		recs = append(recs, rec)
	}
	return recs
}

func TestLogsInsideAnActivityCarryTheWorkflowID(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("queue", "issues")

	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(func(ctx context.Context) error {
		logger.WarnContext(ctx, "leftover drain: broker unreachable, skipped", "broker", "#1 rabbit-b:5672/")
		return nil
	}, activity.RegisterOptions{Name: "LeftoverDrain"})
	_, err := env.ExecuteActivity("LeftoverDrain")
	require.NoError(t, err)
	logger.InfoContext(context.Background(), "outside any activity")

	recs := records(t, buf.String())
	require.Len(t, recs, 2)
	require.Equal(t, "issues", recs[0]["queue"])
	require.NotEmpty(t, recs[0]["workflow_id"])
	require.Equal(t, "LeftoverDrain", recs[0]["activity"])
	require.NotContains(t, recs[1], "workflow_id")
}
