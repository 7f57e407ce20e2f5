// Package models holds the Postgres schema (versioned SQL migrations) and the gorm models
// of the tables brokerswitch writes. The broker state kept in them, and its rules, are
// package brokerstate.
package models

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// PoolConfig bounds what one process may take from Postgres. The zero value sets no
// bound, which suits migrations and tests.
type PoolConfig struct {
	// MaxOpenConns caps the connections of this process (0: no cap). Without a cap, a
	// burst of requests opens connections until Postgres refuses everyone, ingestion
	// included.
	MaxOpenConns int
	// StatementTimeout ends a statement that runs longer (0: none), so that a stuck query
	// cannot hold a connection of the capped pool forever.
	StatementTimeout time.Duration
	// LockTimeout ends a wait for a lock, the broker state's advisory lock included, that
	// lasts longer (0: none).
	LockTimeout time.Duration
	// IdleInTransactionTimeout ends a session that sits in an open transaction without a
	// statement for longer (0: never). A worker paused (SIGSTOP, a frozen VM) or cut off
	// between a batch's two exchanges holds its ledger claims and row locks until then: the
	// worker that takes its queues over would wait on them.
	IdleInTransactionTimeout time.Duration
	// DeadPeerTimeout is how soon each end of a connection gives a silent peer up (0: the
	// system's defaults, over two hours for an idle link): TCP keepalives on both sides
	// probe an idle link, and tcp_user_timeout bounds data left unacknowledged, so that
	// Postgres ends the session of a worker cut off by the network (a link gone silent
	// without closing), and the worker its half of it.
	DeadPeerTimeout time.Duration
	// Tracer watches every statement of the pool's connections (the benchmark counts
	// round trips with it); nil watches none.
	Tracer pgx.QueryTracer
}

// Open connects to Postgres through gorm, unbounded, and checks the connection with ctx.
func Open(ctx context.Context, dsn string) (*gorm.DB, error) {
	return OpenPool(ctx, dsn, PoolConfig{})
}

// OpenPool connects to Postgres through gorm with the pool's bounds, on a database/sql
// pool of its own, and checks the connection with ctx. The timeouts are session settings
// of every connection.
func OpenPool(ctx context.Context, dsn string, pool PoolConfig) (*gorm.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx quotes the DSN, password included, in its parse errors.
		return nil, fmt.Errorf("open postgres: the URL cannot be parsed")
	}
	pool.applyTo(cfg)
	sqlDB := stdlib.OpenDB(*cfg)
	if pool.MaxOpenConns > 0 {
		sqlDB.SetMaxOpenConns(pool.MaxOpenConns)
		sqlDB.SetMaxIdleConns(pool.MaxOpenConns)
	}
	db, err := onSQL(sqlDB)
	if err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return db, nil
}

// Connect opens a pgx pool to Postgres with the pool's bounds and checks it with ctx. A
// process opens one: package ingest writes through it, and gorm through OnPool, so that
// MaxOpenConns bounds both. The timeouts are session settings of every connection.
func Connect(ctx context.Context, dsn string, pool PoolConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx quotes the DSN, password included, in its parse errors.
		return nil, fmt.Errorf("open postgres: the URL cannot be parsed")
	}
	pool.applyTo(cfg.ConnConfig)
	cfg.MaxConns = math.MaxInt32
	if pool.MaxOpenConns > 0 {
		cfg.MaxConns = int32(min(pool.MaxOpenConns, math.MaxInt32)) //nolint:gosec // bounded just before
	}
	// Connections stay open until the pool closes, as database/sql keeps them: each one
	// holds the statements pgx prepared on it.
	cfg.MaxConnLifetime, cfg.MaxConnIdleTime = 0, math.MaxInt64
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return p, nil
}

// OnPool is gorm on the connections of p. Closing its *sql.DB leaves p open.
func OnPool(p *pgxpool.Pool) (*gorm.DB, error) {
	sqlDB := stdlib.OpenDBFromPool(p)
	db, err := onSQL(sqlDB)
	if err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	return db, nil
}

// applyTo sets the pool's session settings and dialer on every connection of cfg.
func (pool PoolConfig) applyTo(cfg *pgx.ConnConfig) {
	if pool.StatementTimeout > 0 {
		cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(pool.StatementTimeout.Milliseconds(), 10)
	}
	if pool.LockTimeout > 0 {
		cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(pool.LockTimeout.Milliseconds(), 10)
	}
	if pool.IdleInTransactionTimeout > 0 {
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(pool.IdleInTransactionTimeout.Milliseconds(), 10)
	}
	if pool.DeadPeerTimeout > 0 {
		detectDeadPeers(cfg, pool.DeadPeerTimeout)
	}
	cfg.Tracer = pool.Tracer
}

// onSQL is gorm on sqlDB.
func onSQL(sqlDB *sql.DB) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{
		Logger: logger.Discard,
		// Callers run their own transactions; gorm's implicit one per write only adds
		// round trips.
		SkipDefaultTransaction: true,
		// gorm's own ping ignores ctx; callers ping with theirs.
		DisableAutomaticPing: true,
		// PrepareStmt stays off: pgx already prepares and caches every statement per
		// connection, so gorm's cache would only prepare twice.
	})
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	return db, nil
}

// detectDeadPeers makes both ends of every connection give a silent peer up within about
// after: keepalive probes start after a third of it and three go unanswered, and data
// stays unacknowledged for at most after (tcp_user_timeout). Postgres takes them as
// session settings; the worker's side is its dialer.
func detectDeadPeers(cfg *pgx.ConnConfig, after time.Duration) {
	idle := max(after/3, time.Second)
	interval := max((after-idle)/3, time.Second)
	cfg.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(int(idle.Seconds()))
	cfg.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(int(interval.Seconds()))
	cfg.RuntimeParams["tcp_keepalives_count"] = "3"
	cfg.RuntimeParams["tcp_user_timeout"] = strconv.FormatInt(after.Milliseconds(), 10)
	dialer := &net.Dialer{
		Timeout:         cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: 3},
		Control:         userTimeout(after),
	}
	cfg.DialFunc = dialer.DialContext
}
