package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// keyColumn is a table's primary key column and its SQL type.
type keyColumn struct{ name, sqlType string }

// keys are the typed tables with a one-column key. github_branches, keyed by
// (repository_id, ref_type, ref), follows the same protocol with that key.
func keys() map[string]keyColumn {
	return map[string]keyColumn{
		"github_pull_requests": {"node_id", "text"},
		"github_issues":        {"node_id", "text"},
		"github_comments":      {"node_id", "text"},
		"github_pushes":        {"delivery_id", "text"},
		"github_installations": {"id", "bigint"},
		"github_repositories":  {"id", "bigint"},
		"github_users":         {"id", "bigint"},
	}
}

// Claim is one row a reader took: what brokerswitch had marked it (NEW, RE_REQUESTED,
// UPDATED, or PROCESSING for a claim whose reader went silent past the lease), the version
// it was claimed at, and the row as it was then.
type Claim struct {
	Key     string
	State   string
	Version int64
	Row     json.RawMessage
}

// Reader claims the rows of one typed table and marks them done.
type Reader struct {
	DB    *pgxpool.Pool
	Table string
	// Lease is how long a claim stands before another reader may take the row again; keep
	// it well above the longest processing of one batch.
	Lease time.Duration
}

// names returns the table and key identifiers, quoted, and the key's type, or an error
// for a table it does not know.
func (r *Reader) names() (table, key, keyType string, err error) {
	k, ok := keys()[r.Table]
	if !ok {
		return "", "", "", fmt.Errorf("no one-column key known for table %q", r.Table)
	}
	return pgx.Identifier{r.Table}.Sanitize(), pgx.Identifier{k.name}.Sanitize(), k.sqlType, nil
}

// Claim takes up to limit rows waiting for a reader, oldest change first, and marks them
// PROCESSING in one short transaction. SKIP LOCKED lets readers claim side by side, each
// passing over the rows another one (or brokerswitch applying an event) holds at that
// moment. processed_date holds the claim's time while the row is PROCESSING.
func (r *Reader) Claim(ctx context.Context, limit int) ([]Claim, error) {
	table, key, _, err := r.names()
	if err != nil {
		return nil, err
	}
	//nolint:gosec // identifiers come from keys(), quoted; the values are bound
	q := fmt.Sprintf(`WITH picked AS (
		SELECT %[2]s AS k, processing_state FROM %[1]s
		 WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED')
		    OR (processing_state = 'PROCESSING' AND processed_date < now() - $2::interval)
		 ORDER BY processing_date LIMIT $1
		 FOR UPDATE SKIP LOCKED)
	UPDATE %[1]s t SET processing_state = 'PROCESSING', processed_date = now()
	  FROM picked WHERE t.%[2]s = picked.k
	RETURNING t.%[2]s::text, picked.processing_state, t.processing_version, to_jsonb(t)`, table, key)
	rows, err := r.DB.Query(ctx, q, limit, r.Lease.String())
	if err != nil {
		return nil, fmt.Errorf("claim rows of %s: %w", r.Table, err)
	}
	claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claim, error) {
		var c Claim
		err := row.Scan(&c.Key, &c.State, &c.Version, &c.Row)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim rows of %s: %w", r.Table, err)
	}
	return claims, nil
}

// Finish marks a claimed row PROCESSED, unless brokerswitch applied an event to it since
// the claim: the event set another state and a new version, and the row stays as the
// event left it, to be claimed again. It reports whether the row was marked.
func (r *Reader) Finish(ctx context.Context, c Claim) (bool, error) {
	table, key, keyType, err := r.names()
	if err != nil {
		return false, err
	}
	//nolint:gosec // identifiers and the type come from keys(), quoted; the values are bound
	q := fmt.Sprintf(`UPDATE %s SET processing_state = 'PROCESSED', processed_date = now()
		WHERE %s = $1::%s AND processing_state = 'PROCESSING' AND processing_version = $2`, table, key, keyType)
	tag, err := r.DB.Exec(ctx, q, c.Key, c.Version)
	if err != nil {
		return false, fmt.Errorf("finish %s %s: %w", r.Table, c.Key, err)
	}
	return tag.RowsAffected() == 1, nil
}
