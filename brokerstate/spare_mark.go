package brokerstate

import "time"

// SpareMark is what the Leftover Drain learned of one queue on one broker that is not
// active, under the producer's last visit there.
type SpareMark struct {
	// LastVisit is the switchedAt of the producer's last visit to the broker when the
	// mark was made; zero when the trail had none.
	LastVisit time.Time
	// Reached is true when the broker was active under that visit (kept for every queue
	// at once): what it holds after we left it is a straggler.
	Reached bool
	// DrainedAt is when the queue was last seen empty, on Postgres' clock: if the producer
	// had left the broker by then, anything that arrives after it, but what comes back
	// from -retry or -error, may be the producer's future. It is cleared when we leave
	// the broker after we were active there (Store.Update).
	DrainedAt time.Time
	// HeldSince is when the queue was first seen holding messages the producer never
	// announced, left for its notification, on Postgres' clock.
	HeldSince time.Time
}

// SpareReading is how the Leftover Drain reads one queue on one spare.
type SpareReading int

const (
	// ReadStragglers takes everything: the producer left the broker (or we did) before
	// it moved to the active broker, and the queue was not seen empty since the producer
	// left it (or it is still there: the broker of its newest visit, which a force or a
	// cancel took us off), so all of it is older than what the producer publishes next.
	ReadStragglers SpareReading = iota
	// ReadReturned takes only what came back from -retry or from -error: the broker may
	// be the producer's future (the trail never reached it, or it refilled after it was
	// seen empty once the producer had left it). The rest waits for the notification
	// that puts it on the route.
	ReadReturned
	// ReadUnannounced takes everything once the active broker's queue is empty, as a
	// canceled route's brokers are read: the broker has held messages the producer never
	// announced for longer than the grace.
	ReadUnannounced
)

// lastVisitAt is the switchedAt of the producer's last visit to index on the trail.
func (s State) lastVisitAt(index int) (time.Time, bool) {
	t := s.Trail
	if p := lastVisit(t, index); p >= 0 {
		return t.Visits[p].SwitchedAt, true
	}
	return time.Time{}, false
}

// leftBefore tells whether, as the trail tells, the producer had left broker index by
// at (Postgres' clock): the visit after its last one there (the trail's first visit, for
// a broker it used before its first notification) was recorded at or before at. A broker
// whose visit is the newest on the trail is the producer's current broker: it has not
// left it. A notification is recorded after the producer moved, so a broker seen empty
// between its move and our recording of it reads as not left yet: what comes there next
// is taken for its present, until an empty drain after the recording says otherwise.
func (s State) leftBefore(index int, at time.Time) bool {
	t := s.Trail
	next := lastVisit(t, index) + 1
	return next < len(t.Visits) && !seenAt(t.Visits[next]).After(at)
}

// EmptyMarkSettled tells whether mark m of spare index already says that its queue was
// seen empty after the producer left the broker, so that an empty drain that takes
// nothing need not date it again: a later time reads the same. Otherwise the mark is
// written at every empty drain, so that once the producer leaves, "seen empty" moves past
// its departure, and a return it has not announced yet is read as the future it is.
func (s State) EmptyMarkSettled(index int, m SpareMark) bool {
	return !m.DrainedAt.IsZero() && m.HeldSince.IsZero() && s.leftBefore(index, m.DrainedAt)
}

// CurrentMark is the mark m, or nothing when it was made under an earlier visit of the
// producer to broker index: what was seen then says nothing about what is there now.
func (s State) CurrentMark(index int, m SpareMark) SpareMark {
	at, _ := s.lastVisitAt(index)
	at = at.Truncate(time.Microsecond) // as Postgres keeps it
	if !m.LastVisit.Equal(at) {
		return SpareMark{LastVisit: at}
	}
	return m
}

// ReadSpare decides how the Leftover Drain reads a queue on spare index, from its mark
// (queue) and whether we were active there (reached), both as CurrentMark gives them;
// now is on Postgres' clock, as the marks are.
func (s State) ReadSpare(index int, queue, reached SpareMark, now time.Time, grace time.Duration) SpareReading {
	_, visited := s.lastVisitAt(index)
	left := visited || reached.Reached || (s.LastSwitch != nil && s.LastSwitch.From == index)
	activeAt, activeVisited := time.Time{}, false
	if p := lastVisit(s.Trail, s.ActiveIndex); p >= 0 {
		activeAt, activeVisited = seenAt(s.Trail.Visits[p]), true
	}
	switch {
	case left && queue.DrainedAt.IsZero():
		return ReadStragglers
	case left && !s.leftBefore(index, queue.DrainedAt):
		// Seen empty while the producer was still there (its newest visit, or one it
		// left only later): what came since is its present, older than anything it
		// publishes after its next word. A force or a cancel took us off that broker,
		// not the producer, which goes on publishing there.
		return ReadStragglers
	case activeVisited && !queue.HeldSince.IsZero() && queue.HeldSince.Before(activeAt):
		// Seen waiting before the producer's word for the active broker was recorded: it
		// never announced this one, and left it for the active broker (unless it moved
		// twice within that word's delay, which no clock can tell).
		return ReadStragglers
	case !queue.HeldSince.IsZero() && now.Sub(queue.HeldSince) >= grace:
		return ReadUnannounced
	}
	return ReadReturned
}
