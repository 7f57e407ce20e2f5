package ingest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// change is what one event does to one row. cur is the row as the events before it left
// it, nil when it does not exist; stored is what the fold assumes of the stored row's
// clock (see storedClock). change returns the row after the event, or nil when the event
// leaves the row as it is.
type change[R any] func(cur *R, stored storedClock) *R

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
	// The locked read leaves it out: the stored clock is compared only by the write's
	// WHERE (see flush), never in Go.
	clock string

	keys    []K
	changes map[K][]change[R]
	// clocks are the event clocks of each key's changes, for the assumptions of a fold.
	clocks map[K][]*time.Time
}

func newRowSet[K comparable, R any](name string, key func(*R) K, compare func(a, b K) int,
	load func(ctx context.Context, tx *gorm.DB, keys []K) ([]R, error),
) *rowSet[K, R] {
	return &rowSet[K, R]{name: name, key: key, compare: compare, load: load,
		changes: map[K][]change[R]{}, clocks: map[K][]*time.Time{}}
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

// add queues c for the row with key k, after the changes added before it; at is the
// clock of c's event (nil for none).
func (s *rowSet[K, R]) add(k K, at *time.Time, c change[R]) {
	if _, seen := s.changes[k]; !seen {
		s.keys = append(s.keys, k)
	}
	s.changes[k] = append(s.changes[k], c)
	s.clocks[k] = append(s.clocks[k], at)
}

// candidate is a row the fold leaves under one assumption about the stored clock.
type candidate[R any] struct {
	row    R
	stored storedClock
	// absent is set when the read found no row, so no assumption was needed.
	absent bool
}

// fold applies the queued changes of keys (in key order) to existing (the rows load
// returned for them) and returns the rows that changed, in key order. For a table with a
// clock, an existing row is folded once per assumption about its stored clock that the
// batch's clocks tell apart, and every changed result is returned with its assumption;
// otherwise once, with none.
func (s *rowSet[K, R]) fold(keys []K, existing []R) []candidate[R] {
	current := make(map[K]*R, len(existing))
	for i := range existing {
		current[s.key(&existing[i])] = &existing[i]
	}
	out := make([]candidate[R], 0, len(keys))
	for _, k := range keys {
		start := current[k]
		stored := []storedClock{{}}
		if s.clock != "" && start != nil {
			stored = assumptions(s.clocks[k])
		}
		joinable := false
		for _, assumed := range stored {
			var row *R
			if start != nil {
				copied := *start
				row = &copied
			}
			changed := false
			for _, c := range s.changes[k] {
				if next := c(row, assumed); next != nil {
					row, changed = next, true
				}
			}
			switch {
			case !changed:
				joinable = false
			case joinable && reflect.DeepEqual(out[len(out)-1].row, *row):
				// Neighbouring assumptions that leave the same row are one candidate.
				last := &out[len(out)-1]
				last.stored = last.stored.join(assumed)
			default:
				out = append(out, candidate[R]{row: *row, stored: assumed, absent: start == nil})
				joinable = true
			}
		}
	}
	return out
}

// flush reads, folds and writes the rows, in one statement each per maxRowsPerStatement
// keys, in key order.
//
// It goes through the keys a statement's worth at a time, and lets go of each part's
// changes once it is written: one event can list tens of thousands of rows (an
// installation's repositories), and folding them all before writing any held every row
// two or three times over at once.
//
// For a table with a clock, the read leaves the clock column out, so no change compares
// an event with the stored row's clock in Go. The fold instead computes the row under
// each assumption about that clock that the batch's clocks can tell apart (usually two:
// older than the batch's event, or equal to it), and the write is one statement that
// keeps, per key, the candidate whose assumption holds for the stored clock: its WHERE
// compares the clocks (flushClocked). When none holds (every event older than the row)
// nothing is written, and the events are in the ledger alone. The read stays for what
// the rules need of the prior row: its state and existence (NextState), the columns a
// partial refresh keeps, and the tracking columns.
func (s *rowSet[K, R]) flush(ctx context.Context, tx *gorm.DB) error {
	if len(s.keys) == 0 {
		return nil
	}
	keys := slices.SortedFunc(slices.Values(s.keys), s.compare)
	s.keys = nil
	read := tx
	if s.clock != "" {
		read = tx.Omit(s.clock)
	}
	for start := 0; start < len(keys); start += maxRowsPerStatement {
		part := keys[start:min(start+maxRowsPerStatement, len(keys))]
		existing, err := s.load(ctx, read, part)
		if err != nil {
			return fmt.Errorf("lock %d rows of %s: %w", len(part), s.name, err)
		}
		candidates := s.fold(part, existing)
		for _, k := range part {
			delete(s.changes, k)
			delete(s.clocks, k)
		}
		if err := s.write(ctx, tx, candidates); err != nil {
			return err
		}
	}
	return nil
}

// write writes the candidates of one part of flush.
func (s *rowSet[K, R]) write(ctx context.Context, tx *gorm.DB, candidates []candidate[R]) error {
	if len(candidates) == 0 {
		return nil
	}
	if s.clock != "" {
		return s.flushClocked(ctx, tx, candidates)
	}
	rows := make([]R, len(candidates))
	for i := range candidates {
		rows[i] = candidates[i].row
	}
	// The rows are locked or new, and each appears once, so writing every column of each
	// is the same as the per-event updates it replaces.
	upsert := clause.OnConflict{Columns: s.conflict, UpdateAll: true}
	if err := tx.WithContext(ctx).Clauses(upsert).CreateInBatches(&rows, maxRowsPerStatement).Error; err != nil {
		return fmt.Errorf("write %d rows of %s: %w", len(rows), s.name, err)
	}
	return nil
}

// flushClocked writes the candidates of a table with a clock, about maxRowsPerStatement at
// a time (never cutting one key's candidates apart), with one statement each:
//
//	INSERT INTO t SELECT r.* FROM jsonb_array_elements(candidates) e
//	 CROSS JOIN LATERAL jsonb_populate_record(NULL::t, e.value->'row') r
//	 CROSS JOIN LATERAL jsonb_to_record(e.value) c(lo, hi, lo_in, hi_in, absent)
//	  LEFT JOIN t s ON s.key = r.key
//	 WHERE c.absent OR <its assumption holds for s.entity_clock>
//	ON CONFLICT (key) DO UPDATE SET <every column but the key and created_at> ...
//	 WHERE t.entity_clock IS NULL OR excluded.entity_clock IS NULL
//	    OR excluded.entity_clock >= t.entity_clock
//
// The rows are locked, so at most one candidate of a key holds. The ON CONFLICT WHERE
// decides for a row that was absent at the read and that another consumer has inserted
// since, which no lock could hold.
//
// The records are built in FROM, by LATERAL: Postgres expands a (jsonb_populate_record(...)).*
// in the select list into one call per column, which parsed every row some thirty times
// and made the statement ten times slower.
func (s *rowSet[K, R]) flushClocked(ctx context.Context, tx *gorm.DB, candidates []candidate[R]) error {
	stmt := &gorm.Statement{DB: tx}
	var model R
	if err := stmt.Parse(&model); err != nil {
		return fmt.Errorf("columns of %s: %w", s.name, err)
	}
	sch := stmt.Schema
	var keyJoin, conflict []string
	for _, f := range sch.PrimaryFields {
		keyJoin = append(keyJoin, fmt.Sprintf("s.%[1]s = r.%[1]s", f.DBName))
		conflict = append(conflict, f.DBName)
	}
	var sets []string
	for _, f := range sch.Fields {
		switch {
		case f.DBName == "" || f.PrimaryKey || f.AutoCreateTime > 0:
		case f.DBName == s.clock:
			// An event without a clock leaves the stored one in place.
			sets = append(sets, fmt.Sprintf("%[2]s = COALESCE(excluded.%[2]s, %[1]s.%[2]s)", s.name, s.clock))
		default:
			sets = append(sets, fmt.Sprintf("%[1]s = excluded.%[1]s", f.DBName))
		}
	}
	query := fmt.Sprintf(`INSERT INTO %[1]s SELECT r.*
  FROM jsonb_array_elements(?::jsonb) AS e
 CROSS JOIN LATERAL jsonb_populate_record(NULL::%[1]s, e.value->'row') AS r
 CROSS JOIN LATERAL jsonb_to_record(e.value) AS c(lo timestamptz, hi timestamptz, lo_in boolean, hi_in boolean, absent boolean)
  LEFT JOIN %[1]s AS s ON %[2]s
 WHERE c.absent
    OR (c.lo IS NULL OR s.%[3]s > c.lo OR (c.lo_in AND s.%[3]s = c.lo))
   AND (c.hi IS NULL OR s.%[3]s IS NULL OR s.%[3]s < c.hi OR (c.hi_in AND s.%[3]s = c.hi))
ON CONFLICT (%[4]s) DO UPDATE SET %[5]s
 WHERE %[1]s.%[3]s IS NULL OR excluded.%[3]s IS NULL OR excluded.%[3]s >= %[1]s.%[3]s`,
		s.name, strings.Join(keyJoin, " AND "), s.clock, strings.Join(conflict, ", "), strings.Join(sets, ", "))
	for start := 0; start < len(candidates); {
		end := min(start+maxRowsPerStatement, len(candidates))
		// A key's candidates stay in one statement: a later statement sees what an
		// earlier one wrote, so a second candidate of the row would find its assumption
		// true of that write and overwrite it with a fold that skipped earlier events.
		// fold keeps a key's candidates together, and they are a handful at most.
		for end < len(candidates) && s.key(&candidates[end].row) == s.key(&candidates[end-1].row) {
			end++
		}
		batch := candidates[start:end]
		start = end
		body, err := candidatesJSON(ctx, sch, batch)
		if err != nil {
			return fmt.Errorf("encode %d rows of %s: %w", len(batch), s.name, err)
		}
		if err := tx.WithContext(ctx).Exec(query, string(body)).Error; err != nil {
			return fmt.Errorf("write %d rows of %s: %w", len(batch), s.name, err)
		}
	}
	return nil
}

// candidatesJSON encodes candidates as the statement of flushClocked reads them: each
// row as an object of its columns (jsonb_populate_record reads them by name), beside its
// assumption. It writes each object field by field in the schema's order, which needs
// no map per row and no sorting of its keys. Each value is encoded as Go holds it, not as
// its driver.Value: a column type that is a driver.Valuer without a JSON form of its own
// (sql.NullString, say) would need one before a table with a clock could hold it.
func candidatesJSON[R any](ctx context.Context, sch *schema.Schema, candidates []candidate[R]) ([]byte, error) {
	assumption := func(b []byte, name string, at *time.Time, in bool) []byte {
		b = append(b, `,"`+name+`":`...)
		if at == nil {
			b = append(b, "null"...)
		} else {
			b = at.UTC().AppendFormat(append(b, '"'), time.RFC3339Nano)
			b = append(b, '"')
		}
		return strconv.AppendBool(append(b, `,"`+name+`_in":`...), in)
	}
	b := make([]byte, 0, 1024*len(candidates))
	b = append(b, '[')
	for i := range candidates {
		c := &candidates[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"row":{`...)
		rv := reflect.ValueOf(&c.row).Elem()
		first := true
		for _, f := range sch.Fields {
			if f.DBName == "" {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			v, _ := f.ValueOf(ctx, rv)
			b = append(json.AppendEscape(b, f.DBName, 0), ':')
			var err error
			if b, err = json.Append(b, v, 0); err != nil {
				return nil, fmt.Errorf("column %s: %w", f.DBName, err)
			}
		}
		b = append(b, '}')
		b = assumption(b, "lo", c.stored.lo, c.stored.loIn)
		b = assumption(b, "hi", c.stored.hi, c.stored.hiIn)
		b = strconv.AppendBool(append(b, `,"absent":`...), c.absent)
		b = append(b, '}')
	}
	return append(b, ']'), nil
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
