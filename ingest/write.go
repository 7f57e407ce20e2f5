package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
)

// txBatch is what one transaction writes: a batch's ledger rows, the events that apply if
// the ledger claims them, and the checks that end the transaction.
type txBatch struct {
	now time.Time
	// ledger holds one row per delivery id of the batch.
	ledger []models.Delivery
	// events are the well-formed deliveries that own their ledger row, in queue order.
	events []Event
	// checks run last, just before the COMMIT: a failure of one rolls the batch back.
	checks []models.Check
}

// committed is what a batch's transaction learnt on its way to the COMMIT: the delivery
// ids the ledger claimed for it, and the stored hashes of the others.
type committed struct {
	claimed map[string]bool
	stored  map[string][]byte
}

// writeBatch applies b in one transaction on conn and returns what its ledger claim found.
// An error means nothing was committed.
//
// At a few milliseconds from Postgres each round trip costs more than the CPU of a
// statement, so the transaction is two pipelined exchanges, whatever the batch holds:
//  1. BEGIN, the ledger claim, and the read of the rows every event may change (locked,
//     but for github_users). Postgres runs them in order, so the reads lock rows after the
//     claim, as every consumer does: the ledger first, then the tables in their order.
//  2. The stored payload hashes of the ids the ledger did not claim (they decide a
//     verdict, never a write), the writes of the claimed events, folded onto the rows
//     read, the checks, and the COMMIT.
//
// The reads cannot wait for the claim's answer, so they read the rows of every event, a
// redelivery's included, which the writes then leave alone. Every statement's text is the
// same for any batch size (arrays and JSON as parameters), so the driver prepares it once
// per connection.
func writeBatch(ctx context.Context, conn *pgx.Conn, b txBatch) (committed, error) {
	w := writesOf(b.now, b.events)
	trace := broker.TraceOf(ctx)
	var tx committed
	var writing time.Time
	err := inTx(ctx, conn, func(p *pipeline) error {
		reading := time.Now()
		tx.claimed = queueClaim(p, b.ledger)
		reads := w.queueReads(p)
		if err := p.send(); err != nil {
			return err
		}
		trace.Add(broker.PhaseRead, reading)
		writing = time.Now()
		var claimed []Event
		var unclaimed []string
		for _, ev := range b.events {
			if tx.claimed[ev.DeliveryID] {
				claimed = append(claimed, ev)
			} else {
				unclaimed = append(unclaimed, ev.DeliveryID)
			}
		}
		if len(unclaimed) > 0 {
			// Redeliveries change nothing: the writes are those of the claimed events alone.
			w = writesOf(b.now, claimed)
		}
		tx.stored = queueHashes(p, unclaimed)
		if err := w.queueWrites(p, reads); err != nil {
			return err
		}
		for _, c := range b.checks {
			p.queue(c.Query, c.Args, nil)
		}
		return nil
	})
	if err != nil {
		return committed{}, err
	}
	trace.Add(broker.PhaseWrite, writing)
	return tx, nil
}

// batchSender sends a pgx batch: a connection, or a transaction of a test.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// pipeline queues statements and sends them to Postgres as one exchange (pgx's batch: one
// Sync, so a failure skips the rest and the transaction is left to roll back).
type pipeline struct {
	ctx   context.Context
	conn  batchSender
	batch *pgx.Batch
}

func newPipeline(ctx context.Context, conn batchSender) *pipeline {
	return &pipeline{ctx: ctx, conn: conn, batch: &pgx.Batch{}}
}

// queue adds a statement with $n placeholders; scan, when not nil, reads its rows once its
// answer is in, by send at the latest.
func (p *pipeline) queue(sql string, args []any, scan func(pgx.Rows) error) {
	q := p.batch.Queue(sql, args...)
	if scan != nil {
		q.Query(func(rows pgx.Rows) error {
			if err := scan(rows); err != nil {
				return err
			}
			return rows.Err()
		})
	}
}

// send runs what was queued and returns the first error; nothing queued after a failed
// statement runs.
func (p *pipeline) send() error {
	if p.batch.Len() == 0 {
		return nil
	}
	b := p.batch
	p.batch = &pgx.Batch{}
	return p.conn.SendBatch(p.ctx, b).Close()
}

// rollbackTimeout bounds the rollback of a failed transaction, whose ctx may be over.
const rollbackTimeout = 5 * time.Second

// inTx runs f between BEGIN and COMMIT on conn, BEGIN queued ahead of f's first exchange
// and COMMIT behind its last, so that neither costs a round trip of its own. f sends the
// exchanges it needs but the last, which inTx sends with the COMMIT. A failure rolls the
// transaction back.
func inTx(ctx context.Context, conn *pgx.Conn, f func(*pipeline) error) error {
	p := newPipeline(ctx, conn)
	// The isolation is said, not left to the database's default: under REPEATABLE READ the
	// active-broker check would read a snapshot taken before its lock.
	p.queue("begin isolation level read committed", nil, nil)
	err := f(p)
	if err == nil {
		p.queue("commit", nil, nil)
		err = p.send()
	}
	switch {
	case conn.IsClosed() || conn.PgConn().TxStatus() == 'I':
		return err
	case err == nil:
		return fmt.Errorf("transaction still open after commit (status %q)", conn.PgConn().TxStatus())
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if _, rerr := conn.Exec(rctx, "rollback"); rerr != nil {
		// The connection is in an unknown state: close it rather than let the pool hand it
		// out again.
		_ = conn.Close(rctx)
	}
	return err
}
