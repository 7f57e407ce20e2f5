package ingest

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/encoding/json"
	"gorm.io/gorm/schema"
)

// change is what one event does to one row. cur is the row as stored and as the batch's
// events before this one left it, nil when it does not exist; change returns the row after
// the event, or nil when the event leaves the row as it is.
type change[R any] func(cur *R) *R

// rowSet is one typed table's part of a batch: the changes its events make to its rows,
// folded in Go onto the rows as stored, so that the batch costs one read and one write of
// the table however many events it holds. Changes to the same row are applied in the
// order they were added, which is queue order, so the result is what applying the events
// one by one would leave.
type rowSet[K comparable, R any] struct {
	// model is R as gorm reads its tags: the table's name and its columns.
	model *schema.Schema
	// key is the row's key, which conflict names in the table.
	key func(*R) K
	// compare orders keys, so that concurrent consumers lock rows in the same order.
	compare func(a, b K) int
	// read is the statement that reads the rows of keys (sorted by compare) selecting
	// columns, locking them in that order unless unlocked; its arguments are arrays, so
	// that its text does not depend on how many keys there are. nil for a table whose
	// rows are only ever inserted (pushes).
	read func(table, columns string, keys []K) (query string, args []any)
	// conflict is the upsert's conflict target, the unique index that identifies a row;
	// empty for a table only ever inserted into, whose conflicts change nothing.
	conflict string
	// clocked is set for a table whose rows follow GitHub's clock (entity_clock).
	clocked bool
	// unlocked is set for a table whose rows every queue's batches read and seldom change
	// (github_users): read takes them without a lock, with their version, and the write
	// locks the rows it changes and checks them unchanged (queueCheckUnchanged). Its keys
	// must be the table's bigint column id (brokerswitch_lock_unchanged, migration 0011).
	unlocked bool

	keys    []K
	changes map[K][]change[R]
}

// add queues c for the row with key k, after the changes added before it.
func (s *rowSet[K, R]) add(k K, c change[R]) {
	if s.changes == nil {
		s.changes = map[K][]change[R]{}
	}
	if _, seen := s.changes[k]; !seen {
		s.keys = append(s.keys, k)
	}
	s.changes[k] = append(s.changes[k], c)
}

// readRows are the rows a read returned, by key, once its exchange is back, with their
// versions (xmin) for an unlocked table.
type readRows[K comparable, R any] struct {
	rows     map[K]*R
	versions map[K]string
}

// queueRead adds the read of the rows of every key to p and returns what it reads once p
// sent it: a *readRows, or nil when there is nothing to read now (no read, or more keys
// than a statement takes: queueWrite then reads a part at a time).
func (s *rowSet[K, R]) queueRead(p *pipeline) any {
	if s.read == nil || len(s.keys) == 0 || len(s.keys) > maxRowsPerStatement {
		return nil
	}
	return s.queueReadOf(p, slices.SortedFunc(slices.Values(s.keys), s.compare))
}

// queueReadOf adds the read of the rows of keys, in key order, to p.
func (s *rowSet[K, R]) queueReadOf(p *pipeline, keys []K) *readRows[K, R] {
	columns := columnsOf(s.model)
	names := strings.Join(s.model.DBNames, ", ")
	read := &readRows[K, R]{rows: make(map[K]*R, len(keys))}
	if s.unlocked {
		names += ", xmin::text"
		read.versions = make(map[K]string, len(keys))
	}
	query, args := s.read(s.model.Table, names, keys)
	p.queue(query, args, func(rows pgx.Rows) error {
		var version string
		for rows.Next() {
			row := new(R)
			dest := fieldsOf(row, columns)
			if s.unlocked {
				dest = append(dest, &version)
			}
			if err := rows.Scan(dest...); err != nil {
				return fmt.Errorf("read %d rows of %s: %w", len(keys), s.model.Table, err)
			}
			read.rows[s.key(row)] = row
			if s.unlocked {
				read.versions[s.key(row)] = version
			}
		}
		return nil
	})
	return read
}

// queueWrite folds the changes onto the rows read (what queueRead returned) and adds the
// writes of the rows that changed to p, one statement per maxRowsPerStatement keys, in key
// order. It folds a statement's worth of keys at a time and lets go of their changes once
// the statement is encoded: one event can list tens of thousands of rows (an
// installation's repositories), and folding them all before encoding any would hold every row
// two or three times over at once.
//
// When queueRead read nothing because there were more keys than one statement takes, each
// part's rows are read, and its write sent, in exchanges of their own, so that no more than
// a part's rows and statements are held at once. That costs two round trips per part,
// which only such an event pays. Those rows are locked after the tables read in the
// batch's first exchange, out of the table order every batch keeps: a deadlock with
// another queue's batch is broken by Postgres, and a deadlock is transient, so the batch
// is applied again.
func (s *rowSet[K, R]) queueWrite(p *pipeline, read any) error {
	keys := slices.SortedFunc(slices.Values(s.keys), s.compare)
	s.keys = nil
	stored, _ := read.(*readRows[K, R])
	inParts := stored == nil && s.read != nil
	for start := 0; start < len(keys); start += maxRowsPerStatement {
		part := keys[start:min(start+maxRowsPerStatement, len(keys))]
		if inParts {
			stored = s.queueReadOf(p, part)
			if err := p.send(); err != nil {
				return err
			}
		}
		rows := s.fold(part, stored)
		s.queueCheckUnchanged(p, rows, stored)
		if err := s.queueUpsert(p, rows); err != nil {
			return err
		}
		if inParts {
			if err := p.send(); err != nil {
				return err
			}
		}
	}
	return nil
}

// fold applies the queued changes of keys, in key order, to the rows stored (nil: none
// stored) and returns the rows that changed, in key order. An event older than a row by
// GitHub's clock leaves it as it is (clocked), so a key whose events are all older has no
// row to write, and only the ledger records them.
func (s *rowSet[K, R]) fold(keys []K, stored *readRows[K, R]) []*R {
	out := make([]*R, 0, len(keys))
	for _, k := range keys {
		var row *R
		if stored != nil {
			row = stored.rows[k]
		}
		changed := false
		for _, c := range s.changes[k] {
			if next := c(row); next != nil {
				row, changed = next, true
			}
		}
		delete(s.changes, k)
		if changed {
			out = append(out, row)
		}
	}
	return out
}

// queueCheckUnchanged adds to p, for an unlocked table, the lock of the stored rows that
// rows change, which fails unless each is as read. A row absent at the read is not
// checked: no lock could have held its absence, and the upsert's ON CONFLICT decides for
// it, as it does for every table.
func (s *rowSet[K, R]) queueCheckUnchanged(p *pipeline, rows []*R, stored *readRows[K, R]) {
	if !s.unlocked || stored == nil {
		return
	}
	var keys []K
	var versions []string
	for _, row := range rows {
		if k := s.key(row); stored.rows[k] != nil {
			keys = append(keys, k)
			versions = append(versions, stored.versions[k])
		}
	}
	if len(keys) > 0 {
		p.queue("SELECT brokerswitch_lock_unchanged($1::regclass, $2::bigint[], $3::text[])", []any{s.model.Table, keys, versions}, nil)
	}
}

// queueUpsert adds the write of rows, each whole, to p.
func (s *rowSet[K, R]) queueUpsert(p *pipeline, rows []*R) error {
	if len(rows) == 0 {
		return nil
	}
	columns := columnsOf(s.model)
	body, err := rowsJSON(rows, columns)
	if err != nil {
		return fmt.Errorf("encode %d rows of %s: %w", len(rows), s.model.Table, err)
	}
	p.queue(s.upsert(columns), []any{string(body)}, nil)
	return nil
}

// upsert is the statement that writes a JSON array of rows (rowsJSON):
//
//	INSERT INTO t SELECT * FROM jsonb_populate_recordset(NULL::t, rows)
//	ON CONFLICT (key) DO UPDATE SET <every column but the key and created_at>
//	 WHERE t.entity_clock IS NULL OR excluded.entity_clock IS NULL
//	    OR excluded.entity_clock >= t.entity_clock
//
// The rows the batch read are locked and were folded from what is stored, clock
// included, so each is written whole over its row. The clock's COALESCE and WHERE decide
// for a row that was absent at the read and that another consumer inserted since, which
// no lock could hold: its newer payload stays. The text is the same for every batch, so
// the driver prepares it once per connection.
func (s *rowSet[K, R]) upsert(columns []*schema.Field) string {
	insert := fmt.Sprintf("INSERT INTO %[1]s SELECT * FROM jsonb_populate_recordset(NULL::%[1]s, $1::jsonb)", s.model.Table)
	if s.conflict == "" {
		// The ledger already makes each insert happen once; DO NOTHING only keeps a manual
		// replay from failing.
		return insert + " ON CONFLICT DO NOTHING"
	}
	var sets []string
	for _, c := range columns {
		switch {
		case c.PrimaryKey || c.DBName == "created_at":
		case s.clocked && c.DBName == clockColumn:
			// An event without a clock leaves the stored one in place.
			sets = append(sets, fmt.Sprintf("%[2]s = COALESCE(excluded.%[2]s, %[1]s.%[2]s)", s.model.Table, clockColumn))
		default:
			sets = append(sets, fmt.Sprintf("%[1]s = excluded.%[1]s", c.DBName))
		}
	}
	upsert := fmt.Sprintf("%s ON CONFLICT (%s) DO UPDATE SET %s", insert, s.conflict, strings.Join(sets, ", "))
	if !s.clocked {
		return upsert
	}
	return fmt.Sprintf("%[1]s WHERE %[2]s.%[3]s IS NULL OR excluded.%[3]s IS NULL OR excluded.%[3]s >= %[2]s.%[3]s",
		upsert, s.model.Table, clockColumn)
}

// modelSchemas caches the models' schemas, which gorm reads from their tags.
var modelSchemas sync.Map

// modelOf is model R as gorm reads it. The models are this program's own, so a model gorm
// cannot read is a bug that every write of its table would meet: it panics.
func modelOf[R any]() *schema.Schema {
	s, err := schema.Parse(new(R), &modelSchemas, schema.NamingStrategy{})
	if err != nil {
		panic(fmt.Sprintf("ingest: model %T: %v", *new(R), err))
	}
	return s
}

// columnsOf lists the columns of model, in field order, embedded structs (Tracking)
// included.
func columnsOf(model *schema.Schema) []*schema.Field {
	columns := make([]*schema.Field, len(model.DBNames))
	for i, name := range model.DBNames {
		columns[i] = model.FieldsByDBName[name]
	}
	return columns
}

// fieldsOf returns the addresses of row's fields of columns, for a scan.
func fieldsOf[R any](row *R, columns []*schema.Field) []any {
	rv := reflect.ValueOf(row).Elem()
	dest := make([]any, len(columns), len(columns)+1)
	for i, c := range columns {
		dest[i] = rv.FieldByIndex(c.StructField.Index).Addr().Interface()
	}
	return dest
}

// rowsJSON encodes rows as a JSON array of objects of their columns, which
// jsonb_populate_recordset reads by name. It writes each object field by field in
// column order, which needs no map per row and no sorting of its keys. Each value is
// encoded as Go holds it, not as its driver.Value: a column type that is a driver.Valuer
// without a JSON form of its own (sql.NullString, say) would need one first.
func rowsJSON[R any](rows []*R, columns []*schema.Field) ([]byte, error) {
	b := make([]byte, 0, 1024*len(rows))
	b = append(b, '[')
	for i, row := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		rv := reflect.ValueOf(row).Elem()
		for j, c := range columns {
			if j == 0 {
				b = append(b, '{')
			} else {
				b = append(b, ',')
			}
			b = append(json.AppendEscape(b, c.DBName, 0), ':')
			var err error
			if b, err = json.Append(b, rv.FieldByIndex(c.StructField.Index).Interface(), 0); err != nil {
				return nil, fmt.Errorf("column %s: %w", c.DBName, err)
			}
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}
