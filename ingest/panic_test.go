package ingest

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A panic in the decoder (a bug a payload finds) must not kill the process: the message
// that set it off would stay at the head of its queue, to do it again at every start. It
// makes the message malformed, under its delivery id, so that the batch rejects it to
// -error and records it in the ledger like any malformed message; the messages around it
// decode.
func TestADecoderPanicMakesTheMessageMalformed(t *testing.T) {
	deliveries := []amqp.Delivery{
		delivery("pull_request", "d-1", example(t, "pull_request.opened.0")),
		delivery("pull_request", "d-boom", example(t, "pull_request.closed.0")),
		delivery("pull_request", "d-3", example(t, "pull_request.closed.0")),
	}
	decode := func(d amqp.Delivery, maxBody int) (Event, error) {
		if d.Headers[HeaderDelivery] == "d-boom" {
			panic("a decoder bug")
		}
		return decodeWithin(d, maxBody)
	}
	msgs := decodeAll("pull_requests", deliveries, 0, decode)
	require.Len(t, msgs, 3)
	assert.NoError(t, msgs[0].malformed)
	require.ErrorIs(t, msgs[1].malformed, ErrMalformed)
	assert.Contains(t, msgs[1].malformed.Error(), "the decoder failed on it (panic: a decoder bug)")
	assert.Equal(t, "d-boom", msgs[1].event.DeliveryID, "kept for the ledger")
	assert.NoError(t, msgs[2].malformed)
	assert.Equal(t, "d-3", msgs[2].event.DeliveryID)
}
