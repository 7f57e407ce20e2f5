package workflows

import (
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
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
	}
}
