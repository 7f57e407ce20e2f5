package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/windowplan"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// newWindowTestEnv is a test environment with the worker's options and the window
// activities registered.
func newWindowTestEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(quietLogger())
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options(config.Config{}))
	env.RegisterActivity(&activities.Window{})
	return env
}

func newWindowEnv(t *testing.T, plan activities.WindowPlan) (*testsuite.TestWorkflowEnvironment, *[]string) {
	env := newWindowTestEnv()
	var a *activities.Window
	var calls []string
	env.OnActivity(a.PrepareWindow, mock.Anything, mock.Anything).Return(func(_ context.Context, queue string) (activities.PreparedWindow, error) {
		require.Equal(t, "issues", queue)
		calls = append(calls, "plan")
		if len(plan.Leftover) > 0 {
			calls = append(calls, "leftover")
		}
		return activities.PreparedWindow{Plan: plan}, nil
	})
	return env, &calls
}

func TestQueueWindowDrainsLeftoversThenConsumesAndContinuesAsNew(t *testing.T) {
	plan := activities.WindowPlan{ActiveIndex: 1, Leftover: []int{0, 2}, Window: 5 * time.Minute, LeftoverDrainCap: 500}
	env, calls := newWindowEnv(t, plan)
	var a *activities.Window
	env.OnActivity(a.Consume, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ConsumeInput) error {
		require.Equal(t, activities.ConsumeInput{Queue: "issues", BrokerIndex: 1, Window: 5 * time.Minute}, in)
		*calls = append(*calls, "consume")
		return nil
	})

	env.ExecuteWorkflow(workflows.QueueWindow, workflows.QueueWindowInput{Queue: "issues"})

	require.True(t, env.IsWorkflowCompleted())
	require.True(t, workflow.IsContinueAsNewError(env.GetWorkflowError()), "a window ends by continuing as new: %v", env.GetWorkflowError())
	require.Equal(t, []string{"plan", "leftover", "consume"}, *calls, "leftovers are older than the active broker's messages")
}

func TestQueueWindowSkipsTheLeftoverDrainWithOneBroker(t *testing.T) {
	env, calls := newWindowEnv(t, activities.WindowPlan{Window: time.Minute})
	var a *activities.Window
	env.OnActivity(a.Consume, mock.Anything, mock.Anything).Return(func(context.Context, activities.ConsumeInput) error {
		*calls = append(*calls, "consume")
		return nil
	})
	env.ExecuteWorkflow(workflows.QueueWindow, workflows.QueueWindowInput{Queue: "issues"})
	require.True(t, workflow.IsContinueAsNewError(env.GetWorkflowError()))
	require.Equal(t, []string{"plan", "consume"}, *calls)
}

// TestQueueWindowStartsOverWhenItsActivityFailsForGood: a failed window workflow would
// leave its queue unread until a worker restart; a window starts over instead.
func TestQueueWindowStartsOverWhenItsActivityFailsForGood(t *testing.T) {
	env, _ := newWindowEnv(t, activities.WindowPlan{Window: time.Minute, Settle: time.Minute})
	var a *activities.Window
	env.OnActivity(a.Consume, mock.Anything, mock.Anything).Return(
		temporal.NewNonRetryableApplicationError("settling timed out after the cancel", "Timeout", nil))

	env.ExecuteWorkflow(workflows.QueueWindow, workflows.QueueWindowInput{Queue: "issues"})

	require.True(t, workflow.IsContinueAsNewError(env.GetWorkflowError()), "a window starts over: %v", env.GetWorkflowError())
}

// TestQueueWindowDrainsOnWhenTheLeftoverDrainStopsAtItsCap: messages may remain behind the
// cap on the other broker, and they are older than the active broker's: the window does
// not consume, it continues as new to drain on.
func TestQueueWindowDrainsOnWhenTheLeftoverDrainStopsAtItsCap(t *testing.T) {
	env := newWindowTestEnv()
	var a *activities.Window
	plan := activities.WindowPlan{ActiveIndex: 1, Leftover: []int{0, 2}, Window: time.Minute, LeftoverDrainCap: 500}
	env.OnActivity(a.PrepareWindow, mock.Anything, mock.Anything).Return(activities.PreparedWindow{
		Plan: plan, Drained: windowplan.LeftoverDrainResult{Taken: map[int]int{0: 300, 2: 200}},
	}, nil)
	consumed := false
	env.OnActivity(a.Consume, mock.Anything, mock.Anything).Return(func(context.Context, activities.ConsumeInput) error {
		consumed = true
		return nil
	}).Maybe()

	env.ExecuteWorkflow(workflows.QueueWindow, workflows.QueueWindowInput{Queue: "issues"})

	require.True(t, workflow.IsContinueAsNewError(env.GetWorkflowError()), "%v", env.GetWorkflowError())
	require.False(t, consumed, "the active broker waits until the leftovers are drained")
}

// The consume activity sends no heartbeats (a worker's liveness is its lease), may last the
// window and the slowest settling of its batch in hand, and watches the spares its
// Leftover Drain left behind.
func TestQueueWindowConsumesWithoutHeartbeatsForTheWindowAndItsSettling(t *testing.T) {
	env := newWindowTestEnv()
	var a *activities.Window
	plan := activities.WindowPlan{ActiveIndex: 1, Leftover: []int{0}, Window: time.Hour, Settle: 51 * time.Minute, LeftoverDrainCap: 500}
	spares := []windowplan.SpareWatch{{Broker: 0, Behind: true}}
	env.OnActivity(a.PrepareWindow, mock.Anything, mock.Anything).Return(activities.PreparedWindow{
		Plan: plan, Drained: windowplan.LeftoverDrainResult{Taken: map[int]int{0: 3}}, Spares: spares,
	}, nil)
	var got activities.ConsumeInput
	env.OnActivity(a.Consume, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ConsumeInput) error {
		got = in
		return nil
	})
	var infos []activity.Info
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		infos = append(infos, *info)
	})
	env.ExecuteWorkflow(workflows.QueueWindow, workflows.QueueWindowInput{Queue: "issues"})
	require.True(t, workflow.IsContinueAsNewError(env.GetWorkflowError()), "%v", env.GetWorkflowError())
	require.Equal(t, spares, got.Spares)
	require.Len(t, infos, 2)
	for _, info := range infos {
		require.Zero(t, info.HeartbeatTimeout, "%s sends no heartbeats", info.ActivityType.Name)
	}
	consume := infos[1]
	require.GreaterOrEqual(t, consume.Deadline.Sub(consume.StartedTime), plan.Window+plan.Settle)
}
