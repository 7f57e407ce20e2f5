//go:build integration

package stacktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
)

var server *testenv.Temporal

func TestMain(m *testing.M) { testenv.MainWithTemporal(m, &server) }

// A stack takes a producer's notification through its API into the broker state, and
// what is published to a broker shows in its counts; no worker runs, so nothing moves and
// the ledger stays empty.
func TestAStackTakesANotificationThroughItsAPI(t *testing.T) {
	s := New(t, Options{Brokers: 2, Server: server})
	st := s.State()
	require.Equal(t, 0, st.ActiveIndex)
	require.Nil(t, st.Pending)
	require.True(t, s.Switched(0))

	s.Notify(1, time.Now())
	st = s.State()
	require.NotNil(t, st.Pending, "the notification is recorded")
	require.Equal(t, 1, st.Pending.Next().Index)
	require.False(t, s.Switched(0), "a switch is pending")

	ev, err := payloads.Build("push", "", nil)
	require.NoError(t, err)
	s.Publish(0, ev)
	require.NoError(t, testenv.WaitUntil(context.Background(), 30*time.Second, "the event on broker 0", func() (bool, error) {
		return s.Counts(0, ev.Queue)[ev.Queue] == 1, nil
	}))
	require.Equal(t, 0, s.Counts(1, ev.Queue)[ev.Queue])
	ready, err := s.Ready(0, append(s.ErrorQueues(), ev.Queue)...)
	require.NoError(t, err)
	require.Equal(t, 1, ready, "the event and no -error message")
	require.Zero(t, s.Applied()+s.AppliedFrom(0)+s.InError(), "no worker, no ledger")
	consumed, err := s.Consumed(0)
	require.NoError(t, err)
	require.False(t, consumed, "no worker, no consumer")
	require.Len(t, s.Proxies, 2, "the service reaches every broker through a proxy")
	require.Equal(t, s.Env["TEMPORAL_NAMESPACE"], s.Config.TemporalNamespace)
}
