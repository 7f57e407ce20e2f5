package windowplan

import (
	"fmt"
	"time"
)

// LeftoverDrainResult says how many messages each spare gave and which could not be reached.
type LeftoverDrainResult struct {
	Taken       map[int]int
	Unreachable []int
	// Skipped are spares that failed otherwise (a refused declaration, a closed channel)
	// and were seen holding nothing ready: nothing to read past.
	Skipped []int `json:",omitempty"`
	// Held are spares ahead of the active broker left for a later window, because the
	// active broker's queue was not seen empty.
	Held []int `json:",omitempty"`
	// Incomplete is the spare whose drain ended without seeing its queue empty (a round
	// that waited too long for a message): the window ends as at the cap, so that neither
	// the active broker nor the next spare overtakes what it still holds.
	Incomplete []int `json:",omitempty"`
	// Unannounced are spares holding messages the producer never announced.
	Unannounced []UnannouncedSpare `json:",omitempty"`
}

// UnannouncedSpare is a spare holding messages the producer never announced: they may be
// its future, so they wait for the notification that puts the broker on the route.
type UnannouncedSpare struct {
	Broker int
	// Since is when a Leftover Drain first found them; ReadAfter when they are read
	// without a notification (Since + UNNOTIFIED_BROKER_GRACE), once the active broker's
	// queue is empty.
	Since, ReadAfter time.Time
	// Read is true once the grace passed and this window read them.
	Read bool `json:",omitempty"`
}

// Unannounced describes spare index, holding messages the producer never announced since
// since, for a grace.
func Unannounced(index int, since time.Time, grace time.Duration) UnannouncedSpare {
	return UnannouncedSpare{Broker: index, Since: since, ReadAfter: since.Add(grace)}
}

// Unfinished tells why a window ends before it consumes the active broker, or "" when it
// consumes: its Leftover Drain stopped at its cap, or did not see a spare empty, and what
// it left there is older than the active broker's backlog. The next window drains on.
func (r LeftoverDrainResult) Unfinished(limit int) string {
	taken := 0
	for _, n := range r.Taken {
		taken += n
	}
	switch {
	case limit > 0 && taken >= limit:
		return fmt.Sprintf("stopped at its cap of %d", limit)
	case len(r.Incomplete) > 0:
		return fmt.Sprintf("did not see broker %v empty", r.Incomplete)
	}
	return ""
}
