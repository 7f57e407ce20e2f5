package testenv

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// TemporalReach stands in for the calls a liveness.Keeper makes to Temporal, for the unit
// tests of leases: whether Temporal answers (Down says no), which attempts were failed by
// task token or by activity id, and the pending activities that every workflow it is
// asked about shows (Pending). The end-to-end tests run keepers against the real dev server.
type TemporalReach struct {
	Down atomic.Bool
	// Pending is what a describe of any workflow shows; set it before the keeper runs, or
	// with SetPending.
	Pending  []*workflowpb.PendingActivityInfo
	mu       sync.Mutex
	failed   [][]byte
	failedID []string
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

// CompleteActivityByID records the activity id of an attempt failed, unless Down is set.
func (r *TemporalReach) CompleteActivityByID(_ context.Context, _, _, _, activityID string, _ any, _ error) error {
	if r.Down.Load() {
		return errors.New("unavailable")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failedID = append(r.failedID, activityID)
	return nil
}

// DescribeWorkflowExecution shows Pending, or answers that there is no such workflow when
// Pending is empty.
func (r *TemporalReach) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if r.Down.Load() {
		return nil, errors.New("unavailable")
	}
	r.mu.Lock()
	pending := r.Pending
	r.mu.Unlock()
	if len(pending) == 0 {
		return nil, serviceerror.NewNotFound("no workflows here")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{PendingActivities: pending}, nil
}

// SetPending changes what a describe shows while a keeper runs.
func (r *TemporalReach) SetPending(p []*workflowpb.PendingActivityInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Pending = p
}

// FailedIDs lists the activity ids of the attempts failed by id so far.
func (r *TemporalReach) FailedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failedID...)
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
