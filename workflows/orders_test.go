package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecodeOrder(t *testing.T) {
	o := decodeOrder(SignalForceSwitch, []byte(`{"index": 2}`))
	require.Empty(t, o.Invalid)
	require.Equal(t, 2, o.Force.Index)
	o = decodeOrder(SignalPendingSwitch, []byte(`{"switchedAt": "yesterday"}`))
	require.NotEmpty(t, o.Invalid)
	o = decodeOrder(SignalCancelPendingSwitch, nil)
	require.Empty(t, o.Invalid, "the plain CLI signal has no input")
}

func TestTheQueueHoldsACappedNumberOfNotifications(t *testing.T) {
	var q orderQueue
	for range 2 * maxHeldNotifications {
		q.push(Order{Op: SignalPendingSwitch})
	}
	q.push(Order{Op: SignalForceSwitch})
	require.Len(t, q.orders, maxHeldNotifications+1, "a force is never dropped")
	require.Equal(t, SignalForceSwitch, q.orders[maxHeldNotifications].Op)
}

func TestDrainChecksBackOffUpToTheInterval(t *testing.T) {
	r := &switchRun{drainCheckInterval: 3 * time.Second}
	var got []time.Duration
	for checks := 1; checks <= 6; checks++ {
		r.status.Checks = checks
		got = append(got, r.nextCheckIn())
	}
	require.Equal(t, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		3 * time.Second, 3 * time.Second}, got)

	r.drainCheckInterval = 100 * time.Millisecond
	require.Equal(t, 100*time.Millisecond, r.nextCheckIn(), "never longer than the interval")
}
