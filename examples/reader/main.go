// Command reader is an example reader of brokerswitch's typed tables: it claims rows that
// brokerswitch marked NEW, RE_REQUESTED or UPDATED, hands each to its work (here: a log
// line), and marks it PROCESSED without erasing an event applied meanwhile. It follows
// the contract in docs/tables.md ("Reading the typed tables") and depends on nothing of
// brokerswitch but the schema.
//
//	DATABASE_URL=postgres://... READER_TABLE=github_pull_requests go run ./examples/reader
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	err := run(ctx, logger, os.Getenv)
	stop()
	if err != nil {
		logger.Error("reader stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, getenv func(string) string) error {
	dsn, table := getenv("DATABASE_URL"), getenv("READER_TABLE")
	if dsn == "" {
		return errors.New("DATABASE_URL is not set")
	}
	if table == "" {
		table = "github_pull_requests"
	}
	if _, ok := keys()[table]; !ok {
		return fmt.Errorf("READER_TABLE: %q is not a typed table with a one-column key", table)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to Postgres: %w", err)
	}
	defer pool.Close()
	r := &Reader{DB: pool, Table: table, Lease: 5 * time.Minute}
	return r.Loop(ctx, 100, time.Second, func(_ context.Context, c Claim) error {
		logger.InfoContext(ctx, "row", "table", table, "key", c.Key, "state", c.State, "version", c.Version)
		return nil
	})
}

// Loop claims batches of up to limit rows and hands each row to work, until ctx ends;
// it waits idle between claims that find nothing. A row whose work fails is left
// PROCESSING and taken again once its lease ends.
func (r *Reader) Loop(ctx context.Context, limit int, idle time.Duration, work func(context.Context, Claim) error) error {
	for {
		claims, err := r.Claim(ctx, limit)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, c := range claims {
			if err := work(ctx, c); err != nil {
				continue
			}
			if _, err := r.Finish(ctx, c); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		if len(claims) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(idle):
		}
	}
}
