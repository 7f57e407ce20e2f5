//go:build integration

package ingest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// BenchmarkHandleBatch compares one transaction per batch of 100 deliveries with one
// transaction per delivery, on a mix of new pull requests, comments and pushes.
func BenchmarkHandleBatch(b *testing.B) {
	const perRound = 100
	for _, batchSize := range []int{1, perRound} {
		b.Run(fmt.Sprintf("batch=%d", batchSize), func(b *testing.B) {
			e := newEnv(b)
			h := e.ing.ForBroker(0)
			ctx := context.Background()
			rounds := make([][]amqp.Delivery, b.N)
			for i := range rounds {
				rounds[i] = benchDeliveries(b, i, perRound)
			}
			b.ResetTimer()
			for _, ds := range rounds {
				for start := 0; start < len(ds); start += batchSize {
					if _, err := h.HandleBatch(ctx, queue, ds[start:start+batchSize]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*perRound)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkHandleBatchUpdates applies batches of 100 deliveries that change rows that
// exist (34 pull requests and 33 comments beside 33 new pushes), with each payload's clock
// newer than the last round's and, for the baseline, with the clock removed: the path
// where the fold compares each event's clock with its row's, against the queue-order path
// of the same statements.
func BenchmarkHandleBatchUpdates(b *testing.B) {
	for _, clocked := range []bool{false, true} {
		b.Run(fmt.Sprintf("clock=%t", clocked), func(b *testing.B) {
			const perRound = 100
			e := newEnv(b)
			h := e.ing.ForBroker(0)
			ctx := context.Background()
			rounds := make([][]amqp.Delivery, b.N+1)
			for i := range rounds {
				rounds[i] = benchUpdates(b, i, perRound, clocked)
			}
			if _, err := h.HandleBatch(ctx, queue, rounds[0]); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for _, ds := range rounds[1:] {
				if _, err := h.HandleBatch(ctx, queue, ds); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*perRound)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// benchUpdates returns n deliveries for round that hit the same pull requests and
// comments every round, stamped round minutes after a fixed instant, or without their
// clock unless clocked.
func benchUpdates(t testing.TB, round, n int, clocked bool) []amqp.Delivery {
	sync := example(t, "pull_request.synchronize.0")
	comment := example(t, "issue_comment.edited.0")
	push := example(t, "push.none.4")
	clock := time.Date(2019, 5, 15, 0, 0, 0, 0, time.UTC).Add(time.Duration(round) * time.Minute).Format(time.RFC3339)
	out := make([]amqp.Delivery, 0, n)
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("u%d-%d", round, i)
		switch i % 3 {
		case 0:
			out = append(out, delivery("pull_request", id, edit(t, sync, func(p map[string]any) {
				pr := object(p, "pull_request")
				pr["node_id"], pr["updated_at"] = fmt.Sprintf("PR_%d", i), clock
				if !clocked {
					delete(pr, "updated_at")
				}
			})))
		case 1:
			out = append(out, delivery("issue_comment", id, edit(t, comment, func(p map[string]any) {
				c := object(p, "comment")
				c["node_id"], c["updated_at"] = fmt.Sprintf("IC_%d", i), clock
				if !clocked {
					delete(c, "updated_at")
				}
			})))
		default:
			out = append(out, delivery("push", id, push))
		}
	}
	return out
}

// benchDeliveries returns n distinct deliveries for round: each creates its own row.
func benchDeliveries(t testing.TB, round, n int) []amqp.Delivery {
	opened := example(t, "pull_request.opened.0")
	comment := example(t, "issue_comment.created.0")
	push := example(t, "push.none.4")
	out := make([]amqp.Delivery, 0, n)
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("r%d-%d", round, i)
		switch i % 3 {
		case 0:
			out = append(out, delivery("pull_request", id, edit(t, opened, func(p map[string]any) {
				object(p, "pull_request")["node_id"] = "PR_" + id
			})))
		case 1:
			out = append(out, delivery("issue_comment", id, edit(t, comment, func(p map[string]any) {
				object(p, "comment")["node_id"] = "IC_" + id
			})))
		default:
			out = append(out, delivery("push", id, push))
		}
	}
	return out
}

// BenchmarkDecode decodes the vendored payloads of the events that have a table, with
// Decode and with what Decode did before it read only the stored fields (go-github's
// ParseWebHook into its full types), so that one run gives the ratio.
func BenchmarkDecode(b *testing.B) {
	var ds []amqp.Delivery
	for _, e := range payloads.All() {
		if appliers[e.Event] != nil {
			ds = append(ds, delivery(e.Event, "d-"+e.Name, e.Body))
		}
	}
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := Decode(ds[i%len(ds)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-github ParseWebHook", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			d := ds[i%len(ds)]
			if _, err := github.ParseWebHook(d.Headers[HeaderEvent].(string), d.Body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandleBatchBesideALedger applies the batches of BenchmarkHandleBatch, with
// GitHub's time-based delivery ids, beside an empty ledger and beside one that holds
// LEDGER_ROWS rows (default a million; `make bench` asks for ten) written in SQL first:
// the ledger's unique key must not make a long-lived deployment slower.
func BenchmarkHandleBatchBesideALedger(b *testing.B) {
	rows := int64(1_000_000)
	if v := os.Getenv("LEDGER_ROWS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("LEDGER_ROWS: %v", err)
		}
		rows = n
	}
	for _, filled := range []int64{0, rows} {
		b.Run(fmt.Sprintf("rows=%d", filled), func(b *testing.B) {
			e := newEnv(b)
			fillLedger(b, e.db, filled)
			h := e.ing.ForBroker(0)
			ctx := context.Background()
			rounds := make([][]amqp.Delivery, b.N)
			for i := range rounds {
				rounds[i] = benchDeliveries(b, i, 100)
				for _, d := range rounds[i] {
					d.Headers[HeaderDelivery] = payloads.NewDeliveryID()
				}
			}
			b.ResetTimer()
			for _, ds := range rounds {
				if _, err := h.HandleBatch(ctx, queue, ds); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
			if filled > 0 {
				var size int64
				require.NoError(b, e.db.Raw("SELECT pg_total_relation_size('github_deliveries')").Scan(&size).Error)
				b.ReportMetric(float64(size)/float64(filled), "ledger-B/row")
			}
		})
	}
}

// fillLedger writes rows applied deliveries, received 50 ms apart up to now, a million per
// statement, their ids version-1 GUIDs stamped with that time as GitHub's are; then
// VACUUM ANALYZE leaves the table as autovacuum would, and a checkpoint writes it out.
// The indexes are built after the rows: inserted one by one, ten million random keys
// take about 20 minutes on a busy 2-CPU machine, against a few minutes this way.
func fillLedger(t testing.TB, db *gorm.DB, rows int64) {
	t.Helper()
	if rows == 0 {
		return
	}
	exec := func(what, sql string, args ...any) { require.NoError(t, db.Exec(sql, args...).Error, what) }
	exec("drop the ledger's indexes", `DROP INDEX github_deliveries_key_idx;
		DROP INDEX github_deliveries_received_at_idx; DROP INDEX github_deliveries_errors_idx`)
	// time_low-time_mid-1time_hi-clock_seq-node of the 60-bit count of 100 ns since
	// 1582-10-15, a random clock sequence of the RFC variant, a random node.
	const id = `(SELECT substr(t, 8, 8) || '-' || substr(t, 4, 4) || '-1' || substr(t, 1, 3) || '-' ||
			to_hex(32768 + (random() * 16383)::int) || '-' || substr(md5(g::text), 1, 12)
		FROM (SELECT lpad(to_hex((extract(epoch FROM at) * 10000000)::bigint + 122192928000000000), 15, '0') AS t) AS stamp)`
	for from := int64(1); from <= rows; from += 1_000_000 {
		exec("fill the ledger", `INSERT INTO github_deliveries
			(delivery_id, event, action, queue, broker_index, outcome, received_at, applied_at, payload_sha256)
			SELECT `+id+`, 'pull_request', 'synchronize', 'pull_requests', 0, 'applied', at, at, sha256(g::text::bytea)
			  FROM generate_series(?::bigint, ?::bigint) g, LATERAL (SELECT now() - (? - g) * interval '50 milliseconds' AS at) AS received`,
			from, min(from+999_999, rows), rows)
	}
	// The indexes of the migrations, under their names.
	exec("index the ledger", `CREATE UNIQUE INDEX github_deliveries_key_idx ON github_deliveries (github_delivery_key(delivery_id));
		CREATE INDEX github_deliveries_received_at_idx ON github_deliveries (received_at);
		CREATE INDEX github_deliveries_errors_idx ON github_deliveries (received_at) WHERE outcome = 'error'`)
	exec("vacuum the ledger", "VACUUM ANALYZE github_deliveries")
	// A fill is gigabytes of dirty pages; without a checkpoint here the batches timed next
	// share the disk with Postgres writing them out, and each run beside a fresh fill read
	// slower than the last.
	exec("write the fill out", "CHECKPOINT")
}
