package windowplan

import "time"

// SpareWatch is a spare that a consumer window counts (a passive declare: no message, no
// Action) so that it can end when the spare has something for a Leftover Drain, rather
// than leave it there until the window's length has passed.
type SpareWatch struct {
	Broker int
	// Behind says the Leftover Drain left the spare's queue with nothing to read (empty,
	// unreachable, or holding nothing ready): a message there now is a straggler (one back
	// from -retry after the producer moved on), older than the active broker's backlog.
	Behind bool `json:",omitempty"`
	// ReadAfter, on a spare that is not Behind, is when the messages it holds that the
	// producer never announced may be read without its notification. A spare that is not
	// Behind is read only once the active broker's queue is empty.
	ReadAfter time.Time `json:",omitempty"`
}

// Watches lists the spares a consumer window watches after its Leftover Drain of the
// spares behind and ahead of the active broker: those behind that the drain left with
// nothing to read, and those it holds back (ahead, or holding messages the producer never
// announced).
func Watches(behind, ahead []int, res LeftoverDrainResult) []SpareWatch {
	held := map[int]time.Time{}
	for _, u := range res.Unannounced {
		if !u.Read {
			held[u.Broker] = u.ReadAfter
		}
	}
	var out []SpareWatch
	for _, idx := range behind {
		readAfter, ok := held[idx]
		out = append(out, SpareWatch{Broker: idx, Behind: !ok, ReadAfter: readAfter})
	}
	for _, idx := range ahead {
		out = append(out, SpareWatch{Broker: idx, ReadAfter: held[idx]})
	}
	return out
}

// aheadPause is the shortest a window lasts before it ends for a spare ahead of the
// active broker: the producer may be filling such a spare (after a force or a cancel),
// and ending on its every message would cost a window's Actions each time. Five minutes
// holds that cost to 3 Actions per queue every five minutes while the producer fills the
// spare, and still reads its messages minutes after the active broker's backlog.
const aheadPause = 5 * time.Minute

// Look is what a consumer window counted of the spares it watches, and when.
type Look struct {
	// Ready are the spares' ready counts of the queue; a spare that could not be counted
	// is absent, and passed over: the next window's drain says why.
	Ready map[int]int
	// ActiveBacklog is the active broker's ready count of the queue and its -retry
	// sibling, or -1 when it could not be counted.
	ActiveBacklog int
	// Lasted is how long the window has consumed; Now is the worker's clock.
	Lasted time.Duration
	Now    time.Time
}

// Calling tells which of spares, if any, has something for a Leftover Drain now: a
// message on one the drain left behind with nothing to read, or, once the window lasted
// aheadPause and the active broker's backlog is empty, a message on a spare ahead of it,
// or held messages whose wait for a notification is over.
func Calling(spares []SpareWatch, l Look) (int, bool) {
	var ahead []SpareWatch
	for _, s := range spares {
		switch {
		case s.Behind && l.Ready[s.Broker] > 0:
			return s.Broker, true
		case !s.Behind && l.Lasted >= aheadPause && !l.Now.Before(s.ReadAfter):
			ahead = append(ahead, s)
		}
	}
	if l.ActiveBacklog != 0 {
		return 0, false
	}
	for _, s := range ahead {
		if !s.ReadAfter.IsZero() || l.Ready[s.Broker] > 0 {
			return s.Broker, true
		}
	}
	return 0, false
}
