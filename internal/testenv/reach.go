package testenv

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// TemporalReach stands in for the calls a lease.Keeper makes to Temporal, for the unit
// tests of leases: whether Temporal answers (Down says no), and which attempts were
// failed by task token; it knows no workflows. The end-to-end tests run keepers against the real dev server.
type TemporalReach struct {
	Down   atomic.Bool
	mu     sync.Mutex
	failed [][]byte
}

// CheckHealth answers unless Down is set.
func (r *TemporalReach) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	if r.Down.Load() {
		return nil, errors.New("unavailable")
	}
	return &client.CheckHealthResponse{}, nil
}

// CompleteActivity records the task token of an attempt failed, unless Down is set.
func (r *TemporalReach) CompleteActivity(_ context.Context, token []byte, _ any, _ error) error {
	if r.Down.Load() {
		return errors.New("unavailable")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, token)
	return nil
}

// CompleteActivityByID fails nothing: TemporalReach knows no workflows.
func (r *TemporalReach) CompleteActivityByID(context.Context, string, string, string, string, any, error) error {
	return nil
}

// DescribeWorkflowExecution answers that there is no such workflow.
func (r *TemporalReach) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, serviceerror.NewNotFound("no workflows here")
}

// Failed lists the task tokens of the attempts failed so far.
func (r *TemporalReach) Failed() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.failed...)
}

// RunInBackground runs run until the test ends, then cancels its context and waits for it
// to return: a lease keeper, a watcher.
func RunInBackground(t T, run func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
