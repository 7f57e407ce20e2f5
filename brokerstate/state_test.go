package brokerstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func note(index int, at time.Time) Notification {
	return Notification{Index: index, Host: "H.example", Vhost: "/", SwitchedAt: at}
}

func TestApplyNotification(t *testing.T) {
	st, outcome := State{}.ApplyNotification(note(1, t0), t0)
	require.Equal(t, NotificationRecorded, outcome)
	require.Equal(t, []Hop{{Index: 1, Host: "h.example", Vhost: "/", SwitchedAt: t0}}, st.Pending.Route)

	again, outcome := st.ApplyNotification(note(1, t0), t0)
	require.Equal(t, NotificationStale, outcome, "a repeated notification is stale")
	require.Equal(t, st, again)

	older, outcome := st.ApplyNotification(note(2, t0.Add(-time.Second)), t0)
	require.Equal(t, NotificationRecorded, outcome, "an out-of-order notification is placed by its time")
	require.Equal(t, []int{2, 1}, routeIndexes(older), "the producer went to 2 before 1")

	two, outcome := st.ApplyNotification(note(2, t0.Add(time.Minute)), t0)
	require.Equal(t, NotificationRecorded, outcome)
	require.Equal(t, []int{1, 2}, routeIndexes(two), "a second rotation extends the route: hop by hop")

	back, outcome := two.ApplyNotification(note(1, t0.Add(2*time.Minute)), t0)
	require.Equal(t, NotificationRecorded, outcome)
	require.Equal(t, []int{1}, routeIndexes(back), "a return to a broker on the route cuts the route there")

	home, outcome := two.ApplyNotification(note(0, t0.Add(3*time.Minute)), t0)
	require.Equal(t, NotificationRouteCanceled, outcome, "a notification for the active broker cancels the route")
	require.Nil(t, home.Pending)

	idle, outcome := State{}.ApplyNotification(note(0, t0), t0)
	require.Equal(t, NotificationAlreadyActive, outcome)
	require.Nil(t, idle.Pending)
}

func TestCompleteHop(t *testing.T) {
	st, _ := State{}.ApplyNotification(note(1, t0), t0)
	st, _ = st.ApplyNotification(note(2, t0.Add(time.Minute)), t0)

	next, ok := st.CompleteHop(0, st.Pending.Next(), 3, t0.Add(time.Hour))
	require.True(t, ok)
	require.Equal(t, 1, next.ActiveIndex)
	require.Equal(t, []int{2}, routeIndexes(next))
	require.Equal(t, &LastSwitch{From: 0, To: 1, SwitchedAt: t0, CompletedAt: t0.Add(time.Hour), Checks: 3}, next.LastSwitch)

	retried, ok := next.CompleteHop(0, st.Pending.Next(), 3, t0.Add(2*time.Hour))
	require.False(t, ok, "a retried commit finds the state moved on")
	require.Equal(t, next, retried)

	last, ok := next.CompleteHop(1, next.Pending.Next(), 1, t0.Add(3*time.Hour))
	require.True(t, ok)
	require.Equal(t, 2, last.ActiveIndex)
	require.Nil(t, last.Pending)

	stale, outcome := last.ApplyNotification(note(1, t0), t0)
	require.Equal(t, NotificationStale, outcome, "a completed switch's notification stays stale")
	require.Equal(t, last, stale)
}

func TestForce(t *testing.T) {
	st, _ := State{}.ApplyNotification(note(1, t0), t0)
	forced := st.Force(2, t0.Add(time.Minute), t0.Add(time.Minute))
	require.Equal(t, 2, forced.ActiveIndex)
	require.Nil(t, forced.Pending)
	require.True(t, forced.LastSwitch.Forced)
	_, outcome := forced.ApplyNotification(note(1, t0), t0)
	require.Equal(t, NotificationStale, outcome, "the forced-away notification does not come back")
}

func TestDrainCheckDrained(t *testing.T) {
	require.True(t, DrainCheck{Reachable: true, Counts: map[string]int{"a": 0, "a-retry": 0}}.Drained())
	require.False(t, DrainCheck{Reachable: true, Counts: map[string]int{"a": 0, "a-retry": 1}}.Drained(), "-retry counts")
	require.False(t, DrainCheck{Reachable: false}.Drained(), "an unreachable broker is not drained")
}

func routeIndexes(st State) []int {
	var out []int
	for _, h := range st.Pending.Route {
		out = append(out, h.Index)
	}
	return out
}

func TestCancelPendingSparesALaterNotification(t *testing.T) {
	st, _ := State{}.ApplyNotification(note(1, t0), t0)
	require.Nil(t, st.CancelPending(t0, t0).Pending)
	require.Nil(t, st.CancelPending(time.Time{}, t0).Pending, "a cancel without a time cancels whatever is pending")
	later, _ := st.ApplyNotification(note(2, t0.Add(time.Minute)), t0)
	canceled := later.CancelPending(t0, t0.Add(time.Hour))
	require.Equal(t, []int{2}, routeIndexes(canceled),
		"a cancel of [1] given before the second notification takes 1 off the route and spares 2")
	require.Equal(t, later.Pending.RecordedAt, canceled.Pending.RecordedAt)
	_, ahead := canceled.Spares([]int{0, 1, 2})
	require.Equal(t, []int{1}, ahead, "the canceled hop's broker is a spare ahead of the active broker")
	require.Nil(t, canceled.CancelPending(t0.Add(time.Minute), t0.Add(time.Hour)).Pending, "a cancel of [2] cancels the rest")
}

// A named cancel that finds its switch committed says so; one that finds it canceled,
// forced or still pending does not.
func TestCommittedPast(t *testing.T) {
	one, two := 1, 2
	st, _ := State{}.ApplyNotification(note(1, t0), t0)
	require.Nil(t, st.CommittedPast(t0, &one), "still pending: the cancel applies")
	committed, ok := st.CompleteHop(0, st.Pending.Next(), 3, t0.Add(time.Second))
	require.True(t, ok)
	ls := committed.CommittedPast(t0, &one)
	require.NotNil(t, ls, "the switch it names was committed")
	require.Equal(t, 1, ls.To)
	require.NotNil(t, committed.CommittedPast(t0, nil))
	require.Nil(t, committed.CommittedPast(time.Time{}, nil), "an unnamed cancel is never too late")
	require.Nil(t, st.CancelPending(t0, t0).CommittedPast(t0, &one), "canceled already: the cancel holds")
	require.Nil(t, st.Force(1, time.Time{}, t0).CommittedPast(t0, &one), "forced: the cancel holds")

	// The producer went on to 2 after the commit of 1: the cancel of [1] is still too late.
	onward, _ := committed.ApplyNotification(note(2, t0.Add(time.Minute)), t0)
	require.NotNil(t, onward.CommittedPast(t0, &one))
	// Two hops in one second: 1 committed before the operator read [2].
	same, _ := committed.ApplyNotification(noteAt(2, "c.example", t0), t0)
	require.Equal(t, []int{2}, routeIndexes(same))
	require.Nil(t, same.CommittedPast(t0, &two), "2 is pending")
	require.Nil(t, same.CancelPending(t0, t0).CommittedPast(t0, &two), "2 was canceled, not committed: 1's commit came before")
}

func noteAt(index int, host string, at time.Time) Notification {
	return Notification{Index: index, Host: host, Vhost: "/", SwitchedAt: at}
}

// Two rotations in the same second: the second broker is a new hop, the same broker again
// a duplicate.
func TestEqualSwitchedAt(t *testing.T) {
	st, outcome := State{}.ApplyNotification(noteAt(1, "b.example", t0), t0)
	require.Equal(t, NotificationRecorded, outcome)

	dup, outcome := st.ApplyNotification(noteAt(1, "B.example", t0), t0)
	require.Equal(t, NotificationStale, outcome, "the same host, vhost and time is a duplicate")
	require.Equal(t, st, dup)

	two, outcome := st.ApplyNotification(noteAt(2, "c.example", t0), t0)
	require.Equal(t, NotificationRecorded, outcome, "another broker at the same time is a new hop")
	require.Equal(t, []int{1, 2}, routeIndexes(two), "taken in arrival order")
	again, outcome := two.ApplyNotification(noteAt(1, "b.example", t0), t0)
	require.Equal(t, NotificationStale, outcome, "each broker at the mark is a duplicate once taken")
	require.Equal(t, two, again)

	// A mark an order brought back to now holds no broker: an equal time stays stale.
	cleared := State{SeenUntil: t0}
	_, outcome = cleared.ApplyNotification(noteAt(1, "b.example", t0), t0)
	require.Equal(t, NotificationStale, outcome)
}

// A mark ahead of the clock is brought back by a force or a cancel, and the skew limit
// refuses what lies beyond it.
func TestAFutureMarkIsClearedByAnOrder(t *testing.T) {
	future := t0.Add(59 * time.Minute)
	st, _ := State{}.ApplyNotification(noteAt(1, "b.example", future), t0)
	real := noteAt(2, "c.example", t0.Add(time.Second))
	placed, outcome := st.ApplyNotification(real, t0)
	require.Equal(t, NotificationRecorded, outcome)
	require.Equal(t, []int{2, 1}, routeIndexes(placed), "placed before the future-dated hop by its time")

	for name, cleared := range map[string]State{
		"force":  st.Force(0, t0, t0),
		"cancel": st.CancelPending(time.Time{}, t0),
	} {
		require.Equal(t, t0, cleared.SeenUntil, name)
		next, outcome := cleared.ApplyNotification(real, t0.Add(time.Second))
		require.Equal(t, NotificationRecorded, outcome, name)
		require.Equal(t, 2, next.Pending.Target().Index, "%s: the real notification is where the producer is", name)
	}
	past := st.Force(0, future.Add(time.Hour), future.Add(time.Hour))
	require.Equal(t, future, past.SeenUntil, "a mark that is not ahead stays")

	require.NoError(t, CheckSwitchedAt(t0.Add(5*time.Minute), t0, 5*time.Minute))
	err := CheckSwitchedAt(t0.Add(59*time.Minute), t0, 5*time.Minute)
	require.ErrorContains(t, err, "59m0s ahead")
	require.ErrorContains(t, err, "NOTIFICATION_MAX_CLOCK_SKEW")
	require.Error(t, CheckSwitchedAt(t0.Add(2*time.Minute), t0, time.Minute))
}

// A force keeps a Pending Switch recorded after it was asked for.
func TestAForceSparesALaterNotification(t *testing.T) {
	asked := t0.Add(time.Minute)
	before, _ := State{}.ApplyNotification(noteAt(1, "b.example", t0), t0)
	require.Nil(t, before.Force(1, asked, asked.Add(time.Second)).Pending, "known when asked: dropped")
	require.Nil(t, before.Force(1, time.Time{}, asked).Pending, "a plain CLI force drops whatever is pending")

	// The producer moved on to broker 2 after the operator asked to force broker 1.
	after, _ := before.ApplyNotification(noteAt(2, "c.example", t0.Add(2*time.Minute)), asked.Add(time.Second))
	forced := after.Force(1, asked, asked.Add(2*time.Second))
	require.Equal(t, 1, forced.ActiveIndex)
	require.Equal(t, []int{2}, routeIndexes(forced), "the later hop survives, less the hops up to the forced broker")

	elsewhere := after.Force(0, asked, asked.Add(2*time.Second))
	require.Equal(t, []int{1, 2}, routeIndexes(elsewhere), "forced off the route: the producer's route is followed from there")
}
