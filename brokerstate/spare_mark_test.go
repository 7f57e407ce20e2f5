package brokerstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const grace = time.Hour

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

// An out-of-order notification older than the active broker's own time is stale, and still says
// where the producer was: C's events on the broker it names are stragglers.
func TestALateNotificationBehindTheActiveBrokerMakesItsBrokerAStraggler(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Minute)
	// A → B → C, and only C's notification arrived: A drains, the hop goes to C.
	st := apply(t, State{}, hostNote(2, t2), NotificationRecorded)
	st, ok := st.CompleteHop(0, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	require.Equal(t, ReadReturned, readSpare(st, 1, SpareMark{}, SpareMark{}, t0), "B is unannounced")

	outOfOrder := apply(t, st, hostNote(1, t1), NotificationStale)
	require.Equal(t, st.ActiveIndex, outOfOrder.ActiveIndex)
	require.Nil(t, outOfOrder.Pending)
	require.Equal(t, ReadStragglers, readSpare(outOfOrder, 1, SpareMark{}, SpareMark{}, t0), "B lies behind C")
	behind, _ := outOfOrder.Spares([]int{0, 1, 2})
	require.Equal(t, []int{0, 1}, behind, "A, then B, as the producer left them")
	again := apply(t, outOfOrder, hostNote(1, t1), NotificationStale)
	require.Equal(t, outOfOrder, again, "the same notification again changes nothing")
}

// The producer went A → X without a word, then X → Y with one: what a window saw waiting
// on X before the producer moved to Y is older than Y's events, so once Y is active it is
// read first; what no window saw before waits for the grace.
func TestAnUnannouncedBrokerLeftForAnAnnouncedOne(t *testing.T) {
	held := SpareMark{HeldSince: t0.Add(-time.Minute)}
	st := apply(t, State{}, hostNote(2, t0), NotificationRecorded)
	require.Equal(t, ReadReturned, readSpare(st, 1, held, SpareMark{}, t0), "A is still active: X waits behind it")
	st, ok := st.CompleteHop(0, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	require.Equal(t, ReadStragglers, readSpare(st, 1, held, SpareMark{}, t0), "seen before the producer went to Y")
	require.Equal(t, ReadReturned, readSpare(st, 1, SpareMark{HeldSince: t0.Add(time.Second)}, SpareMark{}, t0.Add(time.Second)))
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

	// And the other way: the producer's clock an hour ahead. Held messages seen on X
	// before the word for the active broker was recorded are older than its events.
	st = State{}
	st = apply(t, st, hostNote(2, t0.Add(time.Hour)), NotificationRecorded)
	st.Trail.Visits[0].SeenAt = t0
	st, ok := st.CompleteHop(0, st.Pending.Next(), 1, t0)
	require.True(t, ok)
	require.Equal(t, ReadStragglers, readSpare(st, 1, SpareMark{HeldSince: t0.Add(-time.Minute)}, SpareMark{}, t0))
	require.Equal(t, ReadReturned, readSpare(st, 1, SpareMark{HeldSince: t0.Add(time.Minute)}, SpareMark{}, t0.Add(time.Minute)),
		"seen after the word was recorded: it may be the producer's future")
}
