package testenv

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestADatabaseIsStuckOnlyWhenItRefusesCallAfterCall(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	times := func(n int, every time.Duration) []time.Time {
		var out []time.Time
		for i := n - 1; i >= 0; i-- {
			out = append(out, now.Add(-time.Duration(i)*every))
		}
		return out
	}
	cases := []struct {
		name string
		seen []time.Time
		want bool
	}{
		{"nothing seen", nil, false},
		{"a cancelled call now and then", times(20, time.Second), false},
		{"one short of the count in the window", times(stuckInterrupts-1, 10*time.Millisecond), false},
		{"the count in the window", times(stuckInterrupts, 10*time.Millisecond), true},
		{"the count, but spread past the window", times(stuckInterrupts, stuckWindow/stuckInterrupts*2), false},
	}
	for _, c := range cases {
		if got := databaseStuck(c.seen, now); got != c.want {
			t.Errorf("%s: databaseStuck = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTheWatchCallsStuckOnceForABurstAndPassesTheLogOn(t *testing.T) {
	calls := make(chan struct{}, 10)
	var out strings.Builder
	w := &stuckWatch{out: &out, stuck: func() { calls <- struct{}{} }}
	line := `level=ERROR msg="Operation failed with internal error." error="GetTasks operation failed. Error: interrupted (9)"` + "\n"
	for range stuckInterrupts - 1 {
		_, _ = io.WriteString(w, line)
	}
	select {
	case <-calls:
		t.Fatal("stuck called before the count")
	default:
	}
	_, _ = io.WriteString(w, line)
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("stuck not called at the count")
	}
	// The count starts afresh: one more line is not another stuck database.
	_, _ = io.WriteString(w, line)
	select {
	case <-calls:
		t.Fatal("stuck called again for one line")
	case <-time.After(100 * time.Millisecond):
	}
	if got := strings.Count(out.String(), "\n"); got != stuckInterrupts+1 {
		t.Errorf("the watch passed on %d lines, want %d", got, stuckInterrupts+1)
	}
}
