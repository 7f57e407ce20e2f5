package brokerstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const grace = time.Hour

// fromNote is hostNote with the broker the producer came from.
func fromNote(index int, at time.Time, from int) Notification {
	n := hostNote(index, at)
	f := hostNote(from, time.Time{})
	n.From = &Hop{Index: from, Host: f.Host, Vhost: f.Vhost}
	return n
}

// readSpare reads spare index with no marks but those given.
func readSpare(st State, index int, queue, reached SpareMark, now time.Time) SpareReading {
	return st.ReadSpare(index, st.CurrentMark(index, queue), st.CurrentMark(index, reached), now, grace)
}

// Which messages on a spare are stragglers and which may be the producer's future.
func TestWhatASpareHoldsIsReadByWhatTheTrailKnows(t *testing.T) {
	// A → B notified, B active after the hop: A was left behind.
	st := apply(t, State{}, hostNote(1, t0), NotificationRecorded)
	st, ok := st.CompleteHop(0, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	leftA := SpareMark{Reached: true} // written by the commit that left A

	require.Equal(t, ReadStragglers, readSpare(st, 0, SpareMark{}, leftA, t0), "A was left and not drained since")
	require.Equal(t, ReadReturned, readSpare(st, 2, SpareMark{}, SpareMark{}, t0), "the trail never reached C: its future, maybe")
	drained := SpareMark{DrainedAt: t0}
	require.Equal(t, ReadReturned, readSpare(st, 0, drained, leftA, t0), "A refilled after it was seen empty")

	held := SpareMark{HeldSince: t0}
	require.Equal(t, ReadReturned, readSpare(st, 2, held, SpareMark{}, t0.Add(grace-time.Second)))
	require.Equal(t, ReadUnannounced, readSpare(st, 2, held, SpareMark{}, t0.Add(grace)), "the grace is over")

	// The producer tells us it went back to A, then on to C: the mark of A's earlier
	// visit says nothing of what it holds now.
	st = apply(t, st, hostNote(0, t0.Add(time.Minute)), NotificationRecorded)
	st = apply(t, st, hostNote(2, t0.Add(2*time.Minute)), NotificationRecorded)
	st = st.Force(2, time.Time{}, t0.Add(time.Hour))
	require.Equal(t, ReadStragglers, readSpare(st, 0, drained, leftA, t0.Add(time.Hour)))
	mark := st.CurrentMark(0, SpareMark{LastVisit: t0.Add(time.Minute), DrainedAt: t0.Add(time.Hour)})
	require.Equal(t, ReadReturned, st.ReadSpare(0, mark, SpareMark{}, t0.Add(time.Hour), grace), "seen empty since that visit")
}

// A → B → C, and C's notification arrives first while B's is still on its way: B is
// outside the route and holds what the producer published before it moved to C, whose
// place in the order nothing tells yet. The hop A → C waits for it (the reads go on);
// B's late notification then puts B on the route before C.
func TestALateNotificationAboutAHopTheProducerLeftHoldsTheCommit(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Minute)
	st := apply(t, State{}, hostNote(2, t2), NotificationRecorded)
	hold, mark := st.CommitHold(1, SpareMark{}, SpareMark{}, t0, grace)
	require.True(t, hold, "B holds messages of unknown place: the hop to C waits")
	require.Equal(t, t0, mark.HeldSince, "dated when first seen holding")
	hold, _ = st.CommitHold(1, mark, SpareMark{}, t0.Add(grace-time.Second), grace)
	require.True(t, hold, "still within the grace")
	hold, _ = st.CommitHold(1, mark, SpareMark{}, t0.Add(grace), grace)
	require.False(t, hold, "the grace bounds the wait")

	late := apply(t, st, hostNote(1, t1), NotificationRecorded)
	require.Equal(t, []int{1, 2}, hopIndexes(routeOrNil(late)), "A → B → C")

	// Stragglers on a broker the producer left before A have a place: behind A.
	left := apply(t, State{ActiveIndex: 3}, hostNote(0, t1), NotificationRecorded)
	left, ok := left.CompleteHop(3, left.Pending.Next(), 1, t0)
	require.True(t, ok)
	left = apply(t, left, hostNote(2, t2), NotificationRecorded)
	hold, _ = left.CommitHold(3, SpareMark{}, SpareMark{Reached: true}, t0, grace)
	require.False(t, hold, "D's leftovers are older than A's backlog")
	// Unless D was seen empty after the producer left it: what it holds now is new.
	hold, _ = left.CommitHold(3, SpareMark{DrainedAt: t2.Add(time.Hour)}, SpareMark{Reached: true}, t2.Add(time.Hour), grace)
	require.True(t, hold)

	// Once committed past it (the grace ran out), a late word lands behind C: B's events
	// are stragglers, read before C's next ones.
	st, ok = st.CompleteHop(0, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	behindC := apply(t, st, hostNote(1, t1), NotificationStale)
	require.Equal(t, ReadStragglers, readSpare(behindC, 1, SpareMark{}, SpareMark{}, t0), "B lies behind C")
	again := apply(t, behindC, hostNote(1, t1), NotificationStale)
	require.Equal(t, behindC, again, "the same notification again changes nothing")
}

// With from, the trail is a chain: C's notification from B, with A's stay the last one
// known, shows the gap at once, and B goes on the route before C without a wait.
func TestANotificationFromABrokerNotOnTheTrailPutsItOnTheRoute(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Minute)
	st := apply(t, State{}, fromNote(2, t2, 1), NotificationRecorded)
	require.Equal(t, []int{1, 2}, hopIndexes(routeOrNil(st)), "A → B → C")
	hold, _ := st.CommitHold(1, SpareMark{}, SpareMark{}, t0, grace)
	require.False(t, hold, "B is on the route, not outside it")

	// B's own word, late, takes the place of the one the chain implied.
	late := apply(t, st, fromNote(1, t1, 0), NotificationRecorded)
	require.Equal(t, []int{1, 2}, hopIndexes(routeOrNil(late)))
	require.Equal(t, t1, late.Pending.Next().SwitchedAt)
	require.Len(t, late.Trail.Visits, 2, "no second visit to B")
	again := apply(t, late, fromNote(1, t1, 0), NotificationStale)
	require.Equal(t, late, again)

	// A chain with no gap adds nothing.
	plain := apply(t, State{}, fromNote(1, t1, 0), NotificationRecorded)
	plain = apply(t, plain, fromNote(2, t2, 1), NotificationRecorded)
	require.Len(t, plain.Trail.Visits, 2)
}

// The mirror: A → B → U, B's notification late and U never announced. A window saw U
// holding messages before B's word was recorded; that does not make U's events older
// than B's: the producer may have sent B's word long before we got it.
func TestAnUnannouncedBrokerSeenBeforeALateWordIsNotTakenForThePast(t *testing.T) {
	held := SpareMark{HeldSince: t0.Add(-time.Minute)}
	st := apply(t, State{}, hostNote(1, t0), NotificationRecorded)
	hold, _ := st.CommitHold(2, held, SpareMark{}, t0, grace)
	require.True(t, hold, "the hop to B waits for U's place")
	st, ok := st.CompleteHop(0, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	require.Equal(t, ReadReturned, readSpare(st, 2, held, SpareMark{}, t0), "U's events wait behind B's backlog")
	require.Equal(t, ReadUnannounced, readSpare(st, 2, held, SpareMark{}, t0.Add(grace)), "until the grace is over")

	// With from, B's word says where the producer came from: A → U → B puts U on the
	// route before B.
	viaU := apply(t, State{}, fromNote(1, t0, 2), NotificationRecorded)
	require.Equal(t, []int{2, 1}, hopIndexes(routeOrNil(viaU)))
}

// A force takes us off the producer's current broker, not the producer: a drain that saw
// it empty while the producer was still there says nothing of what it publishes next.
// What comes since is its present, read in full; only a broker seen empty after the
// producer left it holds its future (scenario 15, with the force before the first window).
func TestAForceDoesNotMakeTheProducersCurrentBrokerItsFuture(t *testing.T) {
	// No notification yet, the producer on A; the operator forces C, and a window sees A
	// empty before the producer publishes there again.
	st := State{}.Force(2, time.Time{}, t0)
	drained := SpareMark{DrainedAt: t0.Add(time.Second)}
	require.Equal(t, ReadStragglers, readSpare(st, 0, drained, SpareMark{}, t0.Add(time.Minute)), "the producer is still on A")

	// Then it tells us it went to B: what A holds was published before that.
	st = apply(t, st, hostNote(1, t0.Add(time.Minute)), NotificationRecorded)
	require.Equal(t, ReadStragglers, readSpare(st, 0, drained, SpareMark{}, t0.Add(time.Minute)), "A left for B after it was seen empty")
	since := SpareMark{DrainedAt: t0.Add(2 * time.Minute)}
	require.Equal(t, ReadReturned, readSpare(st, 0, since, SpareMark{}, t0.Add(2*time.Minute)), "seen empty after the producer left: a return it did not announce")

	// B became active, and the operator forced C again: B is the producer's newest visit.
	st, ok := st.CompleteHop(2, st.Pending.Next(), 1, t0.Add(2*time.Minute))
	require.True(t, ok)
	st = st.Force(2, time.Time{}, t0.Add(3*time.Minute))
	behind, ahead := st.Spares([]int{0, 1, 2})
	require.Equal(t, []int{0, 1}, behind, "A, then B, the producer's current broker last")
	require.Empty(t, ahead)
	drainedB := st.CurrentMark(1, SpareMark{LastVisit: t0.Add(time.Minute), DrainedAt: t0.Add(4 * time.Minute)})
	left := SpareMark{LastVisit: t0.Add(time.Minute), Reached: true}
	require.Equal(t, ReadStragglers, st.ReadSpare(1, drainedB, left, t0.Add(time.Hour), grace), "the producer is on B: its present")
	require.Equal(t, ReadReturned, st.ReadSpare(0, st.CurrentMark(0, since), SpareMark{}, t0.Add(time.Hour), grace), "A stays held")

	// A cancel leaves the producer's broker ahead of the active one: read in full, later.
	st = apply(t, st, hostNote(0, t0.Add(5*time.Minute)), NotificationRecorded)
	st = st.CancelPending(time.Time{}, t0.Add(6*time.Minute))
	behind, ahead = st.Spares([]int{0, 1, 2})
	require.Equal(t, []int{1}, behind)
	require.Equal(t, []int{0}, ahead, "the canceled hop's broker waits for the active one")
}

// Whether the producer had left a broker when it was seen empty compares the visit's
// recording with the drain, both on Postgres' clock, never the producer's switchedAt:
// with the producer's clock an hour behind, a broker seen empty before the producer
// moved on (as its recording tells) holds what it published there before the move.
func TestLeavingIsReadOnOneClock(t *testing.T) {
	st := State{}.Force(2, time.Time{}, t0) // the producer on A; we read C
	// It moves to B at t0+30m; its clock says t0-30m; we record the word at t0+30m.
	st = apply(t, st, hostNote(1, t0.Add(-30*time.Minute)), NotificationRecorded)
	st.Trail.Visits[len(st.Trail.Visits)-1].SeenAt = t0.Add(30 * time.Minute)
	seenEmpty := SpareMark{DrainedAt: t0}
	require.Equal(t, ReadStragglers, readSpare(st, 0, seenEmpty, SpareMark{}, t0.Add(time.Hour)),
		"seen empty before the producer's word for B was recorded: what came since is its present")
	require.False(t, st.EmptyMarkSettled(0, st.CurrentMark(0, seenEmpty)), "the next empty drain dates it again")
	after := SpareMark{DrainedAt: t0.Add(31 * time.Minute)}
	require.Equal(t, ReadReturned, readSpare(st, 0, after, SpareMark{}, t0.Add(time.Hour)))
	require.True(t, st.EmptyMarkSettled(0, st.CurrentMark(0, after)))

}
