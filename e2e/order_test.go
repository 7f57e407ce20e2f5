//go:build integration

package e2e

// The orderings the design record gave up and brokerswitch keeps, because the producer's
// notifications decide them: where it went, and when. Each scenario failed before the
// producer's trail existed (brokerstate/trail.go).

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// notifyAll sends the notices in the order given and returns brokerswitch's answers. The
// scenarios check them after the oracle: what the order of events shows comes first.
func (s *stack) notifyAll(p *simulate.Producer, notices ...simulate.Notice) []string {
	s.t.Helper()
	var outcomes []string
	for _, n := range notices {
		res, err := p.Notify(context.Background(), n)
		require.NoError(s.t, err)
		outcomes = append(outcomes, res.Outcome)
	}
	return outcomes
}

// routeOf lists the Pending Switch's hops by index.
func routeOf(st brokerstate.State) []int {
	var out []int
	if st.Pending != nil {
		for _, h := range st.Pending.Route {
			out = append(out, h.Index)
		}
	}
	return out
}

// Scenario 14. The producer rotates A→B→C with backlogs on A and B, and C's notification
// arrives before B's: B is placed between A and C by its time, not read early as a spare.
func TestScenario14ReversedNotificationsKeepTheMiddleBroker(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3, nil)
	p, log := s.producer(nil)
	msgs := s.workload(mixed(30, 141))
	ctx := context.Background()
	third := len(msgs) / 3
	require.NoError(t, p.Publish(ctx, msgs[:third]...))
	toB, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, msgs[third:2*third]...))
	toC, err := p.Rotate(ctx, 2)
	require.NoError(t, err)
	outcomes := s.notifyAll(p, toC, toB, toB)
	route := routeOf(s.State())

	s.StartWorker()
	require.NoError(t, p.Publish(ctx, msgs[2*third:]...))
	s.waitFor("both hops", time.Minute, func() bool { return s.Switched(2) })
	v := s.verify(log, time.Minute)
	s.requireFlipAfterDrain(0, 1)
	s.requireFlipAfterDrain(1, 2)
	s.report(v, s.lagOf())
	require.Equal(t, []int{1, 2}, route, "A → B → C")
	require.Equal(t, []string{brokerstate.NotificationRecorded, brokerstate.NotificationRecorded, brokerstate.NotificationStale}, outcomes)
}

// Scenario 15. Two spares hold leftovers from two earlier rotations: the producer went
// 0 → 2 → 1 → 3 while nothing read, and the operator had already forced 3. The Leftover
// Drain reads 0, then 2, then 1, as the producer left them; index order would apply 1's
// events before 2's older ones.
func TestScenario15SparesInTheProducersOrder(t *testing.T) {
	t.Parallel()
	s := newStack(t, 4, map[string]string{"CONSUMER_WINDOW": "3s"})
	p, log := s.producer(func(c *simulate.Config) { c.Notify = simulate.NotifyNow })
	ctx := context.Background()
	stop := s.StartWorker()
	status, body := s.Call(http.MethodPost, "/api/v1/broker/switch/3", stacktest.OperatorToken, "")
	require.Equal(t, http.StatusOK, status, body)
	stop() // nothing reads while the producer rotates

	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 151))...))
	for _, to := range []int{2, 1} {
		_, err := p.Rotate(ctx, to)
		require.NoError(t, err)
		require.NoError(t, p.Publish(ctx, s.workload(mixed(8, uint64(150+to)))...))
	}
	_, err := p.Rotate(ctx, 3) // back to the broker we read: no route
	require.NoError(t, err)
	st := s.State()
	require.Equal(t, 3, st.ActiveIndex)
	require.Nil(t, st.Pending)

	s.StartWorker()
	s.waitFor("the spares drained", time.Minute, func() bool { return s.drained(0) && s.drained(1) && s.drained(2) })
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 155))...))
	v := s.verify(log, time.Minute)
	s.requireBrokerOrder(0, 2)
	s.requireBrokerOrder(2, 1)
	s.requireBrokerOrder(1, 3)
	s.report(v, "-")
}

// Scenario 16. The operator cancels a Pending Switch while the active broker still has a
// backlog, and the producer keeps publishing to its new broker. That broker is the
// future, not a spare: the Leftover Drain reads it only once the active broker is empty.
func TestScenario16ACancelDoesNotReadTheFutureFirst(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Second
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": window.String(), "PREFETCH": "10"})
	p, log := s.producer(func(c *simulate.Config) { c.Notify = simulate.NotifyNow })
	msgs := s.workload(mixed(30, 161))
	ctx := context.Background()
	s.StartWorker()
	require.NoError(t, p.Publish(ctx, msgs[:4]...))
	s.waitFor("the first events applied", time.Minute, func() bool { return s.deliveries() == 4 })

	// Hold the ledger: each window keeps one batch in hand, and broker 0 keeps a backlog.
	release := s.holdLedger()
	locked := time.Now()
	half := len(msgs) / 2
	require.NoError(t, p.Publish(ctx, msgs[4:half]...))
	_, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	s.waitFor("the pending switch", time.Minute, func() bool { return s.State().Pending != nil })
	asked := time.Now()
	status, body := s.Call(http.MethodDelete, "/api/v1/broker/pending-switch", stacktest.OperatorToken, "")
	t.Logf("the cancel was answered %d in %s", status, time.Since(asked).Round(time.Millisecond))
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	s.requireOrdersAnsweredInTheirTask()
	s.waitFor("the cancel", time.Minute, func() bool { return s.State().Pending == nil })
	require.NoError(t, p.Publish(ctx, msgs[half:]...)) // the producer goes on, on broker 1
	// The fault outlasts two windows, so that the next window starts while broker 0 still
	// has its backlog: that window's Leftover Drain is what this scenario is about.
	s.waitFor("two windows' time", time.Minute, func() bool { return time.Since(locked) > 2*window })
	require.False(t, s.drained(0), "broker 0 still has a backlog")
	release()

	v := s.verify(log, 2*time.Minute)
	require.Equal(t, 0, s.State().ActiveIndex, "a cancel does not move")
	s.requireBrokerOrder(0, 1)
	s.report(v, "-")
}

// Scenario 17. Duplicate and equal-time notifications, late and reversed: the producer
// goes A→B, then B→C and C→D in the same second; we hear D, C, B, then each again. The
// route is A → B → C → D, each repeat a duplicate, and every event applied in order.
func TestScenario17DuplicateAndEqualTimeNotifications(t *testing.T) {
	t.Parallel()
	s := newStack(t, 4, nil)
	p, log := s.producer(nil)
	ctx := context.Background()
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	var notices []simulate.Notice
	for i, to := range []int{1, 2, 3} {
		require.NoError(t, p.Publish(ctx, s.workload(mixed(8, uint64(170+i)))...))
		_, err := p.Rotate(ctx, to)
		require.NoError(t, err)
		at := base
		if to > 1 {
			at = base.Add(time.Second) // C and D in the same second
		}
		notices = append(notices, p.NoticeFor(to, at))
	}
	toB, toC, toD := notices[0], notices[1], notices[2]
	// C before D: at an equal time, arrival order is the only order there is.
	outcomes := s.notifyAll(p, toC, toD, toB, toD, toC, toB)
	route := routeOf(s.State())

	s.StartWorker()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 174))...))
	s.waitFor("three hops", time.Minute, func() bool { return s.Switched(3) })
	v := s.verify(log, time.Minute)
	s.requireFlipAfterDrain(0, 1)
	s.requireFlipAfterDrain(1, 2)
	s.requireFlipAfterDrain(2, 3)
	s.report(v, s.lagOf())
	require.Equal(t, []int{1, 2, 3}, route)
	require.Equal(t, []string{brokerstate.NotificationRecorded, brokerstate.NotificationRecorded, brokerstate.NotificationRecorded,
		brokerstate.NotificationStale, brokerstate.NotificationStale, brokerstate.NotificationStale}, outcomes)
}

// publishBeforeNotify is scenario 18: A has a backlog, the producer rotates to B and
// publishes there at once, and its notification comes late (by late), or never (late <
// 0). B is the producer's future, not a spare: none of its events may be applied before
// A's last, and with no notification they are read once the grace has passed.
func publishBeforeNotify(t *testing.T, late time.Duration, grace time.Duration) {
	s := newStack(t, 2, map[string]string{
		"CONSUMER_WINDOW": "2s", "PREFETCH": "10", "UNNOTIFIED_BROKER_GRACE": grace.String(),
	})
	p, log := s.producer(nil) // the notification is sent by hand, late
	msgs := s.workload(mixed(40, 181))
	ctx := context.Background()
	half := len(msgs) / 2
	require.NoError(t, p.Publish(ctx, msgs[:half]...)) // A's backlog
	toB, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, msgs[half:]...)) // at once, before any notification

	began := time.Now()
	o := s.startObservedWorker()
	// The delay counts from when the windows are at work: a window that reads B early
	// would do it within this time.
	s.waitFor("the first events of A applied", time.Minute, func() bool { return s.AppliedFrom(0) > 0 })
	started := time.Now()
	held := []string{"broker", "1"}
	o.waitMetric(s, "a window to leave broker 1's messages for the notification", positive, "brokerswitch_unannounced_held_total", held...)
	if late >= 0 {
		s.waitFor("the notification's delay", late+time.Minute, func() bool { return time.Since(started) >= late })
		require.Zero(t, s.AppliedFrom(1), "broker 1's events were applied before its notification")
		require.Equal(t, []string{brokerstate.NotificationRecorded}, s.notifyAll(p, toB))
		s.waitFor("the switch to broker 1", time.Minute, func() bool { return s.State().ActiveIndex == 1 })
	}
	v := s.verify(log, 2*time.Minute)
	s.requireBrokerOrder(0, 1)
	lag := s.lagOf()
	if late < 0 {
		lag = "-"
		require.Equal(t, 0, s.State().ActiveIndex, "nothing moves without a notification")
		var first time.Time
		require.NoError(t, s.DB.Raw("SELECT min(applied_at) FROM github_deliveries WHERE broker_index = 1").Scan(&first).Error)
		require.False(t, first.Before(began.Add(grace)), "broker 1's first event was applied at %s, before the grace ended at %s",
			first, began.Add(grace))
		o.waitMetric(s, "the unannounced messages counted", positive, "brokerswitch_unannounced_messages_total", held...)
	} else {
		require.Zero(t, o.value(t, "brokerswitch_unannounced_messages_total"), "nothing was read without a notification")
	}
	s.report(v, lag)
}

// Scenario 18a. The notification comes 6 s after the producer's first publish to B.
func TestScenario18aPublishBeforeANotificationLateBySeconds(t *testing.T) {
	t.Parallel()
	publishBeforeNotify(t, 6*time.Second, config.DefaultUnnotifiedBrokerGrace)
}

// Scenario 18b. The notification comes 2 minutes late, as one through the producer's
// retry queue does.
func TestScenario18bPublishBeforeANotificationLateByMinutes(t *testing.T) {
	t.Parallel() // it mostly waits for the notification
	publishBeforeNotify(t, 2*time.Minute, config.DefaultUnnotifiedBrokerGrace)
}

// Scenario 18c. No notification ever comes: B's events are read once the (shortened)
// grace has passed and A is empty, and the metric behind the alert says so.
func TestScenario18cPublishWithoutANotification(t *testing.T) {
	t.Parallel() // it mostly waits for the grace
	publishBeforeNotify(t, -1, 20*time.Second)
}

// Scenario 20. The operator forces broker 1 while the producer stays on 0, whose events
// the Leftover Drain reads as they come; the producer moves to 2 (a hop out of the
// forced broker), and later returns to 0, publishing there before its notification while
// 2 still has a backlog. Windows found 0 empty after the producer left it, so what it
// publishes there on its return is its future: it waits for the notification, and is
// applied after 2's events, not before them as stragglers of its earlier stay.
func TestScenario20AForceAHopOutAndAReturn(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3, map[string]string{"CONSUMER_WINDOW": "2s", "PREFETCH": "10"})
	p, log := s.producer(nil) // notifications by hand
	ctx := context.Background()
	stop := s.StartWorker()
	status, body := s.Call(http.MethodPost, "/api/v1/broker/switch/1", stacktest.OperatorToken, "")
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 201))...))
	s.waitFor("the producer's events on 0 read by the Leftover Drain", time.Minute, func() bool {
		return s.AppliedFrom(0) > 0 && s.drained(0)
	})

	toC, err := p.Rotate(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, []string{brokerstate.NotificationRecorded}, s.notifyAll(p, toC))
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 202))...))
	s.waitFor("the switch to 2", time.Minute, func() bool { return s.Switched(2) })
	// A window after the producer's move finds 0 empty and takes nothing; that is what its
	// mark must say from now on, on every queue: a queue whose last mark is older than the
	// move's record was last seen while the producer was still on 0, and what 0 holds later
	// may be what it published before it left, which is applied at once.
	moved := s.State().Trail.Visits
	left := moved[len(moved)-1].SeenAt // the visit to 2, on Postgres' clock
	require.Equal(t, 2, moved[len(moved)-1].Index)
	require.False(t, left.IsZero())
	s.waitFor("0 seen empty after the producer left it, on every queue", time.Minute, func() bool {
		var n int64
		require.NoError(t, s.DB.Raw(`SELECT count(DISTINCT queue) FROM spare_marks WHERE vhost = ? AND queue <> ''
			AND drained_at >= ?`, s.Config.Brokers[0].Vhost, left).Scan(&n).Error)
		return n == int64(len(s.Config.Queues))
	})
	stop() // nothing reads while 2 fills and the producer returns to 0

	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 203))...))
	toA, err := p.Rotate(ctx, 0)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(8, 204))...)) // before its notification
	s.StartWorker()
	s.waitFor("2's backlog applied", time.Minute, func() bool { return s.drained(2) && s.AppliedFrom(2) > 0 })
	require.Equal(t, []string{brokerstate.NotificationRecorded}, s.notifyAll(p, toA))
	s.waitFor("the switch back to 0", time.Minute, func() bool { return s.Switched(0) })
	v := s.verify(log, 2*time.Minute)
	s.report(v, s.lagOf())
}

// Scenario 21. A is active and empty; the producer goes A → B, publishes on B, goes on to
// C within the second and publishes there. C's notification comes at once, B's later, as
// one through the producer's retry queue does. A is drained, but the hop to C must not
// commit while B holds what the producer published before it moved on: it waits, and
// says so in GET /api/v1/broker, until B's word puts B on the route first. Every one of
// B's events is applied before C's.
func TestScenario21ALateWordForAHopTheProducerLeft(t *testing.T) {
	t.Parallel()
	s := newStack(t, 3, map[string]string{"CONSUMER_WINDOW": "2s", "PREFETCH": "10"})
	p, log := s.producer(nil) // notifications by hand
	ctx := context.Background()
	s.StartWorker()
	toB, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(12, 211))...))
	toC, err := p.Rotate(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, s.workload(mixed(12, 212))...))
	require.Equal(t, []string{brokerstate.NotificationRecorded}, s.notifyAll(p, toC))

	// A is empty: only B holds the hop.
	s.waitUntil("the hop to C held by broker 1", time.Minute, func() (bool, string) {
		status, body := s.Call(http.MethodGet, "/api/v1/broker", stacktest.OperatorToken, "")
		return status == http.StatusOK && strings.Contains(body, `"heldBy":[{"broker":1`) &&
			strings.Contains(body, "Switch 0 → 2 waits: broker 0 is drained, but broker 1 holds messages"), body
	})
	st := s.State()
	require.Equal(t, 0, st.ActiveIndex, "the hop to C committed past B")
	require.Zero(t, s.AppliedFrom(1)+s.AppliedFrom(2), "the producer's new brokers read early")

	require.Equal(t, []string{brokerstate.NotificationRecorded}, s.notifyAll(p, toB), "B's word, late")
	s.waitFor("the switch to 2, through 1", time.Minute, func() bool { return s.Switched(2) })
	v := s.verify(log, 2*time.Minute)
	s.requireBrokerOrder(1, 2)
	s.report(v, s.lagOf())
}

// Scenario 22. The producer goes A → B with a backlog on A; the operator cancels, and B's
// events wait ahead of A's. Once A's backlog is applied, within the window that read it,
// the producer comes back to A and says so: B is now behind A in its order. The window
// reading A ends at once, and the next one applies B's backlog before anything the
// producer publishes on A next, not after the window's end or the pause before it reads
// a spare ahead (minutes).
func TestScenario22AReturnAfterACancel(t *testing.T) {
	t.Parallel()
	s := newStack(t, 2, map[string]string{"CONSUMER_WINDOW": "10m", "PREFETCH": "10"})
	p, log := s.producer(nil)
	ctx := context.Background()
	require.NoError(t, p.Publish(ctx, s.workload(mixed(6, 221))...)) // A's backlog
	toB, err := p.Rotate(ctx, 1)
	require.NoError(t, err)
	onB := s.workload(mixed(6, 222))
	require.NoError(t, p.Publish(ctx, onB...))
	require.Equal(t, []string{brokerstate.NotificationRecorded}, s.notifyAll(p, toB))
	// The cancel lands before any worker runs, so that no drain check commits the hop.
	_, err = s.Store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
		return st.CancelPending(time.Time{}, time.Now()), nil
	})
	require.NoError(t, err)

	s.StartWorker()
	backlog := int64(len(s.workload(mixed(6, 221))))
	s.waitFor("A's backlog applied", time.Minute, func() bool { return s.AppliedFrom(0) >= backlog && s.drained(0) })
	require.Zero(t, s.AppliedFrom(1), "B is ahead of A: read only after the window's pause")

	toA, err := p.Rotate(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{brokerstate.NotificationAlreadyActive}, s.notifyAll(p, toA))
	s.waitFor("B's backlog applied, the windows on A ended", time.Minute, func() bool {
		return s.AppliedFrom(1) == int64(len(onB))
	})
	require.NoError(t, p.Publish(ctx, s.workload(mixed(6, 223))...))
	v := s.verify(log, 2*time.Minute)
	s.report(v, "-")
}
