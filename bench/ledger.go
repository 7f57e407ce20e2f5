package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// ledgerResult is the apply rate beside an empty ledger and beside a ledger of Rows rows
// (written in SQL, not through RabbitMQ), and what each table costs per event.
type ledgerResult struct {
	Rows int64
	// RandomIDs tells that the ids were random version-4 GUIDs, not GitHub's time-based ones.
	RandomIDs bool `json:",omitempty"`
	Fill      time.Duration
	// Empty and Full are the apply rates (events/s) per run, in the same run order.
	Empty, Full []float64
	// FullLedgerBytes is github_deliveries' size beside the full ledger, indexes included.
	FullLedgerBytes int64
	// Tables are the sizes in the empty-ledger database after every run, per table.
	Tables []tableSize
	// Events is how many events the empty-ledger database applied.
	Events int
}

// tableSize is a table's size with its indexes and TOAST.
type tableSize struct {
	Name  string
	Rows  int64
	Bytes int64
}

// runLedger applies the same corpus, in batches of 100 per queue as a window commits them,
// through the ingester (no broker: the figure is Postgres') to two databases: one with an
// empty ledger and one whose ledger holds rows rows first.
func runLedger(s *figure, events, runs int, rows int64, randomIDs bool) ledgerResult {
	ctx := context.Background()
	empty, full := ledgerDatabase(s), ledgerDatabase(s)
	res := ledgerResult{Rows: rows, RandomIDs: randomIDs, Events: 200}
	res.Fill = fillLedger(s, full, rows, randomIDs)
	corpusOf := func(n int) []payloads.Event {
		evs := s.corpus(n)
		if randomIDs {
			for i := range evs {
				evs[i].DeliveryID = uuid.NewString()
			}
		}
		return evs
	}
	// A first batch opens the pool's connections and fills the caches of both databases.
	applyCorpus(s, empty, corpusOf(200))
	applyCorpus(s, full, corpusOf(200))
	type side struct {
		db    *gorm.DB
		rates *[]float64
		name  string
	}
	sides := []side{{empty, &res.Empty, "empty ledger"}, {full, &res.Full, fmt.Sprintf("%s-row ledger", commas(rows))}}
	for r := 1; r <= runs; r++ {
		// The two take turns going first, so that drift on the machine hits both.
		slices.Reverse(sides)
		for _, side := range sides {
			rate := applyCorpus(s, side.db, corpusOf(events))
			s.logf("ledger: %s run %d: %.0f events/s", side.name, r, rate)
			*side.rates = append(*side.rates, rate)
		}
		res.Events += events
	}
	s.check(full.WithContext(ctx).Raw("SELECT pg_total_relation_size('github_deliveries')").Scan(&res.FullLedgerBytes).Error, "ledger size")
	for _, name := range models.GitHubTables() {
		var size struct{ Rows, Bytes int64 }
		// name comes from models.GitHubTables.
		s.check(empty.WithContext(ctx).Raw("SELECT count(*) AS rows, pg_total_relation_size(?::regclass) AS bytes FROM "+name, name).
			Scan(&size).Error, "size of "+name)
		res.Tables = append(res.Tables, tableSize{Name: name, Rows: size.Rows, Bytes: size.Bytes})
	}
	return res
}

// ledgerDatabase is a fresh migrated database, dropped when s closes.
func ledgerDatabase(s *figure) *gorm.DB {
	db, dsn := modelstest.NewDB(s)
	s.cpu.ownDatabase(dsn)
	return db
}

// fillLedger writes rows ledger rows of applied deliveries, received 50 ms apart up to
// now, a million per statement; then VACUUM ANALYZE leaves the table as autovacuum would.
// Their ids are GUIDs as GitHub's X-GitHub-Delivery are, version 1 stamped with the time
// they were received (payloads.NewDeliveryID), or random version-4 ones with randomIDs.
// The indexes are built after the rows: inserted one by one, ten million random keys take
// about 20 minutes on a busy 2-CPU machine (each first write of an index page after a
// checkpoint is a full page in the WAL), against a few minutes this way. A built index is
// denser than a grown one (its pages 90% full, not about 70%), which the measured inserts
// then split.
func fillLedger(s *figure, db *gorm.DB, rows int64, randomIDs bool) time.Duration {
	ctx := context.Background()
	start := time.Now()
	s.check(db.WithContext(ctx).Exec(`DROP INDEX github_deliveries_key_idx;
		DROP INDEX github_deliveries_received_at_idx; DROP INDEX github_deliveries_errors_idx`).Error, "drop the ledger's indexes")
	// A version-1 GUID: time_low-time_mid-1time_hi-clock_seq-node of the 60-bit count of
	// 100 ns since 1582-10-15, a random clock sequence of the RFC variant, a random node.
	id := `(SELECT substr(t, 8, 8) || '-' || substr(t, 4, 4) || '-1' || substr(t, 1, 3) || '-' ||
			to_hex(32768 + (random() * 16383)::int) || '-' || substr(md5(g::text), 1, 12)
		FROM (SELECT lpad(to_hex((extract(epoch FROM at) * 10000000)::bigint + 122192928000000000), 15, '0') AS t) AS stamp)`
	if randomIDs {
		id = "gen_random_uuid()::text"
	}
	const chunk = 1_000_000
	for from := int64(1); from <= rows; from += chunk {
		to := min(from+chunk-1, rows)
		s.check(db.WithContext(ctx).Exec(`INSERT INTO github_deliveries
			(delivery_id, event, action, queue, broker_index, outcome, received_at, applied_at, payload_sha256)
			SELECT `+id+`, 'pull_request', 'synchronize', 'pull_requests', 0, 'applied', at, at, sha256(g::text::bytea)
			  FROM generate_series(?::bigint, ?::bigint) g, LATERAL (SELECT now() - (? - g) * interval '50 milliseconds' AS at) AS received`,
			from, to, rows).Error, "fill the ledger")
		s.logf("ledger: %s of %s rows written (%s)", commas(to), commas(rows), time.Since(start).Round(time.Second))
	}
	// The indexes of migrations 0001 and 0008, under their names.
	s.check(db.WithContext(ctx).Exec(`CREATE UNIQUE INDEX github_deliveries_key_idx ON github_deliveries (github_delivery_key(delivery_id));
		CREATE INDEX github_deliveries_received_at_idx ON github_deliveries (received_at);
		CREATE INDEX github_deliveries_errors_idx ON github_deliveries (received_at) WHERE outcome = 'error'`).Error, "index the ledger")
	s.logf("ledger: indexed (%s)", time.Since(start).Round(time.Second))
	s.check(db.WithContext(ctx).Exec("VACUUM ANALYZE github_deliveries").Error, "vacuum the ledger")
	took := time.Since(start)
	s.logf("ledger: %s rows written and vacuumed in %s", commas(rows), took.Round(time.Second))
	return took
}

// applyCorpus applies events to db in batches of up to 100 consecutive events of one
// queue, the queues in turn, and returns the events applied per second.
func applyCorpus(s *figure, db *gorm.DB, events []payloads.Event) float64 {
	ctx := context.Background()
	h := (&ingest.Ingester{DB: db, MaxRetryCycles: 3, Now: time.Now}).ForBroker(0)
	byQueue := map[string][]amqp.Delivery{}
	var queues []string
	for _, ev := range events {
		if _, ok := byQueue[ev.Queue]; !ok {
			queues = append(queues, ev.Queue)
		}
		byQueue[ev.Queue] = append(byQueue[ev.Queue], amqp.Delivery{
			Headers: amqp.Table{ingest.HeaderEvent: ev.Event, ingest.HeaderDelivery: ev.DeliveryID},
			Body:    ev.Body,
		})
	}
	start := time.Now()
	for len(queues) > 0 {
		for _, q := range slices.Clone(queues) {
			ds := byQueue[q]
			n := min(100, len(ds))
			verdicts, err := h.HandleBatch(ctx, q, ds[:n])
			s.check(err, "apply a batch")
			for _, v := range verdicts {
				if v.Outcome != broker.Ack {
					s.Fatalf("a delivery of %s was not acknowledged: %+v", q, v)
				}
			}
			byQueue[q] = ds[n:]
			if len(byQueue[q]) == 0 {
				queues = slices.DeleteFunc(queues, func(x string) bool { return x == q })
			}
		}
	}
	return float64(len(events)) / time.Since(start).Seconds()
}

// ledgerRows adds the ledger figures to the table.
func (r *results) ledgerRows(add func(row), rep *report) {
	l := r.Ledger
	if l == nil || len(l.Empty) == 0 {
		return
	}
	e, f := median(l.Empty), median(l.Full)
	ok := f >= 0.8*e
	add(row{"Apply rate, empty ledger (ingester on Postgres, no broker; batches of 100)", fmt.Sprintf("%.0f events/s", e), spread(l.Empty, "%.0f"), "", "", ""})
	ids := "GitHub's time-based GUIDs"
	if l.RandomIDs {
		ids = "random v4 GUIDs"
	}
	add(row{fmt.Sprintf("Apply rate beside a %s-row ledger (%s; filled in SQL in %s)", commas(l.Rows), ids, l.Fill.Round(time.Second)),
		fmt.Sprintf("%.0f events/s", f), spread(l.Full, "%.0f"), fmt.Sprintf("%.2f× empty", f/e), "≥ 0.8× empty", status(ok)})
	rep.targets = append(rep.targets, fmt.Sprintf("Apply rate beside a %s-row ledger (%s) ≥ 80%% of the empty-ledger rate: %s (%.0f vs %.0f events/s, %.2f×).",
		commas(l.Rows), ids, status(ok), f, e, f/e))
	if l.Rows > 0 {
		add(row{fmt.Sprintf("  ledger bytes per row at %s rows, indexes included", commas(l.Rows)),
			fmt.Sprintf("%.0f B", float64(l.FullLedgerBytes)/float64(l.Rows)), fmt.Sprintf("%.2f GB in all", float64(l.FullLedgerBytes)/1e9), "", "", ""})
	}
	var total int64
	for _, t := range l.Tables {
		total += t.Bytes
	}
	add(row{fmt.Sprintf("Bytes per event in Postgres (%s events of the corpus)", commas(int64(l.Events))),
		fmt.Sprintf("%.0f B", float64(total)/float64(l.Events)), "all the tables below", "", "", ""})
	for _, t := range l.Tables {
		perRow := "—"
		if t.Rows > 0 {
			perRow = fmt.Sprintf("%.0f B per row", float64(t.Bytes)/float64(t.Rows))
		}
		add(row{fmt.Sprintf("  %s (%s rows)", t.Name, commas(t.Rows)), fmt.Sprintf("%.0f B", float64(t.Bytes)/float64(l.Events)), perRow, "", "", ""})
	}
}
