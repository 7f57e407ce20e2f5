//go:build integration

package ingest

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
)

// A panic in a decoder goroutine killed the process, and the message that set it off
// stayed at the head of its queue to do it again at every start. It is now a malformed
// message: rejected to -error with the reason, in the ledger under its delivery id, and
// the messages around it are applied.
func TestADecoderPanicMakesTheMessageMalformed(t *testing.T) {
	e := newEnv(t)
	e.ing.decode = func(d amqp.Delivery, maxBody int) (Event, error) {
		if d.Headers[HeaderDelivery] == "d-boom" {
			panic("a decoder bug")
		}
		return decodeWithin(d, maxBody)
	}
	verdicts := e.handle(t,
		delivery("pull_request", "d-1", example(t, "pull_request.opened.0")),
		delivery("pull_request", "d-boom", example(t, "pull_request.closed.0")),
		delivery("pull_request", "d-3", example(t, "pull_request.closed.0")),
	)
	assert.Equal(t, broker.Ack, verdicts[0].Outcome)
	require.Equal(t, broker.Reject, verdicts[1].Outcome)
	assert.Contains(t, verdicts[1].Reason, "the decoder failed on it (panic: a decoder bug)")
	assert.Equal(t, broker.Ack, verdicts[2].Outcome)
	assert.Equal(t, models.OutcomeError, e.ledger(t, "d-boom").Outcome)
	assert.True(t, strings.HasPrefix(e.ledger(t, "d-boom").ErrorReason, "malformed delivery"))
	assert.Equal(t, "d-3", e.pullRequest(t).LastDeliveryID, "the message behind it applied")
}
