//go:build integration

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// TestOracleSeesWhatGoesWrong feeds the oracle a database where events were applied out
// of order, one twice and one never: zero differences must mean something.
func TestOracleSeesWhatGoesWrong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := auditedDatabase(t)

	msgs, err := simulate.Workload{PullRequests: 2, Issues: 2, Pushes: 3, Branches: 1, Installations: 1, Ignored: 1, Seed: 5}.Messages()
	require.NoError(t, err)
	var records []simulate.Record
	for i, m := range msgs {
		records = append(records, simulate.Record{Kind: simulate.KindPublish, Seq: int64(i + 1), Queue: m.Queue, Event: m.Event,
			Action: m.Action, Delivery: m.DeliveryID, Entity: m.Entity, Clock: m.Clock, State: m.State, At: time.Now()})
	}
	e := expect(records)

	// Applied as published, the oracle finds nothing.
	h := (&ingest.Ingester{DB: modelstest.NewPool(t, dsn), MaxRetryCycles: 1}).ForBroker(0)
	apply := func(ms ...simulate.Message) {
		for _, m := range ms {
			_, err := h.HandleBatch(ctx, m.Queue, []amqp.Delivery{{Headers: m.Headers(), Body: m.Body}})
			require.NoError(t, err)
		}
	}
	apply(msgs...)
	clean := e.check(t, db, nil, 0, simulate.DefaultQueues)
	require.Empty(t, clean.Diffs)
	require.Equal(t, len(msgs), clean.Applied)

	// Each queue as one batch, in one transaction: its ledger rows are claimed in delivery
	// id order, which is no order a reader can see, and the oracle finds nothing either.
	freshSchema(t, db)
	byQueue := map[string][]amqp.Delivery{}
	for _, m := range msgs {
		byQueue[m.Queue] = append(byQueue[m.Queue], amqp.Delivery{Headers: m.Headers(), Body: m.Body})
	}
	for q, batch := range byQueue {
		_, err := h.HandleBatch(ctx, q, batch)
		require.NoError(t, err)
	}
	batched := e.check(t, db, nil, 0, simulate.DefaultQueues)
	require.Empty(t, batched.Diffs)
	require.Equal(t, len(msgs), batched.Applied)

	// Again, on a fresh schema: the first pull request's closed before its synchronize,
	// the branch deleted before it was created, the last push never, and a comment
	// rewritten by the delivery that wrote it.
	freshSchema(t, db)
	pr, branch := msgs[firstOf(msgs, "pull_request")].Entity, msgs[firstOf(msgs, "create")].Entity
	var prEvents, branchEvents []int
	lastPush := -1
	for i, m := range msgs {
		switch {
		case m.Entity == pr:
			prEvents = append(prEvents, i)
		case m.Entity == branch:
			branchEvents = append(branchEvents, i)
		case m.Event == "push":
			lastPush = i
		}
	}
	reordered := append([]simulate.Message(nil), msgs...)
	for _, pair := range [][2]int{
		{prEvents[1], prEvents[len(prEvents)-1]},             // a synchronize and the final closed
		{branchEvents[0], branchEvents[len(branchEvents)-1]}, // create and delete
	} {
		reordered[pair[0]], reordered[pair[1]] = reordered[pair[1]], reordered[pair[0]]
	}
	reordered = slices.Delete(reordered, lastPush, lastPush+1)
	apply(reordered...)
	require.NoError(t, db.Exec(`UPDATE github_comments SET body = body || '!' WHERE node_id = (SELECT min(node_id) FROM github_comments)`).Error)

	v := e.check(t, db, nil, 0, simulate.DefaultQueues)
	joined := strings.Join(v.Diffs, "\n")
	require.Equal(t, 1, v.Lost, "%s", joined)
	require.Equal(t, 1, v.Duplicates, "%s", joined)
	require.GreaterOrEqual(t, v.OrderViolations, 3, "the branch's row and both queues: %s", joined)
	require.Contains(t, joined, branch+": got last delivery", "the difference names the entity")
	require.Contains(t, joined, msgs[lastPush].DeliveryID, "and the lost delivery")
	// The pull request's payloads carry their true clocks: its row ends right whatever the
	// order (only the queue's order shows the swap).
	require.NotContains(t, joined, pr+": got", "%s", joined)
}

// auditedDatabase is a database of the test's own, migrated, with the audit installed.
func auditedDatabase(t *testing.T) (*gorm.DB, string) {
	t.Helper()
	db, dsn := modelstest.NewDB(t)
	installAudit(t, db)
	return db, dsn
}

// freshSchema empties the database and migrates it again, with the audit installed.
func freshSchema(t *testing.T, db *gorm.DB) {
	t.Helper()
	sqlDB, err := db.DB()
	require.NoError(t, err)
	require.NoError(t, db.Exec(`DROP SCHEMA public CASCADE; CREATE SCHEMA public;`).Error)
	require.NoError(t, models.Migrate(context.Background(), sqlDB))
	installAudit(t, db)
}

func firstOf(msgs []simulate.Message, event string) int {
	for i, m := range msgs {
		if m.Event == event {
			return i
		}
	}
	return -1
}

// TestOracleExcusesOnlyWhatTheScheduleSays: a spare's leftovers applied after the active
// broker's newer events pass when an excuse names them (the unreachable spare of docs/tables.md, "What order cannot be kept"),
// and fail without it; with the excuse, an inversion among the active broker's own events,
// or among the spare's, still fails.
func TestOracleExcusesOnlyWhatTheScheduleSays(t *testing.T) {
	ctx := context.Background()
	db, dsn := auditedDatabase(t)
	pool := modelstest.NewPool(t, dsn)

	msgs, err := simulate.Workload{PullRequests: 3, Issues: 3, Pushes: 4, Branches: 2, Installations: 1, Seed: 11}.Messages()
	require.NoError(t, err)
	// The first half was published to broker 1, which became a spare holding it; the rest
	// to broker 0, the active broker.
	half := len(msgs) / 2
	var records []simulate.Record
	for i, m := range msgs {
		b := 0
		if i < half {
			b = 1
		}
		records = append(records, simulate.Record{Kind: simulate.KindPublish, Seq: int64(i + 1), Queue: m.Queue, Event: m.Event,
			Action: m.Action, Delivery: m.DeliveryID, Entity: m.Entity, Clock: m.Clock, State: m.State, Broker: b, At: time.Now()})
	}
	e := expect(records)
	spare := []excuse{{Broker: 1, From: 0, To: int64(half), Why: "cut as a spare holding leftovers"}}
	apply := func(order []int) {
		freshSchema(t, db)
		for _, i := range order {
			m := msgs[i]
			h := (&ingest.Ingester{DB: pool, MaxRetryCycles: 1}).ForBroker(records[i].Broker)
			_, err := h.HandleBatch(ctx, m.Queue, []amqp.Delivery{{Headers: m.Headers(), Body: m.Body}})
			require.NoError(t, err)
		}
	}
	indexes := func(from, to int) []int {
		var out []int
		for i := from; i < to; i++ {
			out = append(out, i)
		}
		return out
	}

	// The active broker read around the cut spare, whose leftovers come after.
	around := append(indexes(half, len(msgs)), indexes(0, half)...)
	apply(around)
	v := e.checkExcusing(t, db, nil, 0, simulate.DefaultQueues, spare)
	require.Empty(t, v.Diffs, "the excused inversion passes, rows as the arrival order leaves them")
	require.Positive(t, v.Excused)
	require.Zero(t, v.OrderViolations)
	require.Contains(t, v.excusedLine(spare), "broker 1's events among #1–#")

	strict := e.check(t, db, nil, 0, simulate.DefaultQueues)
	require.Positive(t, strict.OrderViolations, "without the excuse the same order fails")

	// An excuse covers neither the active broker's own order nor the spare's.
	sameQueue := func(from, to int) (int, int) {
		for i := from; i < to; i++ {
			for j := i + 1; j < to; j++ {
				if msgs[i].Queue == msgs[j].Queue {
					return i, j
				}
			}
		}
		t.Fatal("no two events of one queue")
		return 0, 0
	}
	for _, span := range [][2]int{{half, len(msgs)}, {0, half}} {
		i, j := sameQueue(span[0], span[1])
		order := append([]int(nil), around...)
		pi, pj := slices.Index(order, i), slices.Index(order, j)
		order[pi], order[pj] = order[pj], order[pi]
		apply(order)
		v := e.checkExcusing(t, db, nil, 0, simulate.DefaultQueues, spare)
		require.Positive(t, v.OrderViolations, "broker %d's own events swapped (#%d, #%d): %s", records[i].Broker, i+1, j+1, strings.Join(v.Diffs, "\n"))
		require.Contains(t, strings.Join(v.Diffs, "\n"), msgs[i].DeliveryID, "the difference names the delivery applied late")
	}
}
