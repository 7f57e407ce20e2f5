package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
)

// A window asks for the exclusive consumer for as long as the broker takes to drop the
// silent connection that holds it: three of the heartbeats the connections negotiate,
// which the broker's URL may set over AMQP_HEARTBEAT.
func TestAWindowWaitsForTheConsumerAsLongAsTheURLsHeartbeatSays(t *testing.T) {
	eps, err := broker.ParseEndpoints("amqp://guest:guest@a.example.com/one?heartbeat=20,amqp://guest:guest@b.example.com/two")
	require.NoError(t, err)
	pool := broker.NewPool(eps, nil, broker.PoolSettings{Heartbeat: 4 * time.Second})
	w := &Window{Pool: pool}
	require.Equal(t, 3*20*time.Second+5*time.Second, w.consumerWait(0), "the URL's heartbeat")
	require.Equal(t, 3*4*time.Second+5*time.Second, w.consumerWait(1), "AMQP_HEARTBEAT")
}
