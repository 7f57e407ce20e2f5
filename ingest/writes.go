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

	"github.com/brokerswitch/brokerswitch/broker"
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
			strings.Compare, lockByKey[string, models.PullRequest]("node_id")).withClock(clockColumn),
		issues: newRowSet("github_issues", func(r *models.Issue) string { return r.NodeID },
			strings.Compare, lockByKey[string, models.Issue]("node_id")).withClock(clockColumn),
		comments: newRowSet("github_comments", func(r *models.Comment) string { return r.NodeID },
			strings.Compare, lockByKey[string, models.Comment]("node_id")).withClock(clockColumn),
		branches: newRowSet("github_branches", func(r *models.Branch) branchKey {
			return branchKey{repositoryID: r.RepositoryID, refType: r.RefType, ref: r.Ref}
		}, compareBranchKeys, lockBranches).withConflict(branchConflict()),
		installations: newRowSet("github_installations", func(r *models.Installation) int64 { return r.ID },
			cmp.Compare[int64], lockByKey[int64, models.Installation]("id")).withClock(clockColumn),
		repositories: newRowSet("github_repositories", func(r *models.Repository) int64 { return r.ID },
			cmp.Compare[int64], lockByKey[int64, models.Repository]("id")).withClock(clockColumn),
		users: newRowSet("github_users", func(r *models.User) int64 { return r.ID },
			cmp.Compare[int64], lockByKey[int64, models.User]("id")),
	}
}

// flush writes the batch's rows. Every consumer visits the tables in this order, and the
// rows of each in key order, so concurrent batches wait on each other instead of
// deadlocking.
func (w *writes) flush(ctx context.Context, tx *gorm.DB) error {
	for _, f := range []func(context.Context, *gorm.DB) error{
		w.pullRequests.flush, w.issues.flush, w.comments.flush, w.flushPushes,
		w.branches.flush, w.installations.flush, w.repositories.flush, w.users.flush,
	} {
		if err := f(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

func (w *writes) flushPushes(ctx context.Context, tx *gorm.DB) error {
	if len(w.pushes) == 0 {
		return nil
	}
	defer broker.TraceOf(ctx).Add(broker.PhaseWrite, time.Now())
	slices.SortFunc(w.pushes, func(a, b models.Push) int { return strings.Compare(a.DeliveryID, b.DeliveryID) })
	// The ledger already makes each insert happen once; DO NOTHING only keeps a manual
	// replay from failing.
	if err := tx.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(&w.pushes, maxRowsPerStatement).Error; err != nil {
		return fmt.Errorf("insert %d pushes: %w", len(w.pushes), err)
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

// lockBranches reads the branches of keys through their unique index: md5 is computed
// here, as Postgres' md5(text) does on the UTF-8 bytes, so that the index is used.
func lockBranches(ctx context.Context, tx *gorm.DB, keys []branchKey) ([]models.Branch, error) {
	tuples := make([][]any, len(keys))
	for i, k := range keys {
		sum := md5.Sum([]byte(k.ref)) //nolint:gosec // must match the index's md5(ref)
		tuples[i] = []any{k.repositoryID, k.refType, hex.EncodeToString(sum[:])}
	}
	var rows []models.Branch
	err := tx.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
		Where("(repository_id, ref_type, md5(ref)) IN ?", tuples).Order("repository_id, ref_type, ref").Find(&rows).Error
	return rows, err
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
