package ingest

import (
	"cmp"
	"context"
	"crypto/md5" //nolint:gosec // an index key that must match Postgres' md5(), not a secret
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/brokerswitch/brokerswitch/models"
)

// writes collects what one batch's events do to the typed tables, then writes it with a
// few statements per table. Events add their changes in queue order.
type writes struct {
	now           time.Time
	pullRequests  *rowSet[string, models.PullRequest]
	issues        *rowSet[string, models.Issue]
	comments      *rowSet[string, models.Comment]
	branches      *rowSet[branchKey, models.Branch]
	installations *rowSet[int64, models.Installation]
	repositories  *rowSet[int64, models.Repository]
	users         *rowSet[int64, models.User]
	// pushes are only ever inserted: each is keyed by its own delivery.
	pushes []models.Push
}

// branchKey is the primary key of github_branches.
type branchKey struct {
	repositoryID int64
	refType, ref string
}

// clockColumn is the entity clock of the tables whose rows follow GitHub's clock
// (clockOf, migration 0005).
const clockColumn = "entity_clock"

func newWrites(now time.Time) *writes {
	return &writes{
		now: now,
		pullRequests: newRowSet("github_pull_requests", func(r *models.PullRequest) string { return r.NodeID },
			strings.Compare, lockByKey[string]("node_id")).withClock(clockColumn),
		issues: newRowSet("github_issues", func(r *models.Issue) string { return r.NodeID },
			strings.Compare, lockByKey[string]("node_id")).withClock(clockColumn),
		comments: newRowSet("github_comments", func(r *models.Comment) string { return r.NodeID },
			strings.Compare, lockByKey[string]("node_id")).withClock(clockColumn),
		branches: newRowSet("github_branches", func(r *models.Branch) branchKey {
			return branchKey{repositoryID: r.RepositoryID, refType: r.RefType, ref: r.Ref}
		}, compareBranchKeys, lockBranches).withConflict(branchConflict()),
		installations: newRowSet("github_installations", func(r *models.Installation) int64 { return r.ID },
			cmp.Compare[int64], lockByKey[int64]("id")).withClock(clockColumn),
		repositories: newRowSet("github_repositories", func(r *models.Repository) int64 { return r.ID },
			cmp.Compare[int64], lockByKey[int64]("id")).withClock(clockColumn),
		users: newRowSet("github_users", func(r *models.User) int64 { return r.ID },
			cmp.Compare[int64], readByID).withUnlockedRead(),
	}
}

// tables are the row sets in the order every consumer visits them, and the rows of each
// in key order, so concurrent batches wait on each other instead of deadlocking. The
// pushes, only ever inserted, come after the comments.
func (w *writes) tables() []table {
	return []table{asTable(w.pullRequests), asTable(w.issues), asTable(w.comments), pushTable{w},
		asTable(w.branches), asTable(w.installations), asTable(w.repositories), asTable(w.users)}
}

// table is one typed table of a batch: its locked read, then its writes from what the
// read found.
type table interface {
	queueRead(q statements, db *gorm.DB) (read any, err error)
	queueWrite(ctx context.Context, q statements, db *gorm.DB, read any) error
}

// queueReads adds the locked reads of every table to q; what they read is for
// queueWrites, once q sent them.
func (w *writes) queueReads(q statements, db *gorm.DB) ([]any, error) {
	var reads []any
	for _, t := range w.tables() {
		r, err := t.queueRead(q, db)
		if err != nil {
			return nil, err
		}
		reads = append(reads, r)
	}
	return reads, nil
}

// queueWrites adds the writes of every table to q, from the rows queueReads read.
func (w *writes) queueWrites(ctx context.Context, q statements, db *gorm.DB, reads []any) error {
	for i, t := range w.tables() {
		if err := t.queueWrite(ctx, q, db, reads[i]); err != nil {
			return err
		}
	}
	return nil
}

// pushTable is github_pushes: nothing to read, each row keyed by its own delivery.
type pushTable struct{ w *writes }

func (pushTable) queueRead(statements, *gorm.DB) (any, error) { return nil, nil }

func (p pushTable) queueWrite(ctx context.Context, q statements, db *gorm.DB, _ any) error {
	pushes := p.w.pushes
	if len(pushes) == 0 {
		return nil
	}
	slices.SortFunc(pushes, func(a, b models.Push) int { return strings.Compare(a.DeliveryID, b.DeliveryID) })
	sch, err := schemaOf[models.Push](db)
	if err != nil {
		return fmt.Errorf("columns of github_pushes: %w", err)
	}
	for start := 0; start < len(pushes); start += maxRowsPerStatement {
		chunk := pushes[start:min(start+maxRowsPerStatement, len(pushes))]
		rows := make([]candidate[models.Push], len(chunk))
		for i := range chunk {
			rows[i] = candidate[models.Push]{row: chunk[i], absent: true}
		}
		body, err := candidatesJSON(ctx, sch, rows)
		if err != nil {
			return fmt.Errorf("encode %d pushes: %w", len(chunk), err)
		}
		// The ledger already makes each insert happen once; DO NOTHING only keeps a manual
		// replay from failing.
		q.add(`INSERT INTO github_pushes SELECT r.*
  FROM jsonb_array_elements($1::jsonb) AS e
 CROSS JOIN LATERAL jsonb_populate_record(NULL::github_pushes, e.value->'row') AS r
ON CONFLICT DO NOTHING`, []any{string(body)}, nil)
	}
	return nil
}

func compareBranchKeys(a, b branchKey) int {
	return cmp.Or(cmp.Compare(a.repositoryID, b.repositoryID), strings.Compare(a.refType, b.refType), strings.Compare(a.ref, b.ref))
}

// branchConflict is github_branches' unique index (migration 0003): it holds md5(ref)
// because a ref can be longer than a btree index row.
func branchConflict() []clause.Column {
	return []clause.Column{{Name: "repository_id"}, {Name: "ref_type"}, {Name: "md5(ref)", Raw: true}}
}

// lockBranches reads the branches of keys through their unique index, one lookup per key
// in key order: md5 is computed here, as Postgres' md5(text) does on the UTF-8 bytes, so
// that the index is used.
func lockBranches(table, columns string, keys []branchKey) (string, []any) {
	repos, types, sums := make([]int64, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		sum := md5.Sum([]byte(k.ref)) //nolint:gosec // must match the index's md5(ref)
		repos[i], types[i], sums[i] = k.repositoryID, k.refType, hex.EncodeToString(sum[:])
	}
	return fmt.Sprintf(`SELECT %[1]s FROM unnest($1::bigint[], $2::text[], $3::text[]) AS k (k_repository, k_type, k_sum)
 CROSS JOIN LATERAL (SELECT %[1]s FROM %[2]s
  WHERE repository_id = k.k_repository AND ref_type = k.k_type AND md5(ref) = k.k_sum FOR UPDATE) AS b`, columns, table),
		[]any{repos, types, sums}
}

// trackingOf exposes a row's tracking columns.
type trackingOf[R any] func(row *R) *models.Tracking

// refresh is the change of a row without lifecycle rules: a new row is incoming and NEW;
// an existing one takes the payload columns copyColumns copies, the event's last_* and
// UPDATED.
func refresh[R any](ev Event, now time.Time, incoming R, tracking trackingOf[R], copyColumns func(dst, src *R)) change[R] {
	return func(cur *R, _ storedClock) *R {
		if cur == nil {
			row := incoming
			*tracking(&row) = newTracking(ev, now)
			return &row
		}
		row := *cur
		copyColumns(&row, &incoming)
		touch(tracking(&row), ev, now, models.StateUpdated)
		return &row
	}
}

// allColumns copies every column but the tracking ones.
func allColumns[R any](tracking trackingOf[R]) func(dst, src *R) {
	return func(dst, src *R) {
		kept := *tracking(dst)
		*dst = *src
		*tracking(dst) = kept
	}
}

// touch records that ev changed a row; state, when set, becomes its processing state.
func touch(t *models.Tracking, ev Event, now time.Time, state models.ProcessingState) {
	t.LastDeliveryID = ev.DeliveryID
	t.LastAction = lastAction(ev)
	t.UpdatedAt = now
	if state != "" {
		// Over a reader's PROCESSING too: the new version fails its finish, so the row
		// stays marked and is claimed again.
		t.ProcessingState = state
		t.ProcessingDate = now
		t.ProcessingVersion++
	}
}
