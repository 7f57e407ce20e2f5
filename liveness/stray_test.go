package liveness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// attempt is activity id's attempt n in run "r1" of "queue-window-issues".
func attempt(id string, n int32) attemptKey {
	return attemptKey{WorkflowID: "queue-window-issues", RunID: "r1", ActivityID: id, Attempt: n}
}

// scan is one scan of the keeper: what Temporal shows started on the worker, what the
// process runs, when, and which attempts are strays then.
type scan struct {
	at     time.Duration
	seen   []attemptKey
	ran    []attemptKey
	strays []attemptKey
}

func TestStrays(t *testing.T) {
	const interval = 2 * time.Second
	a1, a2, b1 := attempt("1", 1), attempt("1", 2), attempt("2", 1)
	nextRun := a1
	nextRun.RunID = "r2"
	tests := []struct {
		name  string
		scans []scan
	}{
		{"seen once: not yet (a poll's answer may still be on its way)", []scan{
			{at: 0, seen: []attemptKey{a1}},
		}},
		{"seen on two scans one interval apart, not running: a stray", []scan{
			{at: 0, seen: []attemptKey{a1}},
			{at: interval, seen: []attemptKey{a1}, strays: []attemptKey{a1}},
		}},
		{"two scans closer than the interval: not yet, then a stray", []scan{
			{at: 0, seen: []attemptKey{a1}},
			{at: interval / 2, seen: []attemptKey{a1}},
			{at: interval - time.Millisecond, seen: []attemptKey{a1}},
			{at: interval, seen: []attemptKey{a1}, strays: []attemptKey{a1}},
		}},
		{"running here: never", []scan{
			{at: 0, seen: []attemptKey{a1}, ran: []attemptKey{a1}},
			{at: interval, seen: []attemptKey{a1}, ran: []attemptKey{a1}},
			{at: 2 * interval, seen: []attemptKey{a1}, ran: []attemptKey{a1}},
		}},
		{"started here between two scans: the count starts over", []scan{
			{at: 0, seen: []attemptKey{a1}},
			{at: interval / 2, seen: []attemptKey{a1}, ran: []attemptKey{a1}},
			{at: interval, seen: []attemptKey{a1}},
			{at: 3 * interval / 2, seen: []attemptKey{a1}},
			{at: 2 * interval, seen: []attemptKey{a1}, strays: []attemptKey{a1}},
		}},
		{"a retry is another attempt: its own count", []scan{
			{at: 0, seen: []attemptKey{a1}},
			{at: interval, seen: []attemptKey{a2}},
			{at: 3 * interval / 2, seen: []attemptKey{a2}},
			{at: 2 * interval, seen: []attemptKey{a2}, strays: []attemptKey{a2}},
		}},
		{"the next run's activity of the same id is another attempt", []scan{
			{at: 0, seen: []attemptKey{a1}},
			{at: interval, seen: []attemptKey{nextRun}},
		}},
		{"ended in between (its completion reached Temporal): forgotten", []scan{
			{at: 0, seen: []attemptKey{a1}},
			{at: interval / 2},
			{at: interval, seen: []attemptKey{a1}},
		}},
		{"a stray whose failure was lost is failed again", []scan{
			{at: 0, seen: []attemptKey{a1}},
			{at: interval, seen: []attemptKey{a1}, strays: []attemptKey{a1}},
			{at: 3 * interval / 2, seen: []attemptKey{a1}, strays: []attemptKey{a1}},
		}},
		{"each attempt on its own", []scan{
			{at: 0, seen: []attemptKey{a1, b1}, ran: []attemptKey{b1}},
			{at: interval, seen: []attemptKey{a1, b1}, ran: []attemptKey{b1}, strays: []attemptKey{a1}},
		}},
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sightings map[attemptKey]time.Time
			for i, s := range tt.scans {
				var seen []pendingAttempt
				for _, k := range s.seen {
					seen = append(seen, pendingAttempt{key: k, activityType: "Consume"})
				}
				ran := map[attemptKey]bool{}
				for _, k := range s.ran {
					ran[k] = true
				}
				var found []pendingAttempt
				found, sightings = strays(sightings, seen, ran, t0.Add(s.at), interval)
				var keys []attemptKey
				for _, f := range found {
					keys = append(keys, f.key)
				}
				assert.Equal(t, s.strays, keys, "scan %d at %s", i, s.at)
			}
		})
	}
}

// Running counts an attempt from its start to its return, and once more in the first
// snapshot after it returned: Temporal shows it started until its completion arrives.
func TestRunningCountsAnAttemptUntilTheSnapshotAfterItEnded(t *testing.T) {
	var r Running
	a1, b1 := attempt("1", 1), attempt("2", 1)
	assert.Empty(t, r.snapshot())
	r.add(a1)
	r.add(b1)
	assert.Equal(t, map[attemptKey]bool{a1: true, b1: true}, r.snapshot())
	r.remove(a1)
	assert.Equal(t, map[attemptKey]bool{a1: true, b1: true}, r.snapshot(), "ended since the last snapshot")
	assert.Equal(t, map[attemptKey]bool{b1: true}, r.snapshot())
	r.remove(b1)
	assert.Equal(t, map[attemptKey]bool{b1: true}, r.snapshot())
	assert.Empty(t, r.snapshot())
}
