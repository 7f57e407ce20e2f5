//go:build integration

package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
	"github.com/brokerswitch/brokerswitch/models"
)

func TestStampReadsGitHubsFormsAndNeverFails(t *testing.T) {
	at := func(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
	tests := []struct {
		json       string
		want       time.Time
		unreadable bool
	}{
		{`"2019-05-15T15:20:33Z"`, at(1557933633), false},
		{`"2021-04-28T22:32:50.000-04:00"`, at(1619663570), false},
		{`"2019-05-15T15:20:33.999Z"`, at(1557933633), false}, // GitHub ticks in seconds
		{`1557933591`, at(1557933591), false},
		{`null`, time.Time{}, false},
		{`"yesterday"`, time.Time{}, true},
		{`""`, time.Time{}, true},
		{`-5`, time.Time{}, true},
		{`{"a": 1}`, time.Time{}, true},
		{`true`, time.Time{}, true},
	}
	for _, tt := range tests {
		var s stamp
		require.NoError(t, s.UnmarshalJSON([]byte(tt.json)), tt.json)
		assert.Equal(t, tt.want, s.at, tt.json)
		assert.Equal(t, tt.unreadable, s.unreadable, tt.json)
	}
	// Inside a payload, through the decoder the ingester uses.
	ev, err := Decode(delivery("pull_request", "d", edit(t, example(t, "pull_request.opened.0"), func(p map[string]any) {
		object(p, "pull_request")["updated_at"] = map[string]any{"not": "a time"}
	})))
	require.NoError(t, err, "an unreadable clock does not make the delivery malformed")
	c := clockOf(ev)
	assert.Nil(t, c.at)
	assert.Equal(t, metrics.ClockUnparseable, c.fallback)
	assert.Equal(t, "github_pull_requests", c.table)
}

// withClock sets the clock field of a payload: key is the entity object, field its clock.
func withClock(t *testing.T, body []byte, key, field string, clock any) []byte {
	t.Helper()
	return edit(t, body, func(p map[string]any) {
		if clock == nil {
			delete(object(p, key), field)
			return
		}
		object(p, key)[field] = clock
	})
}

// An event older than the row changes nothing but the ledger; equal clocks and missing or
// unparseable ones fall back to queue order, and the fallbacks are counted.
func TestOlderEventsChangeOnlyTheLedger(t *testing.T) {
	e := newEnv(t)
	m, reg := metricstest.New()
	e.ing.Metrics = m
	fallbacks := func(table, reason string) float64 {
		return metricstest.Value(t, reg, "brokerswitch_clock_fallbacks_total", "table", table, "reason", reason)
	}
	pr := func(name, clock string, change func(p map[string]any)) []byte {
		return edit(t, example(t, "pull_request."+name+".0"), func(p map[string]any) {
			if clock == "" {
				delete(object(p, "pull_request"), "updated_at")
			} else {
				object(p, "pull_request")["updated_at"] = clock
			}
			if change != nil {
				change(p)
			}
		})
	}
	title := func(s string) func(p map[string]any) {
		return func(p map[string]any) { object(p, "pull_request")["title"] = s }
	}

	// The close (15:21:00) arrives before the synchronize (15:20:50) that preceded it.
	e.handle(t, delivery("pull_request", "o", pr("opened", "2019-05-15T15:20:33Z", title("opened"))))
	e.handle(t, delivery("pull_request", "c", pr("closed", "2019-05-15T15:21:00Z", title("closed"))))
	before := e.pullRequest(t)
	e.handle(t, delivery("pull_request", "s", pr("synchronize", "2019-05-15T15:20:50Z", title("older"))))
	got := e.pullRequest(t)
	assert.Equal(t, before, got, "the older synchronize changed the row")
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "s").Outcome, "it is in the ledger all the same")

	// A reopened in the same second as the close: queue order decides, as before clocks.
	e.handle(t, delivery("pull_request", "r", pr("reopened", "2019-05-15T15:21:00Z", title("reopened"))))
	got = e.pullRequest(t)
	assert.Equal(t, "open", got.State)
	assert.Equal(t, "r", got.LastDeliveryID)
	assert.Equal(t, models.StateReRequested, got.ProcessingState)

	// No clock: queue order, the row keeps its clock, counted.
	e.handle(t, delivery("pull_request", "n", pr("closed", "", title("no clock"))))
	got = e.pullRequest(t)
	assert.Equal(t, "closed", got.State)
	assert.Equal(t, "n", got.LastDeliveryID)
	assert.Equal(t, time.Date(2019, 5, 15, 15, 21, 0, 0, time.UTC), got.EntityClock.UTC())
	assert.InDelta(t, 1, fallbacks("github_pull_requests", metrics.ClockMissing), 0)

	// An unparseable clock likewise.
	e.handle(t, delivery("pull_request", "u", pr("reopened", "soon", title("unparseable"))))
	got = e.pullRequest(t)
	assert.Equal(t, "u", got.LastDeliveryID)
	assert.Equal(t, "open", got.State)
	assert.InDelta(t, 1, fallbacks("github_pull_requests", metrics.ClockUnparseable), 0)
	assert.InDelta(t, 0, fallbacks("github_pull_requests", metrics.ClockMissing)-1, 0, "counted once each")

	// The clock still holds against what came without one.
	e.handle(t, delivery("pull_request", "x", pr("closed", "2019-05-15T15:20:59Z", title("older again"))))
	assert.Equal(t, "u", e.pullRequest(t).LastDeliveryID)

	// A newer labeled on a closed row is a change readers have not seen.
	e.handle(t, delivery("pull_request", "c2", pr("closed", "2019-05-15T15:22:00Z", title("closed again"))))
	e.handle(t, delivery("pull_request", "l", pr("labeled", "2019-05-15T15:23:00Z", func(p map[string]any) {
		title("labeled after close")(p)
		object(p, "pull_request")["state"] = "closed"
	})))
	got = e.pullRequest(t)
	assert.Equal(t, "closed", got.State)
	assert.Equal(t, "labeled after close", got.Title)
	assert.Equal(t, "l", got.LastDeliveryID)
	assert.Equal(t, models.StateUpdated, got.ProcessingState)
	assert.Equal(t, int64(9), e.count(t, "github_deliveries"))
}

// Comments, installations and repositories follow their own clocks too; a row first seen
// through a later event of its entity is UPDATED, as clock order would leave it.
func TestClockedRowsWithoutLifecycle(t *testing.T) {
	e := newEnv(t)
	created := withClock(t, example(t, "issue_comment.created.0"), "comment", "updated_at", "2019-05-15T15:20:21Z")
	edited := edit(t, withClock(t, example(t, "issue_comment.edited.0"), "comment", "updated_at", "2019-05-15T15:20:30Z"),
		func(p map[string]any) { object(p, "comment")["body"] = "edited" })
	e.handle(t, delivery("issue_comment", "ce", edited))
	e.handle(t, delivery("issue_comment", "cc", created))
	var c models.Comment
	require.NoError(t, e.db.Take(&c).Error)
	assert.Equal(t, "edited", c.Body)
	assert.Equal(t, "ce", c.LastDeliveryID)
	assert.Equal(t, models.StateUpdated, c.ProcessingState)

	suspend := withClock(t, example(t, "installation.suspend.0"), "installation", "updated_at", json.Number("1619663570"))
	unsuspend := withClock(t, example(t, "installation.unsuspend.0"), "installation", "updated_at", "2021-04-28T22:33:00-04:00")
	e.handle(t, delivery("installation", "iu", unsuspend))
	e.handle(t, delivery("installation", "is", suspend))
	var inst models.Installation
	require.NoError(t, e.db.Take(&inst).Error)
	assert.False(t, inst.Suspended, "the older suspend does not suspend it again")
	assert.Equal(t, "iu", inst.LastDeliveryID)

	renamed := edit(t, withClock(t, example(t, "repository.renamed.0"), "repository", "updated_at", "2019-05-15T15:30:00Z"),
		func(p map[string]any) { object(p, "repository")["name"] = "renamed" })
	edited = withClock(t, example(t, "repository.edited.0"), "repository", "updated_at", "2019-05-15T15:20:41Z")
	e.handle(t, delivery("repository", "rr", renamed))
	e.handle(t, delivery("repository", "re", edited))
	var repo models.Repository
	require.NoError(t, e.db.Take(&repo, "id = ?", 186853261).Error)
	assert.Equal(t, "renamed", repo.Name)
	assert.Equal(t, "rr", repo.LastDeliveryID)
}

// A row another consumer inserted after the read, which no lock could hold, is decided by
// the upsert's WHERE on the same clock as a row the read found.
func TestUpsertKeepsANewerRowInsertedAfterTheRead(t *testing.T) {
	e := newEnv(t)
	newer := withClock(t, example(t, "pull_request.closed.0"), "pull_request", "updated_at", "2019-05-15T15:30:00Z")
	e.handle(t, delivery("pull_request", "newer", newer))
	want := e.pullRequest(t)

	older := withClock(t, example(t, "pull_request.synchronize.0"), "pull_request", "updated_at", "2019-05-15T15:20:00Z")
	ev, err := Decode(delivery("pull_request", "older", older))
	require.NoError(t, err)
	w := newWrites(time.Date(2025, 1, 2, 4, 0, 0, 0, time.UTC))
	// As if the read ran before the other consumer's insert committed.
	w.pullRequests.read = func(string, string, []string) (string, []any) { return "SELECT 1 WHERE false", nil }
	applyPullRequest(w, ev)
	tx := e.begin(t)
	require.NoError(t, w.flush(context.Background(), tx))
	require.NoError(t, tx.Commit(context.Background()))
	assert.Equal(t, want, e.pullRequest(t))

	// And a newer one still goes through.
	newest := withClock(t, example(t, "pull_request.reopened.0"), "pull_request", "updated_at", "2019-05-15T15:40:00Z")
	ev, err = Decode(delivery("pull_request", "newest", newest))
	require.NoError(t, err)
	w = newWrites(time.Date(2025, 1, 2, 5, 0, 0, 0, time.UTC))
	w.pullRequests.read = func(string, string, []string) (string, []any) { return "SELECT 1 WHERE false", nil }
	applyPullRequest(w, ev)
	tx = e.begin(t)
	require.NoError(t, w.flush(context.Background(), tx))
	require.NoError(t, tx.Commit(context.Background()))
	assert.Equal(t, "newest", e.pullRequest(t).LastDeliveryID)
}

// When the event's clock ties with the row's, nextState's queue-order rule holds: a late
// event in the same second never moves a closed row and only records its last_*, and on
// an open row it refreshes every column but the state.
func TestATiedClockKeepsTheQueueOrderRules(t *testing.T) {
	e := newEnv(t)
	pr := func(name, clock, state, title string) []byte {
		return edit(t, example(t, "pull_request."+name+".0"), func(p map[string]any) {
			o := object(p, "pull_request")
			o["updated_at"], o["state"], o["title"] = clock, state, title
		})
	}
	e.handle(t, delivery("pull_request", "o", pr("opened", "2019-05-15T15:20:00Z", "open", "opened")))
	e.handle(t, delivery("pull_request", "c", pr("closed", "2019-05-15T15:21:00Z", "closed", "closed")))
	closed := e.pullRequest(t)
	// Labeled just before the close, in the same second, delivered after it.
	e.handle(t, delivery("pull_request", "l", pr("labeled", "2019-05-15T15:21:00Z", "open", "labeled")))
	got := e.pullRequest(t)
	assert.Equal(t, "l", got.LastDeliveryID)
	assert.Equal(t, "labeled", got.LastAction)
	got.LastDeliveryID, got.LastAction, got.UpdatedAt = closed.LastDeliveryID, closed.LastAction, closed.UpdatedAt
	assert.Equal(t, closed, got, "a tied labeled reopened or changed the closed row beyond last_*")

	e.handle(t, delivery("pull_request", "r", pr("reopened", "2019-05-15T15:22:00Z", "open", "reopened")))
	e.handle(t, delivery("pull_request", "e", pr("labeled", "2019-05-15T15:22:00Z", "open", "edited")))
	got = e.pullRequest(t)
	assert.Equal(t, "edited", got.Title, "a tied labeled on an open row is applied in queue order")
	assert.Equal(t, "e", got.LastDeliveryID)
	// A payload in the same second that says closed does not close the row without a closed.
	e.handle(t, delivery("pull_request", "s", pr("synchronize", "2019-05-15T15:22:00Z", "closed", "synchronized")))
	got = e.pullRequest(t)
	assert.Equal(t, "open", got.State)
	assert.Equal(t, "synchronized", got.Title)
	assert.Equal(t, models.StateUpdated, got.ProcessingState)
}

// clockedEvent is one event of a generated lifecycle, with its true clock.
type clockedEvent struct {
	clock time.Time
	d     amqp.Delivery
}

// TestRowsFollowClockOrderUnderAnyDeliveryOrder is the property the entity clock exists for: for random
// lifecycles of pull requests, issues and comments, with distinct clocks, delivering
// their events in a random order and random batches leaves the rows that delivering them
// in clock order leaves (the ledger included). What is left out is not a function of the
// events but of their arrival: delivery_id names the delivery that created the row, which
// is the first to arrive; processing_version counts the states set on the row, and an
// event that arrives before a newer one sets a state that in clock order it would not;
// github_users has no clock (a sender carries none) and keeps queue order.
func TestRowsFollowClockOrderUnderAnyDeliveryOrder(t *testing.T) {
	shuffled, inOrder := twinEnvs(t)
	seed, rng := seeded(t, 20)
	ctx := context.Background()
	tables := []string{"github_deliveries", "github_pull_requests", "github_issues", "github_comments"}
	for round := range 20 {
		for _, e := range []*env{shuffled, inOrder} {
			require.NoError(t, e.db.Exec("TRUNCATE "+joinTables()).Error)
		}
		var events []clockedEvent
		for k := range 2 {
			events = append(events, trackedLifecycle(t, rng, "pull_request", fmt.Sprintf("r%d-pr%d", round, k))...)
			events = append(events, trackedLifecycle(t, rng, "issues", fmt.Sprintf("r%d-is%d", round, k))...)
			events = append(events, commentLifecycle(t, rng, fmt.Sprintf("r%d-c%d", round, k))...)
		}
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		for start := 0; start < len(events); {
			end := min(len(events), start+1+rng.IntN(12))
			batch := make([]amqp.Delivery, 0, end-start)
			for _, ev := range events[start:end] {
				batch = append(batch, ev.d)
			}
			_, err := shuffled.ing.ForBroker(0).HandleBatch(ctx, queue, batch)
			require.NoError(t, err)
			start = end
		}
		slices.SortStableFunc(events, func(a, b clockedEvent) int { return a.clock.Compare(b.clock) })
		for _, ev := range events {
			_, err := inOrder.ing.ForBroker(0).HandleBatch(ctx, queue, []amqp.Delivery{ev.d})
			require.NoError(t, err)
		}
		for _, table := range tables {
			want, got := dumpWithout(t, inOrder, table, "delivery_id", "processing_version"), dumpWithout(t, shuffled, table, "delivery_id", "processing_version")
			if table == "github_deliveries" {
				want, got = dump(t, inOrder, table), dump(t, shuffled, table)
			}
			require.NotEmpty(t, want)
			require.Equal(t, want, got, "round %d (seed %d): %s differs from delivery in clock order", round, seed, table)
		}
	}
}

// dumpWithout is dump with the columns left out.
func dumpWithout(t *testing.T, e *env, table string, columns ...string) []string {
	t.Helper()
	var rows []string
	row := "to_jsonb(t)"
	for range columns {
		row += " - ?"
	}
	args := make([]any, len(columns))
	for i, c := range columns {
		args[i] = c
	}
	require.NoError(t, e.db.Raw("SELECT ("+row+")::text AS j FROM "+table+" t ORDER BY 1", args...).Scan(&rows).Error)
	return rows
}

// trackedLifecycle is a random lifecycle of one pull request (event "pull_request") or
// issue ("issues"): opened, then closes and reopens in turn among other actions, each
// payload with the state, title, head and sender GitHub would send at that moment, and
// clocks a few seconds apart.
func trackedLifecycle(t *testing.T, rng *rand.Rand, event, nodeID string) []clockedEvent {
	t.Helper()
	key, others := "pull_request", []string{"synchronize", "labeled", "edited"}
	if event == "issues" {
		key, others = "issue", []string{"edited", "labeled"}
	}
	clock := time.Date(2019, 5, 15, 15, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(600)) * time.Second)
	state := stateOpen
	var out []clockedEvent
	for i := range 3 + rng.IntN(8) {
		action := others[rng.IntN(len(others))]
		switch {
		case i == 0:
			action = actionOpened
		case rng.IntN(3) == 0 && state == stateOpen:
			action, state = actionClosed, stateClosed
		case rng.IntN(3) == 0 && state == stateClosed:
			action, state = actionReopened, stateOpen
		}
		clock = clock.Add(time.Duration(1+rng.IntN(90)) * time.Second)
		body := edit(t, example(t, event+".opened.0"), func(p map[string]any) {
			p["action"] = action
			o := object(p, key)
			o["node_id"] = nodeID
			o["state"] = state
			o["title"] = fmt.Sprintf("%s at %d", nodeID, i)
			o["updated_at"] = clock.Format(time.RFC3339)
			o["closed_at"] = nil
			if state == stateClosed {
				o["closed_at"] = clock.Format(time.RFC3339)
			}
			if event == "pull_request" {
				object(o, "head")["sha"] = fmt.Sprintf("%040d", rng.IntN(1_000_000))
			}
			object(p, "sender")["login"] = []string{"alice", "bob"}[rng.IntN(2)]
		})
		out = append(out, clockedEvent{clock, delivery(event, fmt.Sprintf("%s-%d", nodeID, i), body)})
	}
	return out
}

// commentLifecycle is a comment created and then edited a few times.
func commentLifecycle(t *testing.T, rng *rand.Rand, nodeID string) []clockedEvent {
	t.Helper()
	clock := time.Date(2019, 5, 15, 15, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(600)) * time.Second)
	var out []clockedEvent
	for i := range 1 + rng.IntN(4) {
		action := "edited"
		if i == 0 {
			action = actionCreated
		}
		clock = clock.Add(time.Duration(1+rng.IntN(90)) * time.Second)
		body := edit(t, example(t, "issue_comment."+action+".0"), func(p map[string]any) {
			c := object(p, "comment")
			c["node_id"] = nodeID
			c["body"] = fmt.Sprintf("%s at %d", nodeID, i)
			c["updated_at"] = clock.Format(time.RFC3339)
			object(p, "sender")["login"] = []string{"alice", "bob"}[rng.IntN(2)]
		})
		out = append(out, clockedEvent{clock, delivery("issue_comment", fmt.Sprintf("%s-%d", nodeID, i), body)})
	}
	return out
}

// One event stamped in the far future (updated_at 9999-12-31) became the row's clock, and
// every later real event was older than it: it changed only the ledger, for good. A clock
// past now + the allowed skew is now unreadable: that event is applied in queue order as
// one without a clock, counted and logged, and the real events after it apply.
func TestAClockFromTheFutureIsUnreadable(t *testing.T) {
	e := newEnv(t)
	m, reg := metricstest.New()
	e.ing.Metrics = m
	logs := &testenv.Buffer{}
	e.ing.Logger = slog.New(slog.NewTextHandler(logs, nil))
	now := e.clock.Now()
	pr := func(name, clock, title string) []byte {
		return edit(t, example(t, "pull_request."+name+".0"), func(p map[string]any) {
			object(p, "pull_request")["updated_at"] = clock
			object(p, "pull_request")["title"] = title
		})
	}
	rfc := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }

	e.handle(t, delivery("pull_request", "o", pr("opened", rfc(now.Add(-time.Hour)), "opened")))
	e.handle(t, delivery("pull_request", "f", pr("closed", "9999-12-31T23:59:59Z", "forged")))
	got := e.pullRequest(t)
	assert.Equal(t, "f", got.LastDeliveryID, "applied in queue order")
	assert.Equal(t, "closed", got.State)
	require.NotNil(t, got.EntityClock)
	assert.Equal(t, now.Add(-time.Hour).Truncate(time.Second), got.EntityClock.UTC(), "the row keeps its clock")
	assert.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_clock_fallbacks_total", "table", "github_pull_requests", "reason", metrics.ClockFuture), 0)
	assert.Contains(t, logs.String(), "entity clock in the future")
	assert.Contains(t, logs.String(), "delivery_id=f")

	e.handle(t, delivery("pull_request", "r", pr("reopened", rfc(now.Add(-time.Minute)), "reopened")))
	got = e.pullRequest(t)
	assert.Equal(t, "r", got.LastDeliveryID, "a real event after the forged one applies")
	assert.Equal(t, "open", got.State)

	// Within the skew, a clock ahead of ours is a clock.
	ahead := e.clock.Now().Add(3 * time.Minute)
	e.handle(t, delivery("pull_request", "s", pr("synchronize", rfc(ahead), "ahead")))
	got = e.pullRequest(t)
	assert.Equal(t, ahead.Truncate(time.Second), got.EntityClock.UTC())
	assert.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_clock_fallbacks_total", "table", "github_pull_requests", "reason", metrics.ClockFuture), 0)
}
