package ingest

import (
	"context"
	"fmt"
	"slices"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// change is what one event does to one row. cur is the row as the events before it left
// it, nil when it does not exist; change returns the row after the event, or nil when the
// event leaves the row as it is.
type change[R any] func(cur *R) *R

// rowSet folds a batch's changes to one table in Go, so the batch costs two statements
// per table (read the rows FOR UPDATE, write the changed ones) instead of one or two per
// event. Changes to the same row are applied in the order they were added, which is queue
// order, so the result is what applying the events one by one would leave.
type rowSet[K comparable, R any] struct {
	// name is the table, for errors.
	name string
	// key is the row's primary key.
	key func(*R) K
	// compare orders keys, so that concurrent consumers lock rows in the same order.
	compare func(a, b K) int
	// load reads the existing rows among keys with FOR UPDATE, in compare's order.
	load func(ctx context.Context, tx *gorm.DB, keys []K) ([]R, error)
	// conflict is the upsert's conflict target: the unique index that identifies a row.
	// Empty means the model's primary key columns.
	conflict []clause.Column
	// clock is the row's entity clock column, "" for a table that keeps queue order.
	clock string

	keys    []K
	changes map[K][]change[R]
}

func newRowSet[K comparable, R any](name string, key func(*R) K, compare func(a, b K) int,
	load func(ctx context.Context, tx *gorm.DB, keys []K) ([]R, error),
) *rowSet[K, R] {
	return &rowSet[K, R]{name: name, key: key, compare: compare, load: load, changes: map[K][]change[R]{}}
}

// withConflict sets the upsert's conflict target and returns s.
func (s *rowSet[K, R]) withConflict(columns []clause.Column) *rowSet[K, R] {
	s.conflict = columns
	return s
}

// withClock names the table's entity clock column and returns s.
func (s *rowSet[K, R]) withClock(column string) *rowSet[K, R] {
	s.clock = column
	return s
}

// add queues c for the row with key k, after the changes added before it.
func (s *rowSet[K, R]) add(k K, c change[R]) {
	if _, seen := s.changes[k]; !seen {
		s.keys = append(s.keys, k)
	}
	s.changes[k] = append(s.changes[k], c)
}

// fold applies the queued changes to existing (the rows load returned) and returns the
// rows that changed, in key order.
func (s *rowSet[K, R]) fold(existing []R) []R {
	current := make(map[K]*R, len(existing))
	for i := range existing {
		current[s.key(&existing[i])] = &existing[i]
	}
	keys := slices.SortedFunc(slices.Values(s.keys), s.compare)
	out := make([]R, 0, len(keys))
	for _, k := range keys {
		row, changed := current[k], false
		for _, c := range s.changes[k] {
			if next := c(row); next != nil {
				row, changed = next, true
			}
		}
		if changed {
			out = append(out, *row)
		}
	}
	return out
}

// flush reads, folds and writes the rows, in one statement each (more for batches over
// maxRowsPerStatement rows).
func (s *rowSet[K, R]) flush(ctx context.Context, tx *gorm.DB) error {
	if len(s.keys) == 0 {
		return nil
	}
	keys := slices.SortedFunc(slices.Values(s.keys), s.compare)
	var existing []R
	for start := 0; start < len(keys); start += maxRowsPerStatement {
		rows, err := s.load(ctx, tx, keys[start:min(start+maxRowsPerStatement, len(keys))])
		if err != nil {
			return fmt.Errorf("lock %d rows of %s: %w", len(keys), s.name, err)
		}
		existing = append(existing, rows...)
	}
	rows := s.fold(existing)
	if len(rows) == 0 {
		return nil
	}
	// The rows are locked or new, and each appears once, so writing every column of each
	// is the same as the per-event updates it replaces.
	upsert := clause.OnConflict{Columns: s.conflict, UpdateAll: true}
	if s.clock != "" {
		// The fold compared each event with the clock of the row it locked. A row that did
		// not exist then could not be locked: if another consumer inserted it since, this
		// decides, by the same clock, whether the batch's row is newer than the one there.
		upsert.Where = clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: fmt.Sprintf(
			"excluded.%[2]s IS NULL OR %[1]s.%[2]s IS NULL OR excluded.%[2]s >= %[1]s.%[2]s", s.name, s.clock)}}}
	}
	if err := tx.WithContext(ctx).Clauses(upsert).CreateInBatches(&rows, maxRowsPerStatement).Error; err != nil {
		return fmt.Errorf("write %d rows of %s: %w", len(rows), s.name, err)
	}
	return nil
}

// lockByKey is the load of a table with a one-column key.
func lockByKey[K any, R any](column string) func(ctx context.Context, tx *gorm.DB, keys []K) ([]R, error) {
	return func(ctx context.Context, tx *gorm.DB, keys []K) ([]R, error) {
		var rows []R
		err := tx.WithContext(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
			Where(column+" IN ?", keys).Order(column).Find(&rows).Error
		return rows, err
	}
}
