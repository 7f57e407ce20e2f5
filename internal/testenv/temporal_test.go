//go:build integration

package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// More tests than a fixed pool held get a namespace each, and the last one is usable at
// once: `go test -count=2 ./e2e/` asks for twice as many as one round.
func TestNamespacesAreHandedOutWithoutBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := StartTemporal(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })

	seen := map[string]bool{}
	var last client.Client
	for range 90 {
		ns, c := srv.Namespace(t)
		require.False(t, seen[ns], "namespace %s handed out twice", ns)
		seen[ns] = true
		last = c
	}
	w := worker.New(last, "q", worker.Options{})
	w.RegisterWorkflowWithOptions(func(workflow.Context) (string, error) { return "ran", nil }, workflow.RegisterOptions{Name: "Hello"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	run, err := last.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "hello", TaskQueue: "q"}, "Hello")
	require.NoError(t, err)
	var out string
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, "ran", out)
}
