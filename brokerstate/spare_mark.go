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

// placed tells whether what spare index holds on a queue has a known place in the
// producer's order, from the queue's mark and the broker's reached mark (as CurrentMark
// gives them): the producer (or we) left the broker, and the queue was not seen empty
// since the producer left it, so all of it is older than what it published next. What a
// spare holds otherwise may be the producer's past between two hops (a word still on its
// way) or its future (a move not announced yet): nothing tells which.
func (s State) placed(index int, queue, reached SpareMark) bool {
	_, visited := s.lastVisitAt(index)
	left := visited || reached.Reached || (s.LastSwitch != nil && s.LastSwitch.From == index)
	// Seen empty while the producer was still there (its newest visit, or one it left
	// only later): what came since is its present, older than anything it publishes
	// after its next word. A force or a cancel took us off that broker, not the producer,
	// which goes on publishing there.
	return left && (queue.DrainedAt.IsZero() || !s.leftBefore(index, queue.DrainedAt))
}

// ReadSpare decides how the Leftover Drain reads a queue on spare index, from its mark
// (queue) and whether we were active there (reached), both as CurrentMark gives them;
// now is on Postgres' clock, as the marks are.
//
// A spare seen holding messages before the word for the active broker was recorded is
// not taken for the producer's past: the word may have been late (A → B → U, B's word
// delayed while the producer fills U), and its own time says when the producer sent it,
// not when it left a broker it never named. The commit of that hop waited for it
// (CommitHold); a notification's from places it at once.
func (s State) ReadSpare(index int, queue, reached SpareMark, now time.Time, grace time.Duration) SpareReading {
	switch {
	case s.placed(index, queue, reached):
		return ReadStragglers
	case !queue.HeldSince.IsZero() && now.Sub(queue.HeldSince) >= grace:
		return ReadUnannounced
	}
	return ReadReturned
}

// CommitHold decides, at a drain check of the next hop, whether the messages a queue of
// spare index holds hold the hop's commit: their place in the producer's order is unknown
// (see placed), and the grace for a word that places them is not over. The producer
// publishes to a broker before it moves on and sends the word for the next one, so what
// a hop it made before the next hop left on its broker is there before any drain check
// of that hop: a word on its way for it then puts it on the route before the next one,
// where committing would have read the next broker first. It returns the queue's mark
// dated as first seen holding (now) when it was not, for the Leftover Drains to go on
// with; queue and reached are as CurrentMark gives them, now on Postgres' clock.
func (s State) CommitHold(index int, queue, reached SpareMark, now time.Time, grace time.Duration) (bool, SpareMark) {
	if s.placed(index, queue, reached) {
		return false, queue
	}
	if queue.HeldSince.IsZero() {
		queue.HeldSince = now
	}
	return now.Sub(queue.HeldSince) < grace, queue
}
