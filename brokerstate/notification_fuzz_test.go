package brokerstate

import (
	"testing"
	"time"
)

// maxSkew is NOTIFICATION_MAX_CLOCK_SKEW's default.
const maxSkew = 5 * time.Minute

// FuzzNotificationClock drives the notification rules with arbitrary sequences of
// notifications (any broker, any time around the clock, far ahead included), forces,
// cancels and hop commits. Whatever the order: a notification beyond the allowed skew is
// refused, the mark never passes the clock by more than the skew, an order never leaves
// the mark ahead of its clock, a repeated notification changes nothing, and a route never
// holds the active broker.
func FuzzNotificationClock(f *testing.F) {
	f.Add([]byte{0, 1, 10, 0, 2, 10, 1, 0, 0, 0, 1, 200})
	f.Add([]byte{0, 1, 255, 0, 2, 5, 2, 0, 0, 0, 0, 5})
	f.Add([]byte{0, 1, 100, 0, 2, 100, 0, 1, 100, 3, 0, 0})
	hosts := []string{"a.example", "b.example", "c.example"}
	f.Fuzz(func(t *testing.T, ops []byte) {
		now := t0
		var st State
		for len(ops) >= 3 {
			op, index, offset := ops[0]%4, int(ops[1])%len(hosts), time.Duration(int8(ops[2]))*time.Minute
			ops = ops[3:]
			now = now.Add(time.Second)
			switch op {
			case 0:
				n := Notification{Index: index, Host: hosts[index], Vhost: "/", SwitchedAt: now.Add(offset)}
				if CheckSwitchedAt(n.SwitchedAt, now, maxSkew) != nil {
					if offset <= maxSkew {
						t.Fatalf("a notification %s ahead was refused", offset)
					}
					continue
				}
				next, outcome := st.ApplyNotification(n, now)
				again, againOutcome := next.ApplyNotification(n, now)
				if outcome != NotificationStale && (againOutcome != NotificationStale || !equalState(again, next)) {
					t.Fatalf("a repeated notification was taken twice: %s then %s", outcome, againOutcome)
				}
				st = next
			case 1:
				st = st.Force(index, now.Add(-time.Second), now)
			case 2:
				st = st.CancelPending(time.Time{}, now)
			case 3:
				if st.Pending != nil {
					st, _ = st.CompleteHop(st.ActiveIndex, st.Pending.Next(), 1, now)
				}
			}
			if st.SeenUntil.After(now.Add(maxSkew)) {
				t.Fatalf("the mark %s passed the clock %s by more than the skew", st.SeenUntil, now)
			}
			if (op == 1 || op == 2) && st.SeenUntil.After(now) {
				t.Fatalf("an order left the mark %s ahead of the clock %s", st.SeenUntil, now)
			}
			if st.Pending != nil {
				if len(st.Pending.Route) == 0 {
					t.Fatal("an empty route")
				}
				if st.Pending.Route[0].Index == st.ActiveIndex {
					t.Fatalf("the route's next hop is the active broker: %+v", st.Pending.Route)
				}
			}
		}
	})
}

func equalState(a, b State) bool {
	return a.SeenUntil.Equal(b.SeenUntil) && len(a.SeenAtMark) == len(b.SeenAtMark) &&
		(a.Pending == nil) == (b.Pending == nil) && a.ActiveIndex == b.ActiveIndex
}
