package windowplan

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
)

const a, b, c, d = 0, 1, 2, 3

const grace = time.Hour

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// notified is st after the producer's notification that it moved to broker index at.
func notified(t *testing.T, st brokerstate.State, index int, at time.Time) brokerstate.State {
	t.Helper()
	next, _ := st.ApplyNotification(brokerstate.Notification{
		Index: index, Host: fmt.Sprintf("b%d.example", index), Vhost: "/", SwitchedAt: at,
	}, at)
	return next
}

// followed is st after the producer moved to broker index at, and the hop committed.
func followed(t *testing.T, st brokerstate.State, index int, at time.Time) brokerstate.State {
	t.Helper()
	st = notified(t, st, index, at)
	next, ok := st.CompleteHop(st.ActiveIndex, st.Pending.Next(), 1, at)
	require.True(t, ok)
	return next
}

// read is a spare as a test expects it read: its index and how.
type read struct {
	index   int
	reading brokerstate.SpareReading
}

func reads(spares []Spare) []read {
	var out []read
	for _, s := range spares {
		out = append(out, read{s.Index, s.Reading})
	}
	return out
}

// The Leftover Drain's plan for every place a spare can have in the producer's order.
func TestTheDrainReadsTheSparesInTheProducersOrder(t *testing.T) {
	// A → B → C, followed: A (where we started) and B are behind C; D was never used.
	moved := followed(t, followed(t, brokerstate.State{}, b, t0), c, t0.Add(time.Minute))
	left := map[int]brokerstate.SpareMark{a: {Reached: true}, b: {Reached: true}} // written by the commits that left them
	now := t0.Add(2 * time.Minute)
	// A → B notified and not followed yet; C was never used.
	pending := notified(t, brokerstate.State{}, b, t0)
	// A → B notified, then canceled: B is ahead of A, read after A's backlog.
	canceled := notified(t, brokerstate.State{}, b, t0).CancelPending(time.Time{}, t0)
	// On B, forced back to A: B is the producer's current broker.
	forced := followed(t, brokerstate.State{}, b, t0).Force(a, time.Time{}, t0)

	for _, tc := range []struct {
		name       string
		st         brokerstate.State
		brokers    []int
		marks      map[int]brokerstate.SpareMark
		reached    map[int]brokerstate.SpareMark
		now        time.Time
		activeIdle bool
		read       []read
		held       []int
		waiting    []UnannouncedSpare
	}{{
		name: "those never used first, by index, then by when the producer left them",
		st:   moved, brokers: []int{a, b, c, d}, reached: left, now: now,
		read: []read{{a, brokerstate.ReadStragglers}, {d, brokerstate.ReadReturned}, {b, brokerstate.ReadStragglers}},
	}, {
		name: "a broker on the route is never read early",
		st:   pending, brokers: []int{a, b, c}, now: now, activeIdle: true,
		read: []read{{c, brokerstate.ReadReturned}},
	}, {
		name: "a spare refilled after it was seen empty once the producer left may be its future",
		st:   moved, brokers: []int{b}, marks: map[int]brokerstate.SpareMark{b: {LastVisit: t0, DrainedAt: t0.Add(time.Minute)}}, now: now,
		read: []read{{b, brokerstate.ReadReturned}},
	}, {
		name: "a spare seen empty before the producer left it holds its stragglers",
		st:   moved, brokers: []int{b}, marks: map[int]brokerstate.SpareMark{b: {LastVisit: t0, DrainedAt: t0.Add(time.Second)}}, now: now,
		read: []read{{b, brokerstate.ReadStragglers}},
	}, {
		name: "the producer's current broker, which a force took us off, is read in full however often seen empty",
		st:   forced, brokers: []int{a, b}, marks: map[int]brokerstate.SpareMark{b: {LastVisit: t0, DrainedAt: now}}, now: now,
		read: []read{{b, brokerstate.ReadStragglers}},
	}, {
		name: "a canceled route's broker waits for the active broker's backlog",
		st:   canceled, brokers: []int{a, b}, now: now,
		held: []int{b},
	}, {
		name: "a canceled route's broker is read once the active broker is idle",
		st:   canceled, brokers: []int{a, b}, now: now, activeIdle: true,
		read: []read{{b, brokerstate.ReadStragglers}},
	}, {
		name: "unannounced messages wait for the notification during the grace",
		st:   moved, brokers: []int{d}, marks: map[int]brokerstate.SpareMark{d: {HeldSince: now.Add(-grace + time.Second)}}, now: now, activeIdle: true,
		read: []read{{d, brokerstate.ReadReturned}},
	}, {
		name: "after the grace, unannounced messages wait for the active broker's backlog",
		st:   moved, brokers: []int{a, d}, marks: map[int]brokerstate.SpareMark{d: {HeldSince: now.Add(-grace)}}, reached: left, now: now,
		read: []read{{a, brokerstate.ReadStragglers}}, held: []int{d},
		waiting: []UnannouncedSpare{{Broker: d, Since: now.Add(-grace), ReadAfter: now}},
	}, {
		name: "after the grace, unannounced messages are read last once the active broker is idle",
		st:   moved, brokers: []int{a, b, d}, marks: map[int]brokerstate.SpareMark{d: {HeldSince: now.Add(-grace)}}, reached: left, now: now, activeIdle: true,
		read: []read{{a, brokerstate.ReadStragglers}, {b, brokerstate.ReadStragglers}, {d, brokerstate.ReadUnannounced}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			behind, ahead := tc.st.Spares(tc.brokers)
			plan := Plan(Input{State: tc.st, Behind: behind, Ahead: ahead, Marks: tc.marks, Reached: tc.reached, Now: tc.now, Grace: grace})
			spares, res := plan.Order(tc.activeIdle)
			require.Equal(t, tc.read, reads(spares))
			require.Equal(t, tc.held, res.Held)
			require.Equal(t, tc.waiting, res.Unannounced)
			require.Empty(t, res.Taken)
		})
	}
}

// Whether a broker is still a spare when the drain comes to it.
func TestABrokerThatCameOntoTheRouteIsNoLongerASpare(t *testing.T) {
	st := notified(t, brokerstate.State{}, b, t0)
	require.False(t, StillSpare(st, a), "active")
	require.False(t, StillSpare(st, b), "on the route: the producer is filling it")
	require.True(t, StillSpare(st, c))
}

// A spare read only for what came back keeps the rest at its queue's head.
func TestASpareThatMayBeTheFutureIsReadForWhatCameBackOnly(t *testing.T) {
	opts := broker.DrainOptions{Max: 7, Batch: 3}
	require.Nil(t, Spare{Reading: brokerstate.ReadStragglers}.Options("issues", opts).Keep)
	returned := Spare{Reading: brokerstate.ReadReturned}.Options("issues", opts)
	require.Equal(t, 7, returned.Max)
	require.NotNil(t, returned.Keep)
}

// What a drain does after a spare, from what it saw and what the cap leaves.
func TestWhatADrainDoesAfterASpare(t *testing.T) {
	settled := Spare{Index: b, settled: true}
	for _, tc := range []struct {
		name   string
		s      Spare
		got    broker.DrainResult
		budget int
		want   Step
	}{
		{"seen empty as the mark says: nothing to write", settled, broker.DrainResult{Empty: true}, 5, Next},
		{"seen empty after it gave messages", settled, broker.DrainResult{Empty: true, Taken: 2}, 3, Emptied},
		{"seen empty, the mark not settled", Spare{Index: b}, broker.DrainResult{Empty: true}, 5, Emptied},
		{"kept what may be the producer's future", Spare{Index: b}, broker.DrainResult{Kept: true, Taken: 1}, 4, Kept},
		{"not seen empty below the cap: the window ends", Spare{Index: b}, broker.DrainResult{Taken: 2}, 3, Incomplete},
		{"not seen empty at the cap: the next window drains on", Spare{Index: b}, broker.DrainResult{Taken: 5}, 0, Next},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.s.After(tc.got, tc.budget))
		})
	}
}

// The marks a drain writes: seen empty drops a held date; held keeps the first date.
func TestTheMarksADrainWrites(t *testing.T) {
	s := Spare{Mark: brokerstate.SpareMark{LastVisit: t0, HeldSince: t0}}
	require.Equal(t, brokerstate.SpareMark{LastVisit: t0, DrainedAt: t0.Add(time.Hour)}, s.EmptiedMark(t0.Add(time.Hour)))
	require.Equal(t, t0, s.HeldMark(t0.Add(time.Hour)).HeldSince, "first seen holding stays")
	require.Equal(t, t0.Add(time.Hour), Spare{}.HeldMark(t0.Add(time.Hour)).HeldSince)
}

// What a failed drain of a spare means for the window.
func TestWhatAFailedDrainMeans(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		cancelled bool
		want      Failure
	}{
		{"the broker became active or came onto the route", fmt.Errorf("batch: %w", brokerstate.ErrNotSpare), false, NotSpare},
		{"a broker down is a warning", fmt.Errorf("dial: %w", broker.ErrUnreachable), false, Unreachable},
		{"a broker down as the attempt ends", fmt.Errorf("dial: %w", broker.ErrUnreachable), true, Unreachable},
		{"a broker that answers but refuses", errors.New("ACCESS_REFUSED"), false, Unverified},
		{"another consumer holds the queue", fmt.Errorf("drain: %w", broker.ErrQueueBusy), false, Unverified},
		{"Postgres failed to apply", fmt.Errorf("apply: %w", broker.ErrHandler), false, Fatal},
		{"the attempt ended", errors.New("context canceled"), true, Fatal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Failed(tc.err, tc.cancelled))
		})
	}
}

// A drain that stopped at its cap, or did not see a spare empty, ends the window before
// the active broker.
func TestWhatEndsAWindowBeforeItConsumes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		res   LeftoverDrainResult
		limit int
		want  string
	}{
		{"under the cap", LeftoverDrainResult{Taken: map[int]int{a: 3, b: 4}}, 10, ""},
		{"at the cap, over spares", LeftoverDrainResult{Taken: map[int]int{a: 6, b: 4}}, 10, "stopped at its cap of 10"},
		{"no cap", LeftoverDrainResult{Taken: map[int]int{a: 600}}, 0, ""},
		{"a spare not seen empty", LeftoverDrainResult{Taken: map[int]int{b: 1}, Incomplete: []int{b}}, 10, "did not see broker [1] empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.res.Unfinished(tc.limit))
		})
	}
}

// The spares a window watches after its drain: behind unless it holds unannounced
// messages, which wait as the spares ahead do.
func TestTheSparesAWindowWatches(t *testing.T) {
	res := LeftoverDrainResult{Unannounced: []UnannouncedSpare{
		{Broker: b, Since: t0, ReadAfter: t0.Add(grace)},
		{Broker: d, Since: t0, ReadAfter: t0.Add(grace), Read: true},
	}}
	require.Equal(t, []SpareWatch{
		{Broker: a, Behind: true}, {Broker: b, ReadAfter: t0.Add(grace)}, {Broker: d, Behind: true}, {Broker: c},
	}, Watches([]int{a, b, d}, []int{c}, res))
}

// Which spare ends a consuming window, from what it counted and how long it lasted.
func TestWhichSpareEndsAConsumingWindow(t *testing.T) {
	behind := SpareWatch{Broker: a, Behind: true}
	ahead := SpareWatch{Broker: c}
	waiting := SpareWatch{Broker: d, ReadAfter: t0.Add(time.Hour)}
	late := aheadPause
	for _, tc := range []struct {
		name   string
		spares []SpareWatch
		look   Look
		want   int
		calls  bool
	}{
		{"a straggler behind ends it at once", []SpareWatch{ahead, behind}, Look{Ready: map[int]int{a: 1, c: 1}, ActiveBacklog: 5}, a, true},
		{"a spare behind that could not be counted is passed over", []SpareWatch{behind}, Look{Ready: map[int]int{}}, 0, false},
		{"a spare ahead waits for the pause", []SpareWatch{ahead}, Look{Ready: map[int]int{c: 1}, Lasted: late - time.Second}, 0, false},
		{"a spare ahead waits for the active backlog", []SpareWatch{ahead}, Look{Ready: map[int]int{c: 1}, ActiveBacklog: 1, Lasted: late}, 0, false},
		{"a spare ahead waits while the active backlog is unknown", []SpareWatch{ahead}, Look{Ready: map[int]int{c: 1}, ActiveBacklog: -1, Lasted: late}, 0, false},
		{"an empty spare ahead does not end it", []SpareWatch{ahead}, Look{Ready: map[int]int{c: 0}, Lasted: late}, 0, false},
		{"a spare ahead ends it once the active broker is empty", []SpareWatch{ahead}, Look{Ready: map[int]int{c: 2}, Lasted: late}, c, true},
		{"held messages wait for their grace", []SpareWatch{waiting}, Look{Ready: map[int]int{}, Lasted: late, Now: t0}, 0, false},
		{"held messages end it after their grace", []SpareWatch{waiting}, Look{Ready: map[int]int{}, Lasted: late, Now: t0.Add(time.Hour)}, d, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Calling(tc.spares, tc.look)
			require.Equal(t, tc.calls, ok)
			require.Equal(t, tc.want, got)
		})
	}
}
