package brokerstate

import (
	"slices"
	"strings"
	"time"
)

// LastSwitch records the last completed switch, for GET /api/v1/broker; nothing decides on it.
type LastSwitch struct {
	From        int       `json:"from"`
	To          int       `json:"to"`
	SwitchedAt  time.Time `json:"switchedAt,omitzero"`
	CompletedAt time.Time `json:"completedAt"`
	Checks      int       `json:"checks"`
	Forced      bool      `json:"forced,omitempty"`
}

// DrainCheck is the result of one drain check of the active broker.
type DrainCheck struct {
	BrokerIndex int            `json:"brokerIndex"`
	Counts      map[string]int `json:"counts"`
	Reachable   bool           `json:"reachable"`
	Error       string         `json:"error,omitempty"`
	CheckedAt   time.Time      `json:"checkedAt"`
	// HeldBy are the spares' queues whose messages hold the hop's commit although the
	// broker is drained (State.CommitHold); counted only once it is.
	HeldBy []Held `json:"heldBy,omitempty"`
	// Idle are the logical queues seen, once the broker was drained, with nothing ready
	// and no consumer: nothing of theirs was in a consumer's hands, so what they hold after
	// the hop's commit is the producer's future, or came back from -retry or -error. The
	// commit dates them seen empty (Store.Update); counted only once the broker is drained.
	Idle []string `json:"idle,omitempty"`
}

// Held is a spare's queue that holds a hop's commit: it holds messages whose place in the
// producer's order is unknown, Since (Postgres' clock) until Until, the end of the grace
// for a word that places them.
type Held struct {
	Broker int       `json:"broker"`
	Queue  string    `json:"queue"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
}

// Drained reports whether every counted queue was seen empty.
func (d DrainCheck) Drained() bool {
	if !d.Reachable {
		return false
	}
	for _, n := range d.Counts {
		if n > 0 {
			return false
		}
	}
	return true
}

// State is the broker state, what Postgres says about brokers: the source of truth.
type State struct {
	ActiveIndex    int            `json:"activeIndex"`
	Pending        *PendingSwitch `json:"pendingSwitch"`
	LastSwitch     *LastSwitch    `json:"lastSwitch"`
	LastDrainCheck *DrainCheck    `json:"lastDrainCheck"`
	// SeenUntil is the newest switchedAt of any notification taken: an older notification
	// is stale, even after its switch was completed, forced or canceled.
	SeenUntil time.Time `json:"seenUntil,omitzero"`
	// SeenAtMark are the brokers notified at exactly SeenUntil: the same broker at that
	// time again is a duplicate, another one a new hop (clocks tick in seconds, and two
	// rotations can share one). Empty when the state knows of no notification at exactly
	// SeenUntil (an operator's order brought a future-dated mark back to now, or the stored
	// state has no such setting): a notification at that time then cannot be told from a
	// duplicate, and is taken as stale.
	SeenAtMark []Ref `json:"seenAtMark,omitempty"`
	// Trail is where the producer went and when. It is kept in Postgres, and not sent
	// through workflow histories: every change reads it under the state's lock.
	Trail Trail `json:"-"`
}

// ApplyNotification decides what a notification does to the state; it is pure so that the
// API and the workflow agree and tests can reach every corner.
//
// A notification is placed on the producer's trail by its switchedAt, and the route is
// read from the trail. One newer than every other extends the route. One at the newest
// time is a duplicate (stale) when it names a broker already notified at that time, and
// a new hop otherwise, taken in arrival order. An out-of-order one, older than the newest, is
// inserted where its time puts it (a double rotation notified in reverse keeps its middle
// broker on the route), unless it is older than the active broker's own time or already
// on the trail: then it is stale. One older than the active broker's time is still kept
// on the trail, behind the active broker, so that its broker's messages are read as the
// stragglers they are.
func (s State) ApplyNotification(n Notification, now time.Time) (State, string) {
	visit, from := n.visit()
	if n.SwitchedAt.IsZero() {
		return s, NotificationStale
	}
	if p := s.Trail.implied(visit); p >= 0 {
		return s.confirm(p, visit, from, now)
	}
	ref := visit.ref()
	trail := s.Trail
	at := trail.place(visit)
	outOfOrder := n.SwitchedAt.Before(s.SeenUntil)
	switch {
	case outOfOrder:
		if trail.has(visit) {
			return s, NotificationStale
		}
		if at < trail.Behind {
			// Behind the active broker it moves nothing, but it says the producer left
			// that broker before: what waits there is a straggler, not its future.
			s.Trail = trail.insert(at, visit)
			return s, NotificationStale
		}
	case n.SwitchedAt.Equal(s.SeenUntil):
		if len(s.SeenAtMark) == 0 || slices.Contains(s.SeenAtMark, ref) {
			return s, NotificationStale
		}
		s.SeenAtMark = append(slices.Clip(s.SeenAtMark), ref)
	default:
		s.SeenUntil, s.SeenAtMark = n.SwitchedAt, []Ref{ref}
	}
	before := s.Pending
	s = s.withRoute(s.chained(trail.insert(at, visit), visit, from), now)
	switch {
	case !outOfOrder && n.Index == s.ActiveIndex && before == nil:
		return s, NotificationAlreadyActive
	case !outOfOrder && n.Index == s.ActiveIndex:
		// The producer came back to the broker we read: the brokers on the route are left
		// to the Leftover Drain.
		return s, NotificationRouteCanceled
	case slices.Equal(routeOf(before), routeOf(s.Pending)):
		// An out-of-order notification that moves nothing now: one for a canceled stretch, or a
		// return to the active broker before the newest hop. It stays on the trail, where
		// it places later notifications and orders the spares.
		s.Pending = before
		return s, NotificationStale
	}
	return s, NotificationRecorded
}

// visit is the notification as a visit of the trail, with the index of the broker it
// says the producer came from (-1 when it does not say).
func (n Notification) visit() (Hop, int) {
	v := Hop{Index: n.Index, Host: strings.ToLower(n.Host), Vhost: n.Vhost, SwitchedAt: n.SwitchedAt}
	if n.From == nil {
		return v, -1
	}
	v.From = Ref{Host: strings.ToLower(n.From.Host), Vhost: n.From.Vhost}
	return v, n.From.Index
}

// chained adds, before visit v of trail t, the visit its from implies when the trail
// before it ends on another broker: the hop in between is on the route at once, ahead
// of v, rather than left outside it until its word comes.
func (s State) chained(t Trail, v Hop, from int) Trail {
	p := slices.Index(t.Visits, v)
	if p < 0 {
		return t
	}
	if gap, ok := t.gap(v, from, p, s.ActiveIndex); ok {
		t = t.insert(p, gap)
	}
	return t
}

// confirm puts v, a broker's own word, in place of the visit at p that a later visit's
// from implied: the route keeps its order and takes v's time.
func (s State) confirm(p int, v Hop, from int, now time.Time) (State, string) {
	trail := s.Trail
	trail.Visits = slices.Clone(trail.Visits)
	v.SeenAt = trail.Visits[p].SeenAt // we learned of the visit when it was implied
	trail.Visits[p] = v
	before := s.Pending
	s = s.withRoute(s.chained(trail, v, from), now)
	if slices.Equal(routeOf(before), routeOf(s.Pending)) {
		s.Pending = before
		return s, NotificationStale
	}
	return s, NotificationRecorded
}

// CompleteHop moves to the route's next hop after the active broker was seen drained.
// It returns false when the state has already moved on (a retried or concurrent commit).
func (s State) CompleteHop(from int, hop Hop, checks int, now time.Time) (State, bool) {
	if s.ActiveIndex != from || s.Pending == nil || s.Pending.Next().Index != hop.Index {
		return s, false
	}
	s.LastSwitch = &LastSwitch{From: from, To: hop.Index, SwitchedAt: hop.SwitchedAt, CompletedAt: now, Checks: checks}
	trail := s.Trail
	if route := trail.route(s.ActiveIndex); len(route) > 0 {
		trail.Behind = route[0] + 1
	}
	s.ActiveIndex = hop.Index
	return s.withRoute(trail, s.Pending.RecordedAt), true
}

// Force moves to index at once and drops the Pending Switch the operator knew of: the
// operator's hand wins. A Pending Switch recorded after askedAt, the time the force was
// asked for, survives (what the producer did meanwhile is not undone), less the hops up
// to the forced broker. A zero askedAt (the Temporal CLI's plain signal) drops whatever is
// pending. A mark of notifications that lies ahead of now is brought back to now.
func (s State) Force(index int, askedAt, now time.Time) State {
	s.LastSwitch = &LastSwitch{From: s.ActiveIndex, To: index, CompletedAt: now, Forced: true}
	trail := s.Trail
	route := trail.route(s.ActiveIndex)
	recordedAt := time.Time{}
	if p := s.Pending; p != nil && !askedAt.IsZero() && p.RecordedAt.After(askedAt) && len(route) > 0 {
		recordedAt = p.RecordedAt
		trail.Behind = route[0]
		if i := slices.IndexFunc(route, func(q int) bool { return trail.Visits[q].Index == index }); i >= 0 {
			trail.Behind = route[i] + 1
		}
	} else {
		// The operator forces to where the producer is: a return there that no word
		// announced leaves the trail showing other brokers used after the forced one, yet
		// what they hold is older than the forced broker's new events. Everything the
		// producer told us of is behind the forced broker, read first.
		trail.Behind = len(trail.Visits)
	}
	s.ActiveIndex = index
	return s.withRoute(trail, recordedAt).clearFutureMark(now)
}

// CancelPending takes off the route every hop the producer made up to upTo, the
// switchedAt of the target the operator saw, without moving: the cancel names what it
// cancels. A hop the producer made later (its notification came after the cancel was
// asked for) stays pending, a new Pending Switch from the active broker: an operator's
// cancel must not undo what the producer did next. A zero upTo cancels whatever is
// pending. A mark ahead of now is brought back to now.
//
// The canceled hops' brokers become spares ahead of the active broker: the producer
// published there after it left the active broker, so the Leftover Drain reads them, in
// the producer's order, only once the active broker's queue is empty; a force moves there
// at once.
func (s State) CancelPending(upTo, now time.Time) State {
	if s.Pending != nil {
		trail := s.Trail
		canceled := len(trail.Visits)
		if !upTo.IsZero() {
			canceled = trail.place(Hop{SwitchedAt: upTo})
		}
		if canceled > trail.Canceled {
			trail.Canceled = canceled
			s = s.withRoute(trail, s.Pending.RecordedAt)
		}
	}
	return s.clearFutureMark(now)
}

// CommittedPast tells why a cancel named by upTo (and, when known, by its target's index)
// finds nothing of its own left to cancel, when the reason is that the switch it named was
// committed after a drain check before the cancel got to it: the broker moved, and saying
// "canceled" would be a lie. It returns that commit, or nil when a hop it names is still
// pending, or its switch ended another way (canceled already, forced, or the producer came
// back), so that the cancel holds. Hops commit in the producer's order, so a commit of a
// hop at or after upTo covers the one named; at upTo's very second another broker may have
// been the hop committed before the operator looked, which the index tells apart.
func (s State) CommittedPast(upTo time.Time, target *int) *LastSwitch {
	ls := s.LastSwitch
	switch {
	case upTo.IsZero(), ls == nil, ls.Forced:
		return nil
	case s.Pending != nil && !s.Pending.Next().SwitchedAt.After(upTo):
		return nil
	case ls.SwitchedAt.After(upTo):
		return ls
	case ls.SwitchedAt.Equal(upTo) && (target == nil || *target == ls.To):
		return ls
	}
	return nil
}

// clearFutureMark brings a mark of notifications that lies ahead of now back to now: a
// notification dated ahead (a producer's clock gone wrong, before the skew limit) would
// otherwise make every real one stale until then, and an operator's order is the repair.
func (s State) clearFutureMark(now time.Time) State {
	if !now.IsZero() && s.SeenUntil.After(now) {
		s.SeenUntil, s.SeenAtMark = now, nil
		// The trail too: a real notification would otherwise be placed before the
		// future-dated visit, on the stretch an order has just left behind.
		visits := slices.Clone(s.Trail.Visits)
		for i := range visits {
			if visits[i].SwitchedAt.After(now) {
				visits[i].SwitchedAt = now
			}
		}
		s.Trail.Visits = visits
	}
	return s
}

// orderChanged tells whether b reads brokers in another order than a: another active
// broker, another route, or a spare that changed its place (a return to the active broker
// after a cancel puts the canceled brokers behind it). A window reading the active broker
// ends on it, so that what it read past is read in the new order.
func orderChanged(a, b State, brokers []int) bool {
	return a.ActiveIndex != b.ActiveIndex || !slices.Equal(routeOf(a.Pending), routeOf(b.Pending)) ||
		SparesReordered(a, b, brokers)
}

// SparesReordered tells whether the spares of brokers are read in another order in b
// than in a (Spares): one moved from ahead of the active broker to behind it, or the
// reverse, or the order the producer left them changed.
func SparesReordered(a, b State, brokers []int) bool {
	aBehind, aAhead := a.Spares(brokers)
	bBehind, bAhead := b.Spares(brokers)
	return !slices.Equal(aBehind, bBehind) || !slices.Equal(aAhead, bAhead)
}
