package ingest

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// At a few milliseconds from Postgres each round trip costs more than the CPU of a
// statement, so a batch's statements are sent in as few exchanges as their dependencies
// allow: everything that needs no answer of another (the ledger claim, the payload
// hashes, the locked reads of every table) in one, the writes that the reads decide and
// the commit in the next. statements is where a statement goes: a pipeline that sends what
// was queued in one exchange, or, where a test or a lone statement calls it, a gorm
// transaction that runs each at once.

// rowScanner is the rows of one statement, as pgx and database/sql both have them.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
}

// statements runs SQL with $n placeholders. A statement's scan, when not nil, reads its
// rows; it runs once the statement's answer is in, by send at the latest.
type statements interface {
	add(sql string, args []any, scan func(rowScanner) error)
	// send runs what was added and returns the first error; nothing added after a failed
	// statement runs.
	send() error
}

// pipeline queues statements on a connection and sends them to pgx as one exchange (its
// batch: one Sync, so a failure skips the rest and the transaction is left to roll back).
type pipeline struct {
	ctx   context.Context
	conn  *sql.Conn
	batch *pgx.Batch
}

func (p *pipeline) add(sql string, args []any, scan func(rowScanner) error) {
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

func (p *pipeline) send() error {
	if p.batch.Len() == 0 {
		return nil
	}
	b := p.batch
	p.batch = &pgx.Batch{}
	return p.raw(func(c *pgx.Conn) error { return c.SendBatch(p.ctx, b).Close() })
}

// raw runs f on the pgx connection underneath.
func (p *pipeline) raw(f func(*pgx.Conn) error) error {
	return p.conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("database driver %T is not pgx's", driverConn)
		}
		return f(c.Conn())
	})
}

// inGorm runs each statement at once in a gorm session or transaction.
type inGorm struct {
	ctx context.Context
	db  *gorm.DB
	err error
}

func (g *inGorm) add(query string, args []any, scan func(rowScanner) error) {
	if g.err != nil {
		return
	}
	pool := g.db.Statement.ConnPool
	if scan == nil {
		_, g.err = pool.ExecContext(g.ctx, query, args...)
		return
	}
	var rows *sql.Rows
	if rows, g.err = pool.QueryContext(g.ctx, query, args...); g.err != nil {
		return
	}
	defer rows.Close()
	if g.err = scan(rows); g.err == nil {
		g.err = rows.Err()
	}
}

func (g *inGorm) send() error {
	err := g.err
	g.err = nil
	return err
}

// rollbackTimeout bounds the rollback of a failed transaction, whose ctx may be over.
const rollbackTimeout = 5 * time.Second

// inTx runs f between BEGIN and COMMIT on one connection of db's pool, BEGIN queued ahead
// of f's first exchange and COMMIT behind its last, so that neither costs a round trip of
// its own. f sends the exchanges it needs but the last, which inTx sends with the COMMIT.
// A failure rolls the transaction back.
func inTx(ctx context.Context, db *gorm.DB, f func(*pipeline) error) error {
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("database handle: %w", err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	p := &pipeline{ctx: ctx, conn: conn, batch: &pgx.Batch{}}
	// The isolation is said, not left to the database's default: under REPEATABLE READ the
	// active-broker check would read a snapshot taken before its lock.
	p.add("begin isolation level read committed", nil, nil)
	err = f(p)
	if err == nil {
		p.add("commit", nil, nil)
		err = p.send()
	}
	status := p.raw(func(c *pgx.Conn) error {
		if c.IsClosed() || c.PgConn().TxStatus() == 'I' {
			return nil
		}
		if err == nil {
			return fmt.Errorf("transaction still open after commit (status %q)", c.PgConn().TxStatus())
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if _, rerr := c.Exec(rctx, "rollback"); rerr != nil {
			// The connection is in an unknown state: close it rather than let the pool hand
			// it out again.
			_ = c.Close(rctx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return status
}
