package brokerstate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func hostNote(index int, at time.Time) Notification {
	return Notification{Index: index, Host: []string{"a", "b", "c", "d"}[index] + ".example", Vhost: "/", SwitchedAt: at}
}

func apply(t *testing.T, st State, n Notification, want string) State {
	t.Helper()
	next, outcome := st.ApplyNotification(n, t0)
	require.Equal(t, want, outcome, "notification for %d at %s", n.Index, n.SwitchedAt.Format(time.TimeOnly))
	return next
}

// The producer goes A→B at t1, then B→C at t2, and C's notification arrives first: B is
// placed between A and C, not left to the Leftover Drain.
func TestAReversedDoubleRotationKeepsTheMiddleBroker(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Minute)
	st := apply(t, State{}, hostNote(2, t2), NotificationRecorded)
	st = apply(t, st, hostNote(1, t1), NotificationRecorded)
	require.Equal(t, []int{1, 2}, hopIndexes(routeOrNil(st)), "A → B → C")
	require.Equal(t, t2, st.SeenUntil, "the newest time stays the mark")
	same := apply(t, st, hostNote(1, t1), NotificationStale)
	require.Equal(t, st, same, "the out-of-order notification again is a duplicate")

	st, ok := st.CompleteHop(0, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	require.Equal(t, 1, st.ActiveIndex)
	require.Equal(t, []int{2}, hopIndexes(routeOrNil(st)))
	// Older than the active broker's own time: stale, as it always was.
	apply(t, st, hostNote(3, t1.Add(-time.Second)), NotificationStale)
	// Between B and C, after B became active: still on the route.
	mid := apply(t, st, hostNote(3, t1.Add(time.Second)), NotificationRecorded)
	require.Equal(t, []int{3, 2}, routeIndexes(mid))

	st, ok = st.CompleteHop(1, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	require.Nil(t, st.Pending)
	apply(t, st, hostNote(3, t1.Add(time.Second)), NotificationStale)
}

// An out-of-order notification that puts a return to the active broker before the newest hop: the
// route restarts after the return.
func TestALateReturnToTheActiveBrokerCutsTheRoute(t *testing.T) {
	st := apply(t, State{}, hostNote(1, t0), NotificationRecorded)
	st = apply(t, st, hostNote(2, t0.Add(2*time.Minute)), NotificationRecorded)
	st = apply(t, st, hostNote(0, t0.Add(time.Minute)), NotificationRecorded)
	require.Equal(t, []int{2}, hopIndexes(routeOrNil(st)), "A → B → A → C: B is left behind")
	behind, ahead := st.Spares([]int{0, 1, 2, 3})
	require.Equal(t, []int{3, 1}, behind, "B was left before the producer came back to A")
	require.Empty(t, ahead)
}

// Spares are read in the order the producer left them, never-used first.
func TestSparesInTheProducersOrder(t *testing.T) {
	// The producer went 0 → 3 → 2 → 1 and the operator forced 1 without waiting.
	st := apply(t, State{}, hostNote(3, t0), NotificationRecorded)
	st = apply(t, st, hostNote(2, t0.Add(time.Minute)), NotificationRecorded)
	st = apply(t, st, hostNote(1, t0.Add(2*time.Minute)), NotificationRecorded)
	st = st.Force(1, time.Time{}, t0.Add(time.Hour))
	require.Nil(t, st.Pending)
	behind, ahead := st.Spares([]int{0, 1, 2, 3})
	require.Equal(t, []int{0, 3, 2}, behind, "0 was left first, then 3, then 2")
	require.Empty(t, ahead)

	behind, _ = State{ActiveIndex: 2}.Spares([]int{0, 1, 2, 3})
	require.Equal(t, []int{0, 1, 3}, behind, "without a trail, nothing says which was left first: index order")
}

// After a cancel, the producer's brokers are ahead of the active broker's backlog, and a
// out-of-order notification for the canceled stretch orders them without a route.
func TestACanceledRouteIsAheadOfTheActiveBroker(t *testing.T) {
	st := apply(t, State{}, hostNote(2, t0.Add(2*time.Minute)), NotificationRecorded)
	st = st.CancelPending(time.Time{}, t0.Add(time.Hour))
	require.Nil(t, st.Pending)
	behind, ahead := st.Spares([]int{0, 1, 2, 3})
	require.Equal(t, []int{1, 3}, behind)
	require.Equal(t, []int{2}, ahead, "the producer's broker is the future, not a spare")

	outOfOrder := apply(t, st, hostNote(1, t0.Add(time.Minute)), NotificationStale)
	require.Nil(t, outOfOrder.Pending, "the cancel covers it")
	behind, ahead = outOfOrder.Spares([]int{0, 1, 2, 3})
	require.Equal(t, []int{3}, behind)
	require.Equal(t, []int{1, 2}, ahead, "in the producer's order")

	// A newer notification after the cancel is a new route, and a force moves there.
	next := apply(t, outOfOrder, hostNote(3, t0.Add(3*time.Minute)), NotificationRecorded)
	require.Equal(t, []int{3}, routeIndexes(next))
	forced := outOfOrder.Force(2, time.Time{}, t0.Add(time.Hour))
	_, ahead = forced.Spares([]int{0, 1, 2, 3})
	require.Empty(t, ahead, "forced to the producer's broker, nothing is ahead")
}

// Whatever order the producer's notifications arrive in, duplicates included, the route
// is the one their times say: the one they give when they arrive in order.
func TestTheRouteDoesNotDependOnArrivalOrder(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 13))
		var path []Notification
		at := t0
		for range 1 + r.IntN(6) {
			at = at.Add(time.Duration(1+r.IntN(3)) * time.Second)
			path = append(path, hostNote(r.IntN(4), at))
		}
		inOrder := State{}
		for _, n := range path {
			inOrder, _ = inOrder.ApplyNotification(n, at)
		}
		arrivals := append(slices.Clone(path), path[r.IntN(len(path))])
		r.Shuffle(len(arrivals), func(i, j int) { arrivals[i], arrivals[j] = arrivals[j], arrivals[i] })
		got := State{}
		for _, n := range arrivals {
			got, _ = got.ApplyNotification(n, at)
		}
		require.Equal(t, routeOrNil(inOrder), routeOrNil(got), "seed %d: path %v, arrivals %v", seed, indexes(path), indexes(arrivals))
	}
}

func routeOrNil(st State) []Hop {
	if st.Pending == nil {
		return nil
	}
	return st.Pending.Route
}

func indexes(ns []Notification) []int {
	out := make([]int, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.Index)
	}
	return out
}

// The trail keeps the last visits only: older ones behind the active broker go first.
func TestTheTrailIsBounded(t *testing.T) {
	st := State{}
	at := t0
	for i := range 3 * maxTrail {
		at = at.Add(time.Second)
		st, _ = st.ApplyNotification(hostNote(1+i%3, at), at)
		if i%2 == 0 && st.Pending != nil {
			st, _ = st.CompleteHop(st.ActiveIndex, st.Pending.Next(), 1, at)
		}
	}
	require.LessOrEqual(t, len(st.Trail.Visits), maxTrail+1)

	// Ever older notifications with nothing completed: none lies behind the active broker.
	st, _ = State{}.ApplyNotification(hostNote(1, t0), t0)
	for i := range 5 * maxTrail {
		st, _ = st.ApplyNotification(hostNote(1+i%3, t0.Add(-time.Duration(i+1)*time.Second)), t0)
	}
	require.Len(t, st.Trail.Visits, 4*maxTrail)
}

// Notifications arriving in any order, interleaved with the drain's commits, forces and
// cancels: after every step the state holds together, each order does what it says, and
// a notification newer than all others is where the route goes.
func TestTheTrailHoldsUnderInterleavedOrders(t *testing.T) {
	brokers := []int{0, 1, 2, 3}
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 21))
		st := State{}
		at := t0
		var steps []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d after %v: %s", seed, steps, fmt.Sprintf(format, args...))
		}
		for range 4 + r.IntN(20) {
			now := at.Add(time.Hour)
			before := st
			switch k := r.IntN(10); {
			case k < 5: // a notification: new, or out of order by up to a few seconds
				switchedAt := at.Add(time.Duration(1+r.IntN(3)) * time.Second)
				if r.IntN(3) == 0 {
					switchedAt = at.Add(-time.Duration(r.IntN(5)) * time.Second)
				}
				n := hostNote(r.IntN(4), switchedAt)
				newest := switchedAt.After(st.SeenUntil)
				at = maxTime(at, switchedAt)
				var outcome string
				st, outcome = st.ApplyNotification(n, now)
				steps = append(steps, fmt.Sprintf("notify %d@%s=%s", n.Index, switchedAt.Format("05"), outcome))
				if newest {
					switch {
					case n.Index == st.ActiveIndex && st.Pending != nil:
						fail("the producer is back on the active broker, yet a route is pending")
					case n.Index != st.ActiveIndex && (st.Pending == nil || st.Pending.Target().Index != n.Index):
						fail("the newest notification, for %d, is not the route's target: %v", n.Index, hopIndexes(routeOrNil(st)))
					}
				}
			case k < 7: // the drain check passed
				if st.Pending == nil {
					continue
				}
				hop := st.Pending.Next()
				var ok bool
				st, ok = st.CompleteHop(st.ActiveIndex, hop, 1, now)
				steps = append(steps, fmt.Sprintf("commit %d", hop.Index))
				if !ok || st.ActiveIndex != hop.Index {
					fail("the hop to %d was not committed", hop.Index)
				}
				if want := before.Pending.Route[1:]; !slices.Equal(want, routeOrNil(st)) && (len(want) > 0 || st.Pending != nil) {
					fail("the route after a commit is %v, not the rest %v", routeOrNil(st), want)
				}
			case k < 8: // a force, plain or asked at some time
				index := r.IntN(4)
				askedAt := time.Time{}
				if r.IntN(2) == 0 {
					askedAt = now.Add(-time.Duration(r.IntN(3)) * time.Hour)
				}
				st = st.Force(index, askedAt, now)
				steps = append(steps, fmt.Sprintf("force %d asked %v", index, !askedAt.IsZero()))
				if st.ActiveIndex != index {
					fail("forced to %d, active is %d", index, st.ActiveIndex)
				}
				if askedAt.IsZero() && st.Pending != nil {
					fail("a plain force left %v pending", hopIndexes(routeOrNil(st)))
				}
			default: // a cancel, plain or naming the target an API read
				upTo := time.Time{}
				if before.Pending != nil && r.IntN(3) > 0 {
					upTo = before.Pending.Route[r.IntN(len(before.Pending.Route))].SwitchedAt
				}
				st = st.CancelPending(upTo, now)
				steps = append(steps, fmt.Sprintf("cancel up to %s", upTo.Format("05")))
				if st.Pending != nil && (upTo.IsZero() || !st.Pending.Next().SwitchedAt.After(upTo)) {
					fail("the cancel up to %s left %v pending", upTo, routeOrNil(st))
				}
				if before.Pending != nil && !upTo.IsZero() {
					var later []Hop
					for _, h := range before.Pending.Route {
						if h.SwitchedAt.After(upTo) {
							later = append(later, h)
						}
					}
					// The route is read again from the producer's visits after upTo: the
					// later hops stay, and a visit the old route had cut may come back.
					kept := routeOrNil(st)
					for _, h := range later {
						i := slices.Index(kept, h)
						if i < 0 {
							fail("the cancel up to %s dropped the later hop %v: %v", upTo, h, routeOrNil(st))
						}
						kept = kept[i+1:]
					}
				}
			}
			requireCoherent(t, st, brokers, func(msg string) { fail("%s", msg) })
		}
	}
}

// requireCoherent checks what every state must hold, whatever led to it.
func requireCoherent(t *testing.T, st State, brokers []int, fail func(string)) {
	t.Helper()
	tr := st.Trail
	if !slices.IsSortedFunc(tr.Visits, func(a, b Hop) int { return a.SwitchedAt.Compare(b.SwitchedAt) }) {
		fail("the trail is not in the producer's order")
	}
	if tr.Behind < 0 || tr.Canceled < 0 || tr.Behind > len(tr.Visits) || tr.Canceled > len(tr.Visits) {
		fail(fmt.Sprintf("behind %d, canceled %d of %d visits", tr.Behind, tr.Canceled, len(tr.Visits)))
	}
	if st.Pending != nil {
		seen := map[int]bool{}
		for i, h := range st.Pending.Route {
			if h.Index == st.ActiveIndex || seen[h.Index] {
				fail(fmt.Sprintf("route %v from active %d visits a broker twice", hopIndexes(routeOrNil(st)), st.ActiveIndex))
			}
			seen[h.Index] = true
			if i > 0 && h.SwitchedAt.Before(st.Pending.Route[i-1].SwitchedAt) {
				fail("the route goes back in time")
			}
		}
	}
	if !slices.Equal(routeOrNil(st), routeOrNil(st.withRoute(st.Trail, time.Time{}))) {
		fail("the Pending Switch is not the trail's route")
	}
	for _, v := range tr.Visits {
		if v.SwitchedAt.After(st.SeenUntil) {
			fail("a visit lies after the mark")
		}
	}
	behind, ahead := st.Spares(brokers)
	all := append(append(append([]int{st.ActiveIndex}, behind...), ahead...), hopIndexes(routeOrNil(st))...)
	slices.Sort(all)
	if !slices.Equal(brokers, all) {
		fail(fmt.Sprintf("active, spares %v %v and route %v do not share out the brokers", behind, ahead, hopIndexes(routeOrNil(st))))
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func hopIndexes(hops []Hop) []int {
	out := []int{}
	for _, h := range hops {
		out = append(out, h.Index)
	}
	return out
}

// Two rotations at one switchedAt, notified in reverse: from orders them, where arrival
// order would have read them backwards.
func TestEqualSwitchedAtReversedIsOrderedByFrom(t *testing.T) {
	st := apply(t, State{}, fromNote(3, t0, 2), NotificationRecorded)
	st = apply(t, st, fromNote(2, t0, 1), NotificationRecorded)
	st = apply(t, st, fromNote(1, t0, 0), NotificationRecorded)
	require.Equal(t, []int{1, 2, 3}, hopIndexes(routeOrNil(st)), "A → B → C → D")
	require.Len(t, st.Trail.Visits, 3)
	_, outcome := st.ApplyNotification(fromNote(2, t0, 1), t0)
	require.Equal(t, NotificationStale, outcome, "a duplicate")
}

// A broker's last visit stays on the trail however many visits came since: the spares
// are still read in the order the producer left them.
func TestTheTrailKeepsEachBrokersLastVisit(t *testing.T) {
	st := apply(t, State{ActiveIndex: 3}, hostNote(0, t0), NotificationRecorded)
	st, _ = st.CompleteHop(3, st.Pending.Next(), 1, t0)
	at := t0
	for i := range 2 * maxTrail {
		at = at.Add(time.Second)
		st, _ = st.ApplyNotification(hostNote(1+i%2, at), at)
		st, _ = st.CompleteHop(st.ActiveIndex, st.Pending.Next(), 1, at)
	}
	require.Equal(t, 2, st.ActiveIndex)
	require.LessOrEqual(t, len(st.Trail.Visits), maxTrail+4)
	behind, _ := st.Spares([]int{0, 1, 2, 3})
	require.Equal(t, []int{3, 0, 1}, behind, "3 was left first, then 0, then 1")
}

// A force names where the producer is: the brokers the trail shows it used after its
// last announced visit to the forced broker are read before the forced broker, not after
// it, since the producer may have returned there without a word (an operator's force
// most often stands in for such a lost word), and then they hold older events.
func TestAForceReadsEveryOtherBrokerBeforeTheForcedOne(t *testing.T) {
	st := apply(t, State{}, hostNote(1, t0), NotificationRecorded)
	st = apply(t, st, hostNote(2, t0.Add(time.Minute)), NotificationRecorded)
	st = apply(t, st, hostNote(3, t0.Add(2*time.Minute)), NotificationRecorded)
	forced := st.Force(1, time.Time{}, t0.Add(time.Hour))
	require.Nil(t, forced.Pending, "the operator's hand wins: no route")
	behind, ahead := forced.Spares([]int{0, 1, 2, 3})
	require.ElementsMatch(t, []int{0, 2, 3}, behind)
	require.Empty(t, ahead)
}

// A cancel leaves the canceled broker ahead; the producer's return to the active broker
// puts it behind: the spares' order changed with neither the active broker nor the route,
// and a window reading the active broker must hear of it.
func TestAReturnAfterACancelChangesTheSparesOrder(t *testing.T) {
	brokers := []int{0, 1, 2}
	st := apply(t, State{}, hostNote(1, t0), NotificationRecorded)
	canceled := st.CancelPending(time.Time{}, t0.Add(time.Minute))
	_, ahead := canceled.Spares(brokers)
	require.Equal(t, []int{1}, ahead)
	back := apply(t, canceled, hostNote(0, t0.Add(2*time.Minute)), NotificationAlreadyActive)
	require.Nil(t, back.Pending)
	require.Equal(t, canceled.ActiveIndex, back.ActiveIndex)
	require.True(t, orderChanged(canceled, back, brokers), "1 is behind 0 now")
	require.False(t, orderChanged(back, back, brokers))
}
