package brokerstate

import "time"

// Hop is one step of a Pending Switch's route, or of the producer's trail: the broker the
// producer moved to, and when.
type Hop struct {
	Index      int       `json:"index"`
	Host       string    `json:"host"`
	Vhost      string    `json:"vhost"`
	SwitchedAt time.Time `json:"switchedAt"`
	// SeenAt is when the notification was placed on the trail, on Postgres' clock
	// (Store.Update stamps it): the Leftover Drain's marks are dated by that clock,
	// so that whether the producer had left a broker when it was seen empty compares two
	// times of one clock, never the producer's with ours. Zero on a visit recorded before
	// it existed, and on a Pending Switch's hops.
	SeenAt time.Time `json:"seenAt,omitzero"`
	// From is the broker the producer said it left for this one (the notification's
	// from), when it said.
	From Ref `json:"from,omitzero"`
	// Implied marks a visit no notification announced yet: a later one said the producer
	// came from this broker, and the trail before it ended elsewhere. It has that later
	// visit's time until its own word comes and takes its place.
	Implied bool `json:"implied,omitempty"`
}

// ref names the hop's broker.
func (h Hop) ref() Ref { return Ref{Host: h.Host, Vhost: h.Vhost} }

// cameFrom tells whether h says the producer came to it from broker r.
func (h Hop) cameFrom(r Ref) bool { return h.From != (Ref{}) && h.From == r }

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

// routeOf is a Pending Switch's route, or none.
func routeOf(p *PendingSwitch) []Hop {
	if p == nil {
		return nil
	}
	return p.Route
}
