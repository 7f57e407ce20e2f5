package ingest

import (
	"cmp"
	"crypto/md5" //nolint:gosec // an index key that must match Postgres' md5(), not a secret
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// writes collects what one batch's events do to the typed tables, then writes it with a
// few statements per table. Events add their changes in queue order.
type writes struct {
	now           time.Time
	pullRequests  *rowSet[string, models.PullRequest]
	issues        *rowSet[string, models.Issue]
	comments      *rowSet[string, models.Comment]
	pushes        *rowSet[string, models.Push]
	branches      *rowSet[branchKey, models.Branch]
	installations *rowSet[int64, models.Installation]
	repositories  *rowSet[int64, models.Repository]
	users         *rowSet[int64, models.User]
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
		now:          now,
		pullRequests: clockedTable("node_id", func(r *models.PullRequest) string { return r.NodeID }),
		issues:       clockedTable("node_id", func(r *models.Issue) string { return r.NodeID }),
		comments:     clockedTable("node_id", func(r *models.Comment) string { return r.NodeID }),
		// Each push is its own row, keyed by its delivery: only ever inserted, never read.
		pushes: &rowSet[string, models.Push]{model: modelOf[models.Push](), key: func(r *models.Push) string { return r.DeliveryID },
			compare: strings.Compare},
		branches: &rowSet[branchKey, models.Branch]{model: modelOf[models.Branch](), key: func(r *models.Branch) branchKey {
			return branchKey{repositoryID: r.RepositoryID, refType: r.RefType, ref: r.Ref}
		}, compare: compareBranchKeys, read: lockBranches, conflict: branchConflict},
		installations: clockedTable("id", func(r *models.Installation) int64 { return r.ID }),
		repositories:  clockedTable("id", func(r *models.Repository) int64 { return r.ID }),
		// Every event carries its sender, so every queue's batches read the same few accounts.
		users: &rowSet[int64, models.User]{model: modelOf[models.User](), key: func(r *models.User) int64 { return r.ID },
			compare: cmp.Compare[int64], read: readUsers, conflict: "id", unlocked: true},
	}
}

// clockedTable is a table whose rows follow GitHub's clock and whose key is column.
func clockedTable[K cmp.Ordered, R any](column string, key func(*R) K) *rowSet[K, R] {
	return &rowSet[K, R]{model: modelOf[R](), key: key, compare: cmp.Compare[K], read: lockByKey[K](column), conflict: column, clocked: true}
}

// writesOf is what events do to the typed tables, in their order.
func writesOf(now time.Time, events []Event) *writes {
	w := newWrites(now)
	for _, ev := range events {
		w.add(ev)
	}
	return w
}

// add adds what ev changes to w: its table's rows, when it has a table, and its sender.
func (w *writes) add(ev Event) {
	if apply := applierOf(ev); apply != nil {
		apply(w, ev)
	}
	w.addSender(ev)
}

// table is one typed table's part of a batch: its read, then its writes from what the
// read found.
type table interface {
	queueRead(p *pipeline) (read any)
	queueWrite(p *pipeline, read any) error
}

// tables are the row sets in the order every consumer visits them, and the rows of each
// in key order, so concurrent batches wait on each other instead of deadlocking.
func (w *writes) tables() []table {
	return []table{w.pullRequests, w.issues, w.comments, w.pushes, w.branches, w.installations, w.repositories, w.users}
}

// queueReads adds the reads of every table to p; what they read is for queueWrites, once
// p sent them.
func (w *writes) queueReads(p *pipeline) []any {
	var reads []any
	for _, t := range w.tables() {
		reads = append(reads, t.queueRead(p))
	}
	return reads
}

// queueWrites adds the writes of every table to p, from the rows queueReads read.
func (w *writes) queueWrites(p *pipeline, reads []any) error {
	for i, t := range w.tables() {
		if err := t.queueWrite(p, reads[i]); err != nil {
			return err
		}
	}
	return nil
}

// lockByKey is the locked read of a table whose key is column.
func lockByKey[K any](column string) func(table, columns string, keys []K) (string, []any) {
	return func(table, columns string, keys []K) (string, []any) {
		return fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1) ORDER BY %[3]s FOR UPDATE", columns, table, column), []any{keys}
	}
}

// readUsers is the read of github_users: no lock, so another queue's batch is not held
// back by rows this one only looks at (rowSet.unlocked).
func readUsers(table, columns string, keys []int64) (string, []any) {
	return fmt.Sprintf("SELECT %s FROM %s WHERE id = ANY($1)", columns, table), []any{keys}
}

func compareBranchKeys(a, b branchKey) int {
	return cmp.Or(cmp.Compare(a.repositoryID, b.repositoryID), strings.Compare(a.refType, b.refType), strings.Compare(a.ref, b.ref))
}

// branchConflict is github_branches' unique index (migration 0003): it holds md5(ref)
// because a ref can be longer than a btree index row.
const branchConflict = "repository_id, ref_type, md5(ref)"

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
	return func(cur *R) *R {
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
