// Package windowplan decides what a queue's consumer window does, from what its
// activities read (the broker state, the spares' marks, the queues' counts, the time):
// which spares its Leftover Drain reads, how and in what order, what it writes of each,
// what ends the window before it consumes the active broker, and which spare ends it
// while it consumes. It does no I/O: package activities reads, asks it, and does what
// it says.
package windowplan

import (
	"errors"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
)

// Input is what a Leftover Drain reads before it visits the spares: the state, the
// spares as the window was planned (brokerstate.State.Spares), the queue's marks and the
// brokers' reached marks (brokerstate.Store.SpareMarks), Postgres' clock (the marks' and
// the trail's) and UNNOTIFIED_BROKER_GRACE.
type Input struct {
	State          brokerstate.State
	Behind, Ahead  []int
	Marks, Reached map[int]brokerstate.SpareMark
	Now            time.Time
	Grace          time.Duration
}

// Spare is one spare as a Leftover Drain reads it.
type Spare struct {
	Index   int
	Reading brokerstate.SpareReading
	// Mark is the queue's mark under the producer's last visit (State.CurrentMark), and
	// MarkedUnder the visit the stored one was made under (Store.HoldSpare's read).
	Mark        brokerstate.SpareMark
	MarkedUnder time.Time
	// settled: Mark says the queue was seen empty after the producer left it
	// (State.EmptyMarkSettled).
	settled bool
}

// Drain is a Leftover Drain's plan.
type Drain struct {
	// Behind are read first, in the order the producer left them: older than anything on
	// the active broker. Ahead, newer than its backlog, are read after them once it is
	// idle: the spares the producer used after it left the active broker, then those whose
	// unannounced messages' grace is over.
	Behind, Ahead []Spare
	grace         time.Duration
}

// Plan decides how the Leftover Drain reads each spare (brokerstate.State.ReadSpare).
func Plan(in Input) Drain {
	d := Drain{grace: in.Grace}
	var unannounced []Spare
	for _, idx := range in.Behind {
		st := in.State
		s := Spare{Index: idx, Mark: st.CurrentMark(idx, in.Marks[idx]), MarkedUnder: in.Marks[idx].LastVisit}
		s.Reading = st.ReadSpare(idx, s.Mark, st.CurrentMark(idx, in.Reached[idx]), in.Now, in.Grace)
		s.settled = st.EmptyMarkSettled(idx, s.Mark)
		if s.Reading == brokerstate.ReadUnannounced {
			unannounced = append(unannounced, s)
		} else {
			d.Behind = append(d.Behind, s)
		}
	}
	for _, idx := range in.Ahead {
		d.Ahead = append(d.Ahead, Spare{Index: idx})
	}
	d.Ahead = append(d.Ahead, unannounced...)
	return d
}

// Order is what the drain reads, in order, and the result it starts from: the spares
// ahead are read only when activeIdle, the active broker's queue and its -retry sibling
// seen empty with no consumer (whose unsettled deliveries would come back to its head);
// otherwise they are held for a later window.
func (d Drain) Order(activeIdle bool) ([]Spare, LeftoverDrainResult) {
	res := LeftoverDrainResult{Taken: map[int]int{}}
	if activeIdle {
		return append(slices.Clip(d.Behind), d.Ahead...), res
	}
	for _, s := range d.Ahead {
		res.Held = append(res.Held, s.Index)
		if s.Reading == brokerstate.ReadUnannounced {
			res.Unannounced = append(res.Unannounced, Unannounced(s.Index, s.Mark.HeldSince, d.grace))
		}
	}
	return d.Behind, res
}

// Options are opts as s is read: with a ReadReturned reading, only what came back from
// -retry or -error; the rest may be the producer's future and waits at the queue's head.
func (s Spare) Options(queue string, opts broker.DrainOptions) broker.DrainOptions {
	if s.Reading == brokerstate.ReadReturned {
		opts.Keep = func(d amqp.Delivery) bool { return !broker.Returned(d, queue) }
	}
	return opts
}

// Step is what a Leftover Drain does after it read a spare.
type Step int

const (
	Next    Step = iota // write nothing; on to the next spare, unless the cap is reached
	Emptied             // write EmptiedMark
	Kept                // date HeldMark unless dated (Store.HoldSpare): its notification is awaited
	// Incomplete ends the drain and the window before the active broker: the spare was
	// not seen empty below the cap (a round waited too long for a message), and neither
	// the active broker nor the next spare may overtake what it still holds.
	Incomplete
)

// After decides what a drain that saw got of s does next, with budget messages left
// under the cap.
func (s Spare) After(got broker.DrainResult, budget int) Step {
	switch {
	case got.Empty && got.Taken == 0 && s.settled:
		return Next // as the mark already says
	case got.Empty:
		return Emptied
	case got.Kept:
		return Kept
	case budget > 0:
		return Incomplete
	}
	return Next // at the cap: the window ends, and the next one drains on
}

// EmptiedMark is s's mark once its queue was seen empty at now. It is dated again at
// every empty drain until the producer had left by then: a mark left at a time it was
// still there would read its return as stragglers. A held-since date that a drain check
// wrote since the drain read the mark goes too: the next check dates it again, later,
// and the commit only waits longer.
func (s Spare) EmptiedMark(now time.Time) brokerstate.SpareMark {
	m := s.Mark
	m.DrainedAt, m.HeldSince = now, time.Time{}
	return m
}

// HeldMark is s's mark once the drain kept, at now, messages the producer never
// announced: first seen holding then, unless it was before.
func (s Spare) HeldMark(now time.Time) brokerstate.SpareMark {
	m := s.Mark
	if m.HeldSince.IsZero() {
		m.HeldSince = now
	}
	return m
}

// Failure is what a spare's failed drain means for the window.
type Failure int

const (
	// NotSpare ends the spare's visit: the broker became active, or came onto the route,
	// since the visit began (brokerstate.ErrNotSpare), and what it holds is read as its
	// new place says, by a later window.
	NotSpare    Failure = iota
	Unreachable         // a warning, never a failed window: the next window reads it
	// Unverified is a spare that answers but cannot be read: what it holds may be older
	// than anything behind it, so the window goes past it only once it is seen holding
	// nothing, ready or unacknowledged; otherwise the attempt fails and is retried.
	Unverified
	Fatal // the batch could not be applied, or the attempt ended: it fails
)

// Failed classifies err, a failed drain of a spare; cancelled tells whether the attempt's
// context has ended.
func Failed(err error, cancelled bool) Failure {
	switch {
	case errors.Is(err, brokerstate.ErrNotSpare):
		return NotSpare
	case errors.Is(err, broker.ErrUnreachable):
		return Unreachable
	case !cancelled && !errors.Is(err, broker.ErrHandler):
		return Unverified
	}
	return Fatal
}

// StillSpare tells whether broker index is a spare as st has it: neither active nor on
// the Pending Switch's route. A drain's plan may be older than a notification or a switch
// recorded since: the producer is filling a broker on the route, and one that became
// active is read after the broker it replaced; neither may be read early.
func StillSpare(st brokerstate.State, index int) bool {
	behind, ahead := st.Spares([]int{index})
	return len(behind)+len(ahead) > 0
}
