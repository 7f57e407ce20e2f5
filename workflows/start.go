package workflows

import (
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// BrokerSwitchStartOptions start the one BrokerSwitch workflow, or find it running.
func BrokerSwitchStartOptions(taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       BrokerSwitchWorkflowID,
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            "Follows the producer from broker to broker once the old one is drained",
	}
}

// QueueWindowStartOptions start a queue's window workflow, or find it running.
func QueueWindowStartOptions(taskQueue, queue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       QueueWindowWorkflowID(queue),
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            fmt.Sprintf("Consumer windows of queue %s", queue),
		// A window never fails by design (it starts over); should a run fail all the same,
		// the server starts the next one instead of leaving the queue unread.
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 2, MaximumInterval: 5 * time.Minute},
	}
}
