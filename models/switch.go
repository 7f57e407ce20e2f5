package models

import (
	"strings"
	"time"
)

// Hop is one step of a Pending Switch's route: the broker the producer moved to, and when.
type Hop struct {
	Index      int       `json:"index"`
	Host       string    `json:"host"`
	Vhost      string    `json:"vhost"`
	SwitchedAt time.Time `json:"switchedAt"`
}

// PendingSwitch is where the producer went and we have not yet followed: the route is
// followed hop by hop, each hop once the broker before it is drained, so that events
// are applied in the order the producer published them.
type PendingSwitch struct {
	Route      []Hop     `json:"route"`
	RecordedAt time.Time `json:"recordedAt"`
}

// Next is the hop the current drain check is for.
func (p *PendingSwitch) Next() Hop { return p.Route[0] }

// Target is the broker the producer uses now: the end of the route.
func (p *PendingSwitch) Target() Hop { return p.Route[len(p.Route)-1] }

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

// BrokerState is what Postgres says about brokers: the source of truth.
type BrokerState struct {
	ActiveIndex    int            `json:"activeIndex"`
	Pending        *PendingSwitch `json:"pendingSwitch"`
	LastSwitch     *LastSwitch    `json:"lastSwitch"`
	LastDrainCheck *DrainCheck    `json:"lastDrainCheck"`
	// SeenUntil is the newest switchedAt of any notification taken: a notification
	// that is not newer is stale, even after its switch was completed, forced or canceled.
	SeenUntil time.Time `json:"seenUntil,omitzero"`
}

// Notification is the producer's word that it now publishes to the broker at Index.
type Notification struct {
	Index      int       `json:"index"`
	Host       string    `json:"host"`
	Vhost      string    `json:"vhost"`
	SwitchedAt time.Time `json:"switchedAt"`
}

// Notification outcomes, as the API reports them.
const (
	NotificationRecorded      = "recorded"
	NotificationStale         = "stale"
	NotificationAlreadyActive = "already-active"
	NotificationRouteCanceled = "route-canceled"
)

// ApplyNotification decides what a notification does to the state; it is pure so that the
// API and the workflow agree and tests can reach every corner.
func (s BrokerState) ApplyNotification(n Notification, now time.Time) (BrokerState, string) {
	if !n.SwitchedAt.After(s.SeenUntil) {
		return s, NotificationStale
	}
	s.SeenUntil = n.SwitchedAt
	hop := Hop{Index: n.Index, Host: strings.ToLower(n.Host), Vhost: n.Vhost, SwitchedAt: n.SwitchedAt}
	if n.Index == s.ActiveIndex {
		if s.Pending == nil {
			return s, NotificationAlreadyActive
		}
		// The producer came back to the broker we read: the brokers on the route are left
		// to the Leftover Drain.
		s.Pending = nil
		return s, NotificationRouteCanceled
	}
	var route []Hop
	if s.Pending != nil {
		for _, h := range s.Pending.Route {
			if h.Index == n.Index {
				// The producer returned to a broker already on the route: what it published
				// after that hop is reached through the Leftover Drain, not a second visit.
				break
			}
			route = append(route, h)
		}
	}
	s.Pending = &PendingSwitch{Route: append(route, hop), RecordedAt: now}
	return s, NotificationRecorded
}

// CompleteHop moves to the route's next hop after the active broker was seen drained.
// It returns false when the state has already moved on (a retried or concurrent commit).
func (s BrokerState) CompleteHop(from int, hop Hop, checks int, now time.Time) (BrokerState, bool) {
	if s.ActiveIndex != from || s.Pending == nil || s.Pending.Next().Index != hop.Index {
		return s, false
	}
	s.LastSwitch = &LastSwitch{From: from, To: hop.Index, SwitchedAt: hop.SwitchedAt, CompletedAt: now, Checks: checks}
	s.ActiveIndex = hop.Index
	if rest := s.Pending.Route[1:]; len(rest) > 0 {
		s.Pending = &PendingSwitch{Route: append([]Hop(nil), rest...), RecordedAt: s.Pending.RecordedAt}
	} else {
		s.Pending = nil
	}
	return s, true
}

// Force moves to index at once and drops any Pending Switch: the operator's hand wins.
func (s BrokerState) Force(index int, now time.Time) BrokerState {
	s.LastSwitch = &LastSwitch{From: s.ActiveIndex, To: index, CompletedAt: now, Forced: true}
	s.ActiveIndex = index
	s.Pending = nil
	return s
}

// CancelPending drops the Pending Switch without moving, unless it was recorded after the
// cancel was given: an operator's cancel must not undo a notification that came later.
// A zero upTo cancels whatever is pending.
func (s BrokerState) CancelPending(upTo time.Time) BrokerState {
	if s.Pending != nil && (upTo.IsZero() || !s.Pending.Target().SwitchedAt.After(upTo)) {
		s.Pending = nil
	}
	return s
}
