package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Before the pool connects, the heartbeat is what it offers, negotiated as amqp091-go does
// against RabbitMQ's default offer: the URL's parameter over PoolSettings.Heartbeat, in whole
// seconds, the lower offer, and an offer of none (0) takes the broker's.
func TestTheHeartbeatOfferedBeforeTheFirstConnection(t *testing.T) {
	for _, c := range []struct {
		query      string
		configured time.Duration
		want       time.Duration
	}{
		{"", 0, brokerHeartbeat},
		{"", 7 * time.Second, 7 * time.Second},
		{"", 1500 * time.Millisecond, time.Second},
		{"", 500 * time.Millisecond, brokerHeartbeat},
		{"?heartbeat=20", 7 * time.Second, 20 * time.Second},
		{"?heartbeat=0", 7 * time.Second, brokerHeartbeat},
		{"?heartbeat=90", 0, brokerHeartbeat},
	} {
		eps, err := ParseEndpoints("amqp://guest:guest@a.example.com/one" + c.query)
		require.NoError(t, err)
		pool := NewPool(eps, nil, PoolSettings{Heartbeat: c.configured})
		require.Equal(t, c.want, pool.NegotiatedHeartbeat(0), "%q over %s", c.query, c.configured)
	}
	require.Zero(t, NewPool(nil, nil, PoolSettings{}).NegotiatedHeartbeat(3), "no such broker")
}
