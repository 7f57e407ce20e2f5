package brokerstate

import (
	"slices"
	"time"
)

// maxTrail bounds the trail: a rotation happens about once a month per broker, and only
// the last visit of each broker decides an order.
const maxTrail = 64

// Trail is where the producer went and when, as its notifications tell: each visit is a
// hop the producer made, ordered by switchedAt and, at equal times, by arrival. The route
// is read from it, so that an out-of-order notification lands where the producer's clock puts it,
// and the Leftover Drain reads the spares in the order the producer left them.
type Trail struct {
	Visits []Hop `json:"visits"`
	// Behind counts the first visits that lie behind the active broker: what the producer
	// published there is older than the active broker's backlog. An out-of-order notification that
	// would land among them is stale.
	Behind int `json:"behind"`
	// Canceled counts the first visits an operator's cancel took off the route. They stay
	// on the trail: the brokers they name are spares ahead of the active broker.
	Canceled int `json:"canceled"`
}

// place is where v belongs: after every visit at or before its time, but before a visit
// at its time that says the producer came from v's broker.
func (t Trail) place(v Hop) int {
	if p := slices.IndexFunc(t.Visits, func(w Hop) bool {
		return w.SwitchedAt.After(v.SwitchedAt) || w.SwitchedAt.Equal(v.SwitchedAt) && w.cameFrom(v.ref())
	}); p >= 0 {
		return p
	}
	return len(t.Visits)
}

// has tells whether the trail already holds this broker at this time: a duplicate.
func (t Trail) has(v Hop) bool {
	return slices.ContainsFunc(t.Visits, func(w Hop) bool {
		return !w.Implied && w.SwitchedAt.Equal(v.SwitchedAt) && w.ref() == v.ref()
	})
}

// implied is the position of the visit to v's broker that a later visit's from implied
// and that v's own word now confirms (the first at or after v's time), or -1.
func (t Trail) implied(v Hop) int {
	return slices.IndexFunc(t.Visits, func(w Hop) bool {
		return w.Implied && w.ref() == v.ref() && !w.SwitchedAt.Before(v.SwitchedAt)
	})
}

// gap is the visit the trail lacks before v, placed at p: the producer says it came to
// v from broker from, which is not the broker of the visit before (the active broker, on
// a trail that starts with v), so a hop it made in between has not been announced yet.
// ok is false when the chain holds, or v does not say where it came from.
func (t Trail) gap(v Hop, from, p, active int) (Hop, bool) {
	if v.From == (Ref{}) || v.From == v.ref() {
		return Hop{}, false
	}
	before := active
	if p > 0 {
		before = t.Visits[p-1].Index
	}
	if before == from || from < 0 {
		return Hop{}, false
	}
	return Hop{Index: from, Host: v.From.Host, Vhost: v.From.Vhost, SwitchedAt: v.SwitchedAt, Implied: true}, true
}

// insert places v at p, keeping Behind and Canceled on the visits they counted, and drops
// the oldest visits behind the active broker (or canceled) beyond maxTrail.
func (t Trail) insert(p int, v Hop) Trail {
	t.Visits = slices.Insert(slices.Clone(t.Visits), p, v)
	if p < t.Behind {
		t.Behind++
	}
	if p < t.Canceled {
		t.Canceled++
	}
	drop := min(len(t.Visits)-maxTrail, max(t.Behind, t.Canceled))
	if len(t.Visits)-drop > 4*maxTrail {
		// A producer sending ever older notifications must not grow the state without
		// end: the oldest go, even on the route's stretch.
		drop = len(t.Visits) - 4*maxTrail
	}
	if drop > 0 {
		t = t.trim(drop)
	}
	return t
}

// trim drops the first n visits but the last visit of each broker among them: that visit
// says when the producer left the broker, which orders the spares and tells stragglers
// from the producer's future; the earlier ones decide nothing. The broker count bounds
// what is kept beyond n.
func (t Trail) trim(n int) Trail {
	last := map[Ref]int{}
	for p, v := range t.Visits {
		last[v.ref()] = p
	}
	kept := make([]Hop, 0, len(t.Visits)-n)
	behind, canceled := t.Behind, t.Canceled
	for p, v := range t.Visits {
		if p < n && last[v.ref()] != p {
			if p < t.Behind {
				behind--
			}
			if p < t.Canceled {
				canceled--
			}
			continue
		}
		kept = append(kept, v)
	}
	t.Visits, t.Behind, t.Canceled = kept, behind, canceled
	return t
}

// route follows the visits after those behind or canceled, as the producer made them:
// a return to a broker already on the route cuts the route there (what it published
// after that hop is reached through the Leftover Drain), and a return to the active
// broker empties it. It gives the positions of the route's hops.
func (t Trail) route(active int) []int {
	var route []int
	for p := max(t.Behind, t.Canceled); p < len(t.Visits); p++ {
		v := t.Visits[p]
		switch {
		case v.Index < 0: // a broker no longer configured
		case v.Index == active:
			route = nil
		default:
			if i := slices.IndexFunc(route, func(q int) bool { return t.Visits[q].Index == v.Index }); i >= 0 {
				route = route[:i]
			}
			route = append(route, p)
		}
	}
	return route
}

// hops gathers the route's hops from their positions.
func (t Trail) hops(route []int) []Hop {
	out := make([]Hop, 0, len(route))
	for _, p := range route {
		h := t.Visits[p]
		h.SeenAt = time.Time{} // the trail's own: a route is what the API and the workflows see
		out = append(out, h)
	}
	return out
}

// seen stamps with at, the time it was recorded, every visit that is not on the trail
// before: an unstamped visit already stored stays unstamped, read at its switchedAt (seenAt).
func (t Trail) seen(at time.Time, before Trail) Trail {
	visits := slices.Clone(t.Visits)
	for i := range visits {
		if visits[i].SeenAt.IsZero() && !before.has(visits[i]) {
			visits[i].SeenAt = at
		}
	}
	t.Visits = visits
	return t
}

// seenAt is when we learned of visit h, on Postgres' clock; for a visit stored without a
// stamp, the producer's switchedAt, which is the best there is.
func seenAt(h Hop) time.Time {
	if h.SeenAt.IsZero() {
		return h.SwitchedAt
	}
	return h.SeenAt
}

// withRoute sets the trail and reads the Pending Switch from it; recordedAt is the
// Pending Switch's recording time when it still has hops.
func (s State) withRoute(t Trail, recordedAt time.Time) State {
	s.Trail = t
	s.Pending = nil
	if route := t.route(s.ActiveIndex); len(route) > 0 {
		s.Pending = &PendingSwitch{Route: t.hops(route), RecordedAt: recordedAt}
	}
	return s
}

// Spares orders the brokers that are neither active nor on the route for the Leftover
// Drain, in the order the producer left them: first those it never used (by index), its
// current broker last. Ahead are the spares it used after it left the active broker (a
// canceled route): their events are newer than the active broker's backlog, so they are
// read only once the active broker is empty.
func (s State) Spares(brokers []int) (behind, ahead []int) {
	t := s.Trail
	activeFrom := t.Behind
	if p := lastVisit(t, s.ActiveIndex); p >= activeFrom {
		activeFrom = p + 1
	}
	type spare struct{ index, lastAt int }
	var spares []spare
	onRoute := map[int]bool{}
	if s.Pending != nil {
		for _, h := range s.Pending.Route {
			onRoute[h.Index] = true
		}
	}
	for _, b := range brokers {
		if b != s.ActiveIndex && !onRoute[b] {
			spares = append(spares, spare{b, lastVisit(t, b)})
		}
	}
	// A broker's last visit ends where the next visit begins, so ordering by last visit
	// orders by the time the producer left; -1 (never used) sorts first.
	slices.SortStableFunc(spares, func(a, b spare) int { return a.lastAt - b.lastAt })
	for _, sp := range spares {
		if sp.lastAt >= activeFrom {
			ahead = append(ahead, sp.index)
		} else {
			behind = append(behind, sp.index)
		}
	}
	return behind, ahead
}

// lastVisit is the position of the producer's last visit to broker index, or -1.
func lastVisit(t Trail, index int) int {
	for p := len(t.Visits) - 1; p >= 0; p-- {
		if t.Visits[p].Index == index {
			return p
		}
	}
	return -1
}
