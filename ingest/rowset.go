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
// event, and the reads of every table go in one exchange, the writes in the next. Changes to the same row are applied in the order they were added, which is queue
// order, so the result is what applying the events one by one would leave.
type rowSet[K comparable, R any] struct {
	// name is the table, for errors.
	name string
	// key is the row's primary key.
	key func(*R) K
	// compare orders keys, so that concurrent consumers lock rows in the same order.
	compare func(a, b K) int
	// lock is the locked read of keys (sorted by compare) selecting columns, which locks
	// the rows in that order; its arguments are arrays, so that its text does not depend
	// on how many keys there are.
	lock func(table, columns string, keys []K) (query string, args []any)
	// conflict is the upsert's conflict target: the unique index that identifies a row.
	// Empty means the model's primary key columns.
	conflict []clause.Column
	// clock is the row's entity clock column, "" for a table that keeps queue order.
	// The locked read leaves it out: the stored clock is compared only by the write's
	// WHERE (see flush), never in Go.
	clock string
	// unlockedRead is set for a table whose rows every queue's batches read and seldom
	// change (withUnlockedRead): lock reads them without a lock, with their version, and
	// the write locks the rows it changes and checks them unchanged (checkUnchanged).
	unlockedRead bool

	keys    []K
	changes map[K][]change[R]
	// clocks are the event clocks of each key's changes, for the assumptions of a fold.
	clocks map[K][]*time.Time
}

func newRowSet[K comparable, R any](name string, key func(*R) K, compare func(a, b K) int,
	lock func(table, columns string, keys []K) (query string, args []any),
) *rowSet[K, R] {
	return &rowSet[K, R]{name: name, key: key, compare: compare, lock: lock,
		changes: map[K][]change[R]{}, clocks: map[K][]*time.Time{}}
}

// withConflict sets the upsert's conflict target and returns s.
func (s *rowSet[K, R]) withConflict(columns []clause.Column) *rowSet[K, R] {
	s.conflict = columns
	return s
}

// withUnlockedRead makes s read its rows without a lock and returns s; lock must then be
// readByID. The rows the batch changes are locked in the write's exchange and checked to
// be as read, or the transaction fails with a serialization failure and the batch is
// applied again (apply). For github_users, whose rows are the senders of every queue's
// events: the locked read held them across a round trip to Postgres and through the
// COMMIT, and the four queues' batches waited on each other for them. The keys must be
// the table's bigint column id (brokerswitch_lock_unchanged, migration 0011).
func (s *rowSet[K, R]) withUnlockedRead() *rowSet[K, R] {
	s.unlockedRead = true
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

// fold applies the queued changes of keys (in key order) to current (the rows the read
// returned, by key) and returns the rows that changed, in key order. For a table with a
// clock, an existing row is folded once per assumption about its stored clock that the
// batch's clocks tell apart, and every changed result is returned with its assumption;
// otherwise once, with none.
func (s *rowSet[K, R]) fold(keys []K, current map[K]*R) []candidate[R] {
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

// readRows are the rows a read returned, once its exchange is back, with their versions
// (xmin) for a table read without a lock.
type readRows[K comparable, R any] struct {
	rows     []R
	versions map[K]string
}

// rowTable is a rowSet as a table of writes.
type rowTable[K comparable, R any] struct{ s *rowSet[K, R] }

func asTable[K comparable, R any](s *rowSet[K, R]) table { return rowTable[K, R]{s} }

func (t rowTable[K, R]) queueRead(q statements, db *gorm.DB) (any, error) {
	return t.s.queueRead(q, db)
}

func (t rowTable[K, R]) queueWrite(ctx context.Context, q statements, db *gorm.DB, read any) error {
	return t.s.queueWrite(ctx, q, db, read.(*readRows[K, R]))
}

// schemaOf is the gorm schema of R, as db caches it.
func schemaOf[R any](db *gorm.DB) (*schema.Schema, error) {
	stmt := &gorm.Statement{DB: db}
	var model R
	if err := stmt.Parse(&model); err != nil {
		return nil, err
	}
	return stmt.Schema, nil
}

// queueRead adds the read of the rows of the keys FOR UPDATE, in key order, to q; the rows
// are in the slice it returns once q sent it. For a table with a clock, the read leaves the
// clock column out, so no change compares an event with the stored row's clock in Go (see
// queueWrite). db is for the table's schema only.
func (s *rowSet[K, R]) queueRead(q statements, db *gorm.DB) (*readRows[K, R], error) {
	if len(s.keys) > maxRowsPerStatement {
		return nil, nil // read a statement's worth at a time by queueWrite
	}
	return s.queueLock(q, db, slices.SortedFunc(slices.Values(s.keys), s.compare))
}

// queueLock adds the read of the rows of keys (in key order) FOR UPDATE to q, or without a
// lock and with their versions for withUnlockedRead; the rows are in what it returns once
// q sent it.
func (s *rowSet[K, R]) queueLock(q statements, db *gorm.DB, keys []K) (*readRows[K, R], error) {
	existing := &readRows[K, R]{}
	if len(keys) == 0 {
		return existing, nil
	}
	sch, err := schemaOf[R](db)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", s.name, err)
	}
	var fields []*schema.Field
	var columns []string
	for _, f := range sch.Fields {
		if f.DBName != "" && f.DBName != s.clock {
			fields = append(fields, f)
			columns = append(columns, f.DBName)
		}
	}
	var version string
	if s.unlockedRead {
		columns = append(columns, "xmin::text")
		existing.versions = make(map[K]string, len(keys))
	}
	query, args := s.lock(s.name, strings.Join(columns, ", "), keys)
	q.add(query, args, func(rows rowScanner) error {
		dest := make([]any, len(columns))
		for rows.Next() {
			var row R
			rv := reflect.ValueOf(&row).Elem()
			for i, f := range fields {
				dest[i] = f.ReflectValueOf(context.Background(), rv).Addr().Interface()
			}
			if s.unlockedRead {
				dest[len(fields)] = &version
			}
			if err := rows.Scan(dest...); err != nil {
				return fmt.Errorf("lock %d rows of %s: %w", len(keys), s.name, err)
			}
			existing.rows = append(existing.rows, row)
			if s.unlockedRead {
				existing.versions[s.key(&row)] = version
			}
		}
		return nil
	})
	return existing, nil
}

// queueWrite folds the changes onto existing (the rows queueRead returned) and adds the
// writes of the rows that changed to q, one statement per maxRowsPerStatement keys, in key
// order. It folds the keys a statement's worth at a time and lets go of each part's
// changes once its statement is encoded: one event can list tens of thousands of rows (an
// installation's repositories), and folding them all before encoding any held every row
// two or three times over at once.
//
// existing is nil when queueRead left the read to queueWrite (more keys than one statement
// takes): each part's rows are then read, and its write sent, in exchanges of their own,
// so that no more than a part's rows and statements are held at once. That costs two
// round trips per part, which only such an event pays. Those rows are locked after the
// tables read in the batch's first exchange, out of the table order every batch keeps: a
// deadlock with another queue's batch is broken by Postgres, and a deadlock is transient,
// so the batch is applied again.
//
// For a table with a clock, the fold computes the row under each assumption about the
// stored clock that the batch's clocks can tell apart (usually two: older than the
// batch's event, or equal to it), and the write is one statement that keeps, per key, the
// candidate whose assumption holds for the stored clock: its WHERE compares the clocks
// (clockedUpsert). When none holds (every event older than the row) nothing is written,
// and the events are in the ledger alone. The read stays for what the rules need of the
// prior row: its state and existence (nextState), the columns a partial refresh keeps,
// and the tracking columns.
func (s *rowSet[K, R]) queueWrite(ctx context.Context, q statements, db *gorm.DB, existing *readRows[K, R]) error {
	if len(s.keys) == 0 {
		return nil
	}
	keys := slices.SortedFunc(slices.Values(s.keys), s.compare)
	s.keys = nil
	sch, err := schemaOf[R](db)
	if err != nil {
		return fmt.Errorf("columns of %s: %w", s.name, err)
	}
	query := s.upsert(sch)
	inParts := existing == nil
	read := existing
	current := s.byKey(existing)
	for start := 0; start < len(keys); start += maxRowsPerStatement {
		part := keys[start:min(start+maxRowsPerStatement, len(keys))]
		if inParts {
			rows, err := s.queueLock(q, db, part)
			if err != nil {
				return err
			}
			if err := q.send(); err != nil {
				return err
			}
			read, current = rows, s.byKey(rows)
		}
		candidates := s.fold(part, current)
		for _, k := range part {
			delete(s.changes, k)
			delete(s.clocks, k)
		}
		s.queueCheckUnchanged(q, candidates, read)
		if err := s.queueCandidates(ctx, q, sch, query, candidates); err != nil {
			return err
		}
		if inParts {
			if err := q.send(); err != nil {
				return err
			}
		}
	}
	return nil
}

// byKey indexes rows by key; nil rows index nothing.
func (s *rowSet[K, R]) byKey(read *readRows[K, R]) map[K]*R {
	if read == nil {
		return nil
	}
	current := make(map[K]*R, len(read.rows))
	for i := range read.rows {
		current[s.key(&read.rows[i])] = &read.rows[i]
	}
	return current
}

// queueCheckUnchanged adds to q, for a table read without a lock, the lock of the stored
// rows that candidates change, which fails unless each is as read. A row absent at the
// read is not checked: no lock could have held its absence, and the upsert's ON CONFLICT
// decides for it, as it does for every table.
func (s *rowSet[K, R]) queueCheckUnchanged(q statements, candidates []candidate[R], read *readRows[K, R]) {
	if !s.unlockedRead || read == nil {
		return
	}
	var keys []K
	var versions []string
	for i := range candidates {
		k := s.key(&candidates[i].row)
		if candidates[i].absent || (len(keys) > 0 && keys[len(keys)-1] == k) {
			continue
		}
		keys = append(keys, k)
		versions = append(versions, read.versions[k])
	}
	if len(keys) > 0 {
		q.add("SELECT brokerswitch_lock_unchanged($1::regclass, $2::bigint[], $3::text[])", []any{s.name, keys, versions}, nil)
	}
}

// queueCandidates adds the writes of one part's candidates to q.
func (s *rowSet[K, R]) queueCandidates(ctx context.Context, q statements, sch *schema.Schema, query string, candidates []candidate[R]) error {
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
		q.add(query, []any{string(body)}, nil)
	}
	return nil
}

// upsert is the statement that writes a JSON array of candidates (candidatesJSON). For a
// table without a clock, each key has one candidate, written whole over the row: the rows
// are locked or new, and each appears once, so writing every column of each is the same
// as the per-event updates it replaces. For a table with a clock:
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
// and made the statement ten times slower. The text is the same for every batch, so the
// driver prepares it once per connection.
func (s *rowSet[K, R]) upsert(sch *schema.Schema) string {
	var keyJoin, conflict []string
	for _, f := range sch.PrimaryFields {
		keyJoin = append(keyJoin, fmt.Sprintf("s.%[1]s = r.%[1]s", f.DBName))
		conflict = append(conflict, f.DBName)
	}
	if len(s.conflict) > 0 {
		conflict = conflict[:0]
		for _, c := range s.conflict {
			conflict = append(conflict, c.Name)
		}
	}
	var sets []string
	for _, f := range sch.Fields {
		switch {
		case f.DBName == "" || f.PrimaryKey || f.AutoCreateTime > 0:
		case s.clock != "" && f.DBName == s.clock:
			// An event without a clock leaves the stored one in place.
			sets = append(sets, fmt.Sprintf("%[2]s = COALESCE(excluded.%[2]s, %[1]s.%[2]s)", s.name, s.clock))
		default:
			sets = append(sets, fmt.Sprintf("%[1]s = excluded.%[1]s", f.DBName))
		}
	}
	if s.clock == "" {
		return fmt.Sprintf(`INSERT INTO %[1]s SELECT r.*
  FROM jsonb_array_elements($1::jsonb) AS e
 CROSS JOIN LATERAL jsonb_populate_record(NULL::%[1]s, e.value->'row') AS r
ON CONFLICT (%[2]s) DO UPDATE SET %[3]s`, s.name, strings.Join(conflict, ", "), strings.Join(sets, ", "))
	}
	return fmt.Sprintf(`INSERT INTO %[1]s SELECT r.*
  FROM jsonb_array_elements($1::jsonb) AS e
 CROSS JOIN LATERAL jsonb_populate_record(NULL::%[1]s, e.value->'row') AS r
 CROSS JOIN LATERAL jsonb_to_record(e.value) AS c(lo timestamptz, hi timestamptz, lo_in boolean, hi_in boolean, absent boolean)
  LEFT JOIN %[1]s AS s ON %[2]s
 WHERE c.absent
    OR (c.lo IS NULL OR s.%[3]s > c.lo OR (c.lo_in AND s.%[3]s = c.lo))
   AND (c.hi IS NULL OR s.%[3]s IS NULL OR s.%[3]s < c.hi OR (c.hi_in AND s.%[3]s = c.hi))
ON CONFLICT (%[4]s) DO UPDATE SET %[5]s
 WHERE %[1]s.%[3]s IS NULL OR excluded.%[3]s IS NULL OR excluded.%[3]s >= %[1]s.%[3]s`,
		s.name, strings.Join(keyJoin, " AND "), s.clock, strings.Join(conflict, ", "), strings.Join(sets, ", "))
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

// readByID is the read of a table withUnlockedRead: no lock, so another queue's batch
// is not held back by rows this one only looks at.
func readByID(table, columns string, keys []int64) (string, []any) {
	return fmt.Sprintf("SELECT %s FROM %s WHERE id = ANY($1)", columns, table), []any{keys}
}

// lockByKey is the lock of a table whose key is column.
func lockByKey[K any](column string) func(table, columns string, keys []K) (string, []any) {
	return func(table, columns string, keys []K) (string, []any) {
		return fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1) ORDER BY %[3]s FOR UPDATE", columns, table, column), []any{keys}
	}
}
