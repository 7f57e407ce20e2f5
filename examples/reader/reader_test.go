//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// setup is a migrated database, brokerswitch's ingester writing to it, and a pool for
// readers.
func setup(t *testing.T) (dsn string, pool *pgxpool.Pool, apply func(...amqp.Delivery)) {
	t.Helper()
	ctx := context.Background()
	_, dsn = modelstest.NewDB(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ing := (&ingest.Ingester{DB: modelstest.NewPool(t, dsn), Logger: slog.New(slog.DiscardHandler)}).ForBroker(0)
	apply = func(ds ...amqp.Delivery) {
		verdicts, err := ing.HandleBatch(ctx, "pull_requests", ds)
		require.NoError(t, err)
		require.Len(t, verdicts, len(ds))
	}
	return dsn, pool, apply
}

// pullRequestEvent is the vendored example of action with its node id and title replaced.
func pullRequestEvent(t *testing.T, action, delivery, node, title string) amqp.Delivery {
	t.Helper()
	var body []byte
	for _, e := range payloads.All() {
		if e.Name == "pull_request."+action+".0" {
			body = e.Body
		}
	}
	require.NotNil(t, body, action)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var p map[string]any
	require.NoError(t, dec.Decode(&p))
	pr := p["pull_request"].(map[string]any)
	pr["node_id"], pr["title"] = node, title
	out, err := json.Marshal(p)
	require.NoError(t, err)
	return amqp.Delivery{Headers: amqp.Table{ingest.HeaderEvent: "pull_request", ingest.HeaderDelivery: delivery}, Body: out}
}

func titleOf(t *testing.T, c Claim) string {
	var row struct{ Title string }
	require.NoError(t, json.Unmarshal(c.Row, &row))
	return row.Title
}

// Readers claim and finish pull requests while brokerswitch applies edits to them: no
// state of a row is claimed twice, a finish that comes after an edit leaves the row for
// the next claim, and once the edits stop every row's last edit was processed.
func TestConcurrentReadersLoseNoUpdate(t *testing.T) {
	_, pool, apply := setup(t)
	const prs, rounds, readers = 8, 40, 4
	node := func(i int) string { return fmt.Sprintf("PR_node_%d", i) }
	var opened []amqp.Delivery
	for i := range prs {
		opened = append(opened, pullRequestEvent(t, "opened", fmt.Sprintf("open-%d", i), node(i), "r0"))
	}
	apply(opened...)

	type seen struct {
		key     string
		version int64
	}
	var mu sync.Mutex
	claimed := map[seen]int{}
	finished := map[seen]string{} // the title the reader processed at that version
	refused := 0

	ctx, stopReaders := context.WithCancel(context.Background())
	defer stopReaders()
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	// applied counts the writer's rounds; writing ends when it stops.
	var applied atomic.Int64
	var writing atomic.Bool
	writing.Store(true)
	// editMeanwhile is the work of half the readers: it lasts until the writer has started
	// a round after the claim (two rounds on, as the claim may overlap one), so their
	// finishes come after an edit whatever the scheduling, while the other half race it.
	editMeanwhile := func(claimedAt int64) {
		deadline := time.Now().Add(10 * time.Second)
		for applied.Load() < claimedAt+2 && writing.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	for reader := range readers {
		wg.Go(func() {
			r := &Reader{DB: pool, Table: "github_pull_requests", Lease: time.Hour}
			for ctx.Err() == nil {
				claims, err := r.Claim(ctx, 3)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				claimedAt := applied.Load()
				for _, c := range claims {
					mu.Lock()
					claimed[seen{c.Key, c.Version}]++
					mu.Unlock()
					// The reader's work, during which brokerswitch may apply an edit.
					if reader%2 == 0 {
						editMeanwhile(claimedAt)
					}
					// A finish in flight completes when the readers are stopped: the
					// writer's wait ends once every row is PROCESSED, which can be before
					// this reader has read the answer of the finish that made it so.
					ok, err := r.Finish(context.WithoutCancel(ctx), c)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if ok {
						finished[seen{c.Key, c.Version}] = titleOf(t, c)
					} else {
						refused++
					}
					mu.Unlock()
				}
			}
		})
	}

	// A row PROCESSED at a version no reader claimed is an update a finish erased. The
	// claim is recorded before its finish runs, so the check never reads ahead of it.
	lost := make(chan string, 1)
	wg.Go(func() {
		for ctx.Err() == nil {
			rows, err := pool.Query(ctx, "SELECT node_id, processing_version FROM github_pull_requests WHERE processing_state = 'PROCESSED'")
			if err != nil {
				return
			}
			for rows.Next() {
				var s seen
				if rows.Scan(&s.key, &s.version) != nil {
					break
				}
				mu.Lock()
				ok := claimed[s] > 0
				mu.Unlock()
				if !ok {
					select {
					case lost <- fmt.Sprintf("%s PROCESSED at version %d, which no reader claimed", s.key, s.version):
					default:
					}
				}
			}
			rows.Close()
		}
	})

	// The writer: each round edits every pull request.
	for round := 1; round <= rounds; round++ {
		var ds []amqp.Delivery
		for i := range prs {
			ds = append(ds, pullRequestEvent(t, "synchronize", fmt.Sprintf("sync-%d-%d", round, i), node(i), fmt.Sprintf("r%d", round)))
		}
		apply(ds...)
		applied.Add(1)
	}
	writing.Store(false)

	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT count(*) FROM github_pull_requests WHERE processing_state <> 'PROCESSED'").Scan(&waiting))
		if waiting == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d rows never processed", waiting)
		time.Sleep(10 * time.Millisecond)
	}
	stopReaders()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	select {
	case l := <-lost:
		t.Fatalf("an update was lost: %s", l)
	default:
	}
	for s, n := range claimed {
		require.Equal(t, 1, n, "%s at version %d claimed %d times", s.key, s.version, n)
	}
	rows, err := pool.Query(context.Background(), "SELECT node_id, processing_version, title FROM github_pull_requests")
	require.NoError(t, err)
	defer rows.Close()
	count := 0
	for rows.Next() {
		var key, title string
		var version int64
		require.NoError(t, rows.Scan(&key, &version, &title))
		count++
		require.Equal(t, fmt.Sprintf("r%d", rounds), title)
		processed, ok := finished[seen{key, version}]
		require.True(t, ok, "%s is PROCESSED at version %d, which no reader finished: an update was lost", key, version)
		require.Equal(t, title, processed, "%s: the reader processed the last edit", key)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, prs, count)
	t.Logf("%d claims, %d finished, %d refused because an edit came first", len(claimed), len(finished), refused)
	require.Positive(t, refused, "the readers never raced the writer: the test proved nothing")
}

// The example command processes what brokerswitch wrote, and refuses a table it cannot read.
func TestRunProcessesRows(t *testing.T) {
	dsn, pool, apply := setup(t)
	apply(pullRequestEvent(t, "opened", "open-1", "PR_run", "hello"))

	var logs testenv.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, logger, func(k string) string { return map[string]string{"DATABASE_URL": dsn}[k] })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var state string
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT processing_state FROM github_pull_requests WHERE node_id = 'PR_run'").Scan(&state))
		if state == "PROCESSED" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the row stayed %s", state)
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, logs.String(), `"key":"PR_run","state":"NEW"`)

	err := run(context.Background(), logger, func(k string) string {
		return map[string]string{"DATABASE_URL": dsn, "READER_TABLE": "github_branches"}[k]
	})
	require.ErrorContains(t, err, "READER_TABLE")
}
