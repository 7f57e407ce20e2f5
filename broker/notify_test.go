//go:build integration

package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A queue deleted under its consumer makes the broker cancel the consumer
// (basic.cancel); the window ends with that reason, not as a closed channel.
func TestConsumeEndsWithTheBrokersCancel(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	r.publish("issues", numbered(3)...)

	var settled settleCounter
	done := r.consume(context.Background(), "issues", ConsumeOptions{Prefetch: testPrefetch, ConsumerTag: "bs-cancel-test", OnSettled: settled.add}, &recorder{})
	require.Eventually(t, func() bool { return settled.get(Ack) == 3 }, waitFor, 10*time.Millisecond)

	_, err := r.channel().QueueDelete("issues", false, false, false)
	require.NoError(t, err)

	err = waitDone(t, done)
	require.ErrorIs(t, err, ErrConsumerCancelled)
	require.ErrorContains(t, err, "consume issues on #0 ")
	require.ErrorContains(t, err, "bs-cancel-test")
	require.NotContains(t, err.Error(), "channel closed")
}
