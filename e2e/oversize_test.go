//go:build integration

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// Each message over MAX_MESSAGE_BYTES used to fail its window's Consume attempt after the
// move, so the queue waited out the retry's backoff (up to 30 s) once per such message. The
// window now reads on in the same attempt: the good events between them are applied, the
// large ones are in -error, and the Consume that met them all is still on its first
// attempt.
func TestMessagesOverMaxMessageBytesCostTheWindowNoRetry(t *testing.T) {
	t.Parallel()
	const limit, large = 64 << 10, 5
	// A window longer than the test: the Consume described at the end is the one that met
	// every large message, not a later window's first attempt.
	s := newStack(t, 1, map[string]string{"MAX_MESSAGE_BYTES": "65536", "MAX_BATCH_BYTES": "65536", "CONSUMER_WINDOW": "30m"})
	var goods []payloads.Event
	for i := range large + 1 {
		good, err := payloads.Build("push", "", nil)
		require.NoError(t, err)
		goods = append(goods, good)
		s.Publish(0, good)
		if i < large {
			big, err := payloads.Build("push", "", func(p map[string]any) { p["padding"] = strings.Repeat("x", 4*limit) })
			require.NoError(t, err)
			s.Publish(0, big)
		}
	}
	s.StartWorker()
	s.waitFor("the good pushes applied and the large ones moved", 2*time.Minute, func() bool {
		return s.deliveries() == int64(len(goods)) && s.Counts(0, broker.ErrorQueue("pushes"))[broker.ErrorQueue("pushes")] == large
	})

	desc, err := s.Temporal.DescribeWorkflowExecution(context.Background(), workflows.QueueWindowWorkflowID("pushes"), "")
	require.NoError(t, err)
	var attempts []int32
	for _, pa := range desc.GetPendingActivities() {
		if pa.GetActivityType().GetName() == "Consume" {
			attempts = append(attempts, pa.GetAttempt())
		}
	}
	require.Equal(t, []int32{1}, attempts, "the window that moved the large messages consumes on, never retried")
	require.Equal(t, 0, s.Counts(0, "pushes")["pushes"])
}
