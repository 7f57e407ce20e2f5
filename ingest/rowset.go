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
	// The locked read leaves it out: the stored clock is compared only by the upsert's
	// WHERE (clockWhere), never in Go.
	clock string
	// tie is the SQL condition under which a batch's row whose clock equals the stored
	// row's is written (queue order with the table's rules); "" means always.
	tie string

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

// withClock names the table's entity clock column and returns s; tie is the condition
// under which a row of the batch that ties with the stored clock is written ("" always),
// in terms of excluded (the batch's row) and the table's name (the stored row).
func (s *rowSet[K, R]) withClock(column, tie string) *rowSet[K, R] {
	s.clock, s.tie = column, tie
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
//
// For a table with a clock, the read leaves the clock column out, so the fold sees only
// the batch's own clocks: within the batch, changes compare with the ones before them,
// and the first change with a clock is taken as newer than the stored row. Whether the
// folded row is in fact newer is the upsert's WHERE, one per statement (clockWhere): an
// older row is not written, and the batch's events are left in the ledger alone. The
// other columns still need the read: the processing-state rules see the prior row's
// state and existence, partial refreshes keep the columns their event does not carry,
// and the tracking columns keep their history.
func (s *rowSet[K, R]) flush(ctx context.Context, tx *gorm.DB) error {
	if len(s.keys) == 0 {
		return nil
	}
	keys := slices.SortedFunc(slices.Values(s.keys), s.compare)
	read := tx
	if s.clock != "" {
		read = tx.Omit(s.clock)
	}
	var existing []R
	for start := 0; start < len(keys); start += maxRowsPerStatement {
		rows, err := s.load(ctx, read, keys[start:min(start+maxRowsPerStatement, len(keys))])
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
		conflict, updates, err := s.clockedUpdates(tx, &rows)
		if err != nil {
			return err
		}
		upsert = clause.OnConflict{Columns: conflict, DoUpdates: updates,
			Where: clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: clockWhere(s.name, s.clock, s.tie)}}}}
	}
	if err := tx.WithContext(ctx).Clauses(upsert).CreateInBatches(&rows, maxRowsPerStatement).Error; err != nil {
		return fmt.Errorf("write %d rows of %s: %w", len(rows), s.name, err)
	}
	return nil
}

// clockWhere is the upsert's condition for writing the batch's row (excluded) over the
// stored one (table) by their clocks: the stored row has none (older than anything), the
// batch's has none (its events carried none: queue order, and the stored clock stays,
// see clockedUpdates), the batch's is newer, or they tie and tie holds (queue order).
// An older row is not written.
func clockWhere(table, clock, tie string) string {
	if tie == "" {
		tie = "TRUE"
	}
	return fmt.Sprintf("%[1]s.%[2]s IS NULL OR excluded.%[2]s IS NULL OR excluded.%[2]s > %[1]s.%[2]s"+
		" OR (excluded.%[2]s = %[1]s.%[2]s AND (%[3]s))", table, clock, tie)
}

// clockedUpdates are the conflict target and the assignments that UpdateAll makes
// (every column but the key and created_at, updated_at to now), but the clock: the
// batch's, or the stored one when the batch's events carried none (the read did not
// fetch it, so the fold cannot keep it).
func (s *rowSet[K, R]) clockedUpdates(tx *gorm.DB, rows *[]R) ([]clause.Column, []clause.Assignment, error) {
	stmt := &gorm.Statement{DB: tx}
	if err := stmt.Parse(rows); err != nil {
		return nil, nil, fmt.Errorf("columns of %s: %w", s.name, err)
	}
	conflict := s.conflict
	if len(conflict) == 0 {
		for _, f := range stmt.Schema.PrimaryFields {
			conflict = append(conflict, clause.Column{Name: f.DBName})
		}
	}
	now := tx.NowFunc()
	var out []clause.Assignment
	for _, f := range stmt.Schema.Fields {
		switch {
		case f.DBName == "" || f.PrimaryKey || f.AutoCreateTime > 0:
		case f.DBName == s.clock:
			out = append(out, clause.Assignment{Column: clause.Column{Name: f.DBName},
				Value: clause.Expr{SQL: fmt.Sprintf("COALESCE(excluded.%[2]s, %[1]s.%[2]s)", s.name, s.clock)}})
		case f.AutoUpdateTime > 0:
			out = append(out, clause.Assignment{Column: clause.Column{Name: f.DBName}, Value: now})
		default:
			out = append(out, clause.Assignment{Column: clause.Column{Name: f.DBName},
				Value: clause.Column{Table: "excluded", Name: f.DBName}})
		}
	}
	return conflict, out, nil
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
