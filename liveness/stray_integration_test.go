//go:build integration

package liveness_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

const (
	// strayQueue is the task queue of the Hold activity; its workflow runs on another, so
	// that nothing but the test polls it until the worker under test starts.
	strayQueue = "hold"
	// holdStartToClose is how long a lost attempt would hold its workflow without the
	// keeper: far longer than the test.
	holdStartToClose = 10 * time.Minute
	// strayBound is how soon after its poll a lost attempt must be retried: well under
	// holdStartToClose, with room for a loaded machine.
	strayBound = 30 * time.Second
)

// holdWorkflow runs Hold once, retried at once when it fails, and returns the attempt
// that completed it.
func holdWorkflow(ctx workflow.Context) (int32, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           strayQueue,
		StartToCloseTimeout: holdStartToClose,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1},
	})
	var attempt int32
	err := workflow.ExecuteActivity(ctx, "Hold").Get(ctx, &attempt)
	return attempt, err
}

// countingClient counts the describes of the keeper that uses it: its scans.
type countingClient struct {
	client.Client
	describes atomic.Int64
}

func (c *countingClient) DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.describes.Add(1)
	return c.Client.DescribeWorkflowExecution(ctx, workflowID, runID)
}

// A poll of a live worker was handed an attempt and its answer was lost (a short cut from
// Temporal): Temporal shows the attempt started on the worker, which never got it, and no
// heartbeat timeout ends it. The worker's keeper fails it, so that Temporal retries it at
// once instead of after its start-to-close timeout; the retry, which the worker does run,
// is never failed.
func TestALiveWorkerFailsTheAttemptItsLostPollWasHanded(t *testing.T) {
	db, _ := modelstest.NewDB(t)
	ns, c := temporalServer.Namespace(t)
	ctx := context.Background()
	const identity = "1@live-worker@"
	const workflowID = "queue-window-issues"
	counting := &countingClient{Client: c}
	running := &liveness.Running{}
	k := &liveness.Keeper{DB: db, Temporal: counting, Identity: identity, TTL: ttl, Logger: slog.New(slog.DiscardHandler),
		Namespace: ns, Workflows: []string{workflowID}, Running: running}
	testenv.RunInBackground(t, k.Run)
	require.NoError(t, testenv.WaitUntil(ctx, 5*ttl, "the worker's lease", func() (bool, error) {
		var n int64
		err := db.Raw(`SELECT count(*) FROM worker_leases WHERE identity = ? AND expires_at > now()`, identity).Scan(&n).Error
		return n == 1, err
	}))

	workflows := sdkworker.New(c, "workflows", sdkworker.Options{})
	workflows.RegisterWorkflowWithOptions(holdWorkflow, workflow.RegisterOptions{Name: "Hold"})
	require.NoError(t, workflows.Start())
	t.Cleanup(workflows.Stop)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflowID, TaskQueue: "workflows"}, "Hold")
	require.NoError(t, err)

	// The first attempt goes to a poll of the worker's whose answer is dropped.
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	task, err := c.WorkflowService().PollActivityTaskQueue(pollCtx, &workflowservice.PollActivityTaskQueueRequest{
		Namespace: ns, Identity: identity,
		TaskQueue: &taskqueuepb.TaskQueue{Name: strayQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
	})
	require.NoError(t, err)
	require.NotEmpty(t, task.GetTaskToken(), "no attempt handed to the poll")
	require.EqualValues(t, 1, task.GetAttempt())
	lost := time.Now()

	// The worker polls on, and runs what it gets until the test lets it return.
	started := make(chan int32, 10)
	release := make(chan struct{})
	w := sdkworker.New(c, strayQueue, sdkworker.Options{Identity: identity, Interceptors: []interceptor.WorkerInterceptor{running}})
	w.RegisterActivityWithOptions(func(ctx context.Context) (int32, error) {
		attempt := activity.GetInfo(ctx).Attempt
		started <- attempt
		select {
		case <-release:
			return attempt, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}, activity.RegisterOptions{Name: "Hold"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	select {
	case attempt := <-started:
		require.EqualValues(t, 2, attempt, "the worker ran another attempt than the retry")
	case <-time.After(strayBound):
		t.Fatalf("the lost attempt was not retried within %s (its start-to-close timeout is %s)", strayBound, holdStartToClose)
	}
	t.Logf("the lost attempt was retried %s after its poll", time.Since(lost).Round(10*time.Millisecond))
	desc, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	require.NoError(t, err)
	require.Len(t, desc.GetPendingActivities(), 1)
	retry := desc.GetPendingActivities()[0]
	require.Equal(t, "WorkerLeaseExpired", retry.GetLastFailure().GetApplicationFailureInfo().GetType(), "the attempt was failed by the keeper")
	require.Equal(t, identity, retry.GetLastWorkerIdentity())

	// The keeper scans on while the retry runs here, for four renewal intervals, and leaves it be.
	scans := counting.describes.Load()
	require.NoError(t, testenv.WaitUntil(ctx, time.Minute, "eight more scans", func() (bool, error) {
		return counting.describes.Load() >= scans+8, nil
	}))
	close(release)
	var completed int32
	require.NoError(t, run.Get(ctx, &completed))
	require.EqualValues(t, 2, completed, "the attempt the worker ran was failed")
	require.Empty(t, started, "a third attempt ran")
}
