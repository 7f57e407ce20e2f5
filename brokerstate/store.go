package brokerstate

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
)

// Settings keys of the broker state.
const (
	keyActiveIndex    = "broker.active_index"
	KeyPendingSwitch  = "broker.pending_switch"
	keyLastSwitch     = "broker.last_switch"
	keyLastDrainCheck = "broker.last_drain_check"
	keySeenUntil      = "broker.notifications_seen_until"
	keySeenAtMark     = "broker.notifications_seen_at_mark"
	KeyProducerTrail  = "broker.producer_trail"
	// KeyActiveEndpoint names the active broker by host and vhost beside its index, so that
	// reordering RABBITMQ_CONNECTION_STRINGS does not silently move us to another broker.
	KeyActiveEndpoint = "broker.active_endpoint"
)

// brokerStateLock serialises every change of the broker state across processes, so that a
// retried or concurrent commit reads what the other one wrote.
const brokerStateLock = 0x62726b72 // "brkr"

// Ref names a configured broker by host and vhost; its index is its position.
type Ref struct {
	Host  string `json:"host"`
	Vhost string `json:"vhost"`
}

// Store reads and changes the broker state kept in settings. Stored brokers are
// resolved by host and vhost against Brokers, so that they follow their broker when the
// configured list is reordered.
type Store struct {
	DB      *gorm.DB
	Brokers []Ref
}

// NewStore is the Store of db with its brokers named after the configured endpoints, in
// their configured order.
func NewStore(db *gorm.DB, endpoints []broker.Endpoint) *Store {
	refs := make([]Ref, len(endpoints))
	for i, ep := range endpoints {
		refs[i] = Ref{Host: ep.Host, Vhost: ep.Vhost}
	}
	return &Store{DB: db, Brokers: refs}
}

// Load reads the broker state and fails unless its active broker is configured: it is
// for whatever consumes the active broker (the windows, the StateWatcher, the metrics and
// /readyz), and its error says how to repair the configuration.
func (s *Store) Load(ctx context.Context) (State, error) {
	st, err := s.LoadAllowingRemoved(ctx)
	if err != nil {
		return st, err
	}
	if st.ActiveIndex < 0 || st.ActiveIndex >= len(s.Brokers) {
		return st, fmt.Errorf("active broker %d (setting %s) is not configured (%d brokers in RABBITMQ_CONNECTION_STRINGS): force a switch to a configured broker",
			st.ActiveIndex, keyActiveIndex, len(s.Brokers))
	}
	return st, nil
}

// LoadAllowingRemoved reads the broker state as stored, for the API and the BrokerSwitch
// workflow's activities: an active broker that was removed from the configuration reads
// as ActiveIndex -1 instead of an error, so that the force that repairs it can be asked
// for and applied.
func (s *Store) LoadAllowingRemoved(ctx context.Context) (State, error) {
	return s.load(s.DB.WithContext(ctx))
}

// Update changes the broker state in one transaction under a lock: fn sees the current
// state and returns the next one, which is written back and announced on stateChannel.
// Like LoadAllowingRemoved it accepts an active broker that is not configured, so that a forced
// switch can repair it.
func (s *Store) Update(ctx context.Context, fn func(State) (State, error)) (State, error) {
	var next State
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", brokerStateLock).Error; err != nil {
			return fmt.Errorf("lock broker state: %w", err)
		}
		cur, err := s.load(tx)
		if err != nil {
			return err
		}
		if next, err = fn(cur); err != nil {
			return err
		}
		// New visits are dated on Postgres' clock, the one the spares' marks are dated by.
		var at time.Time
		if err := tx.Raw("SELECT clock_timestamp()").Scan(&at).Error; err != nil {
			return fmt.Errorf("read the database's clock: %w", err)
		}
		at = at.UTC().Truncate(time.Microsecond)
		next.Trail = next.Trail.seen(at, cur.Trail)
		next.Pending = recordedAt(next.Pending, cur.Pending, at)
		if err := s.save(tx, next); err != nil {
			return err
		}
		if err := s.markLeft(tx, cur, next, at); err != nil {
			return err
		}
		// Delivered on commit, and only then: every StateWatcher re-reads the state, so a
		// window learns of a committed switch without a Temporal round trip.
		if err := tx.Exec("SELECT pg_notify(?, '')", stateChannel).Error; err != nil {
			return fmt.Errorf("announce broker state change: %w", err)
		}
		return nil
	}, readCommitted())
	return next, err
}

// readCommitted is the isolation of Update's transactions, said explicitly: under the
// database's default, were it REPEATABLE READ, the snapshot would be taken by the lock's
// own statement, before the lock is granted, and the state read after it would miss what
// the holder committed meanwhile.
func readCommitted() *sql.TxOptions { return &sql.TxOptions{Isolation: sql.LevelReadCommitted} }

// recordedAt dates a Pending Switch that fn recorded (its RecordedAt is not cur's) at at,
// on Postgres' clock and after the lock: a force compares it with when it was asked for
// on that clock (Now), never with the clock of another process, nor with a time read
// before the wait for the lock, which would date a hop recorded after the force was asked
// for as if it came before and drop it.
func recordedAt(next, cur *PendingSwitch, at time.Time) *PendingSwitch {
	if next == nil || cur != nil && next.RecordedAt.Equal(cur.RecordedAt) {
		return next
	}
	p := *next
	p.RecordedAt = at
	return &p
}

// RecordDrainCheck keeps the last drain check for GET /api/v1/broker.
func (s *Store) RecordDrainCheck(ctx context.Context, check DrainCheck) error {
	value, err := json.Marshal(check)
	if err != nil {
		return fmt.Errorf("encode drain check: %w", err)
	}
	return upsertSettings(s.DB.WithContext(ctx), map[string]string{keyLastDrainCheck: string(value)})
}

func (s *Store) load(db *gorm.DB) (State, error) {
	var rows []models.Setting
	keys := []string{keyActiveIndex, KeyActiveEndpoint, KeyPendingSwitch, keyLastSwitch, keyLastDrainCheck, keySeenUntil, keySeenAtMark, KeyProducerTrail}
	if err := db.Where("key IN ?", keys).Find(&rows).Error; err != nil {
		return State{}, fmt.Errorf("read broker settings: %w", err)
	}
	values := make(map[string]string, len(rows))
	for _, r := range rows {
		values[r.Key] = r.Value
	}
	var st State
	var err error
	if st.ActiveIndex, err = s.activeIndex(values); err != nil {
		return st, err
	}
	if err := decodeSetting(values, KeyPendingSwitch, &st.Pending); err != nil {
		return st, err
	}
	if err := decodeSetting(values, keyLastSwitch, &st.LastSwitch); err != nil {
		return st, err
	}
	if err := decodeSetting(values, keyLastDrainCheck, &st.LastDrainCheck); err != nil {
		return st, err
	}
	if v := values[keySeenUntil]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return st, fmt.Errorf("setting %s: %w", keySeenUntil, err)
		}
		st.SeenUntil = t
	}
	if v := values[keySeenAtMark]; v != "" {
		if err := json.Unmarshal([]byte(v), &st.SeenAtMark); err != nil {
			return st, fmt.Errorf("setting %s: %w", keySeenAtMark, err)
		}
	}
	if v := values[KeyProducerTrail]; v != "" {
		if err := json.Unmarshal([]byte(v), &st.Trail); err != nil {
			return st, fmt.Errorf("setting %s: %w", KeyProducerTrail, err)
		}
		for i, visit := range st.Trail.Visits {
			idx, ok := s.resolve(Ref{Host: visit.Host, Vhost: visit.Vhost})
			if !ok {
				idx = -1 // no longer configured: it keeps its place, and is on no route
			}
			st.Trail.Visits[i].Index = idx
		}
	}
	st.Pending = s.resolveRoute(st.Pending)
	return st, nil
}

// activeIndex is the active broker's configured index from its settings, -1 when it was
// removed from the configuration.
func (s *Store) activeIndex(values map[string]string) (int, error) {
	index := 0
	if v := values[keyActiveIndex]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("setting %s: %q is not a broker index", keyActiveIndex, v)
		}
		index = n
	}
	if v := values[KeyActiveEndpoint]; v != "" {
		var ref Ref
		if err := json.Unmarshal([]byte(v), &ref); err != nil {
			return 0, fmt.Errorf("setting %s: %w", KeyActiveEndpoint, err)
		}
		idx, ok := s.resolve(ref)
		if !ok {
			idx = -1 // the active broker was removed from the configuration
		}
		index = idx
	}
	return index, nil
}

// ErrNotActive says that the broker a consumer window reads is no longer the active one.
var ErrNotActive = errors.New("the broker is no longer the active one")

// ActiveCheck is the statement, with $n placeholders, that a consume batch of broker
// index runs last in its transaction, just before the commit: it takes the broker state's
// lock in shared mode and fails unless index is still the active broker (migration
// 0010's brokerswitch_hold_active), so that a switch's commit (Update, which takes the
// lock exclusively) waits for the batches that passed it and every later check sees the
// switch. No batch of the broker we left commits after the switch, even while a window's
// view of the state lags (its StateWatcher lost its LISTEN connection). It fails inside
// Postgres so that it can travel in one exchange with the batch's writes and COMMIT;
// NotActive tells its refusal from other errors.
func (s *Store) ActiveCheck(index int) (query string, args []any) {
	const q = "SELECT brokerswitch_hold_active($1, $2, $3)"
	if index < 0 || index >= len(s.Brokers) {
		return q, []any{"", "", -1} // no broker is active under that name
	}
	b := s.Brokers[index]
	return q, []any{b.Host, b.Vhost, index}
}

// notActiveCode is the SQLSTATE of ActiveCheck's refusal.
const notActiveCode = "BS001"

// NotActive returns ActiveCheck's refusal as an error wrapping ErrNotActive, and nil for
// any other err.
func (s *Store) NotActive(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == notActiveCode {
		return fmt.Errorf("%s: %w", pgErr.Message, ErrNotActive)
	}
	return nil
}

// resolveRoute re-resolves each hop by endpoint; a route whose target is no longer
// configured reads as no Pending Switch.
func (s *Store) resolveRoute(p *PendingSwitch) *PendingSwitch {
	if p == nil || len(p.Route) == 0 {
		return p
	}
	var route []Hop
	for _, h := range p.Route {
		if idx, ok := s.resolve(Ref{Host: h.Host, Vhost: h.Vhost}); ok {
			h.Index = idx
			route = append(route, h)
		}
	}
	if len(route) == 0 || route[len(route)-1].SwitchedAt != p.Target().SwitchedAt {
		return nil
	}
	return &PendingSwitch{Route: route, RecordedAt: p.RecordedAt}
}

// indexes are the configured brokers' indexes.
func (s *Store) indexes() []int {
	out := make([]int, len(s.Brokers))
	for i := range out {
		out[i] = i
	}
	return out
}

// resolve finds a broker's index by host (case-insensitive) and vhost.
func (s *Store) resolve(ref Ref) (int, bool) {
	for i, b := range s.Brokers {
		if strings.EqualFold(b.Host, ref.Host) && b.Vhost == ref.Vhost {
			return i, true
		}
	}
	return 0, false
}

func (s *Store) save(db *gorm.DB, st State) error {
	values := map[string]string{
		keyActiveIndex:    strconv.Itoa(st.ActiveIndex),
		KeyActiveEndpoint: "",
		KeyPendingSwitch:  "",
		keyLastSwitch:     "",
		keySeenUntil:      "",
		keySeenAtMark:     "",
		KeyProducerTrail:  "",
	}
	if st.ActiveIndex >= 0 && st.ActiveIndex < len(s.Brokers) {
		b, err := json.Marshal(s.Brokers[st.ActiveIndex])
		if err != nil {
			return fmt.Errorf("encode active broker: %w", err)
		}
		values[KeyActiveEndpoint] = string(b)
	}
	if st.Pending != nil {
		b, err := json.Marshal(st.Pending)
		if err != nil {
			return fmt.Errorf("encode pending switch: %w", err)
		}
		values[KeyPendingSwitch] = string(b)
	}
	if st.LastSwitch != nil {
		b, err := json.Marshal(st.LastSwitch)
		if err != nil {
			return fmt.Errorf("encode last switch: %w", err)
		}
		values[keyLastSwitch] = string(b)
	}
	if !st.SeenUntil.IsZero() {
		values[keySeenUntil] = st.SeenUntil.UTC().Format(time.RFC3339Nano)
	}
	if len(st.SeenAtMark) > 0 {
		b, err := json.Marshal(st.SeenAtMark)
		if err != nil {
			return fmt.Errorf("encode notifications seen at the mark: %w", err)
		}
		values[keySeenAtMark] = string(b)
	}
	if len(st.Trail.Visits) > 0 {
		b, err := json.Marshal(st.Trail)
		if err != nil {
			return fmt.Errorf("encode producer trail: %w", err)
		}
		values[KeyProducerTrail] = string(b)
	}
	return upsertSettings(db, values)
}

func upsertSettings(db *gorm.DB, values map[string]string) error {
	now := time.Now()
	rows := make([]models.Setting, 0, len(values))
	for k, v := range values {
		rows = append(rows, models.Setting{Key: k, Value: v, UpdatedAt: now})
	}
	err := db.Clauses(clause.OnConflict{
		Columns:   []clause.Column{{Name: "key"}},
		DoUpdates: clause.AssignmentColumns([]string{"value", "updated_at"}),
	}).Create(&rows).Error
	if err != nil {
		return fmt.Errorf("write settings: %w", err)
	}
	return nil
}

// decodeSetting reads a JSON setting; the empty string stands for none because the
// column is NOT NULL.
func decodeSetting[T any](values map[string]string, key string, into **T) error {
	v := values[key]
	if v == "" {
		return nil
	}
	var out T
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return fmt.Errorf("setting %s: %w", key, err)
	}
	*into = &out
	return nil
}

// SpareMarks reads the marks of queue by broker index, each with whether we were active
// there: queue's own, and the broker's reached mark.
func (s *Store) SpareMarks(ctx context.Context, queue string) (marks, reached map[int]SpareMark, err error) {
	var rows []struct {
		Host, Vhost, Queue string
		LastVisit          *time.Time
		Reached            bool
		DrainedAt          *time.Time
		HeldSince          *time.Time
	}
	if err := s.DB.WithContext(ctx).Raw(`SELECT host, vhost, queue, last_visit, reached, drained_at, held_since
		FROM spare_marks WHERE queue IN (?, '')`, queue).Scan(&rows).Error; err != nil {
		return nil, nil, fmt.Errorf("read spare marks of %s: %w", queue, err)
	}
	marks, reached = map[int]SpareMark{}, map[int]SpareMark{}
	for _, r := range rows {
		idx, ok := s.resolve(Ref{Host: r.Host, Vhost: r.Vhost})
		if !ok {
			continue
		}
		m := SpareMark{LastVisit: deref(r.LastVisit), Reached: r.Reached, DrainedAt: deref(r.DrainedAt), HeldSince: deref(r.HeldSince)}
		if r.Queue == "" {
			reached[idx] = m
		} else {
			marks[idx] = m
		}
	}
	return marks, reached, nil
}

// MarkSpare records what the Leftover Drain learned of queue on broker index.
func (s *Store) MarkSpare(ctx context.Context, index int, queue string, m SpareMark) error {
	return s.markSpare(s.DB.WithContext(ctx), index, queue, m)
}

func (s *Store) markSpare(db *gorm.DB, index int, queue string, m SpareMark) error {
	if index < 0 || index >= len(s.Brokers) {
		return fmt.Errorf("mark spare %d: not configured", index)
	}
	b := s.Brokers[index]
	err := db.Exec(`INSERT INTO spare_marks (host, vhost, queue, last_visit, reached, drained_at, held_since, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, now())
		ON CONFLICT (host, vhost, queue) DO UPDATE SET last_visit = excluded.last_visit, reached = excluded.reached,
			drained_at = excluded.drained_at, held_since = excluded.held_since, updated_at = now()`,
		strings.ToLower(b.Host), b.Vhost, queue, ref(m.LastVisit), m.Reached, ref(m.DrainedAt), ref(m.HeldSince)).Error
	if err != nil {
		return fmt.Errorf("mark %s on broker %d: %w", queue, index, err)
	}
	return nil
}

// HoldSpare dates queue on broker index as first seen holding messages of unknown place
// (m.HeldSince), under the producer's visit m.LastVisit, and writes nothing else, so
// that it loses no mark written since the caller read it (what a drain check and a
// Leftover Drain write race each other): a mark under that visit keeps its date seen
// empty, and its own held-since date if it has one. A mark still made under the visit the
// caller read it under (read, as SpareMarks gave it) says nothing of m's visit
// (CurrentMark) and is replaced by m; one made under another visit since is left alone.
// It returns the held-since date the mark has, zero when it was left alone.
func (s *Store) HoldSpare(ctx context.Context, index int, queue string, read time.Time, m SpareMark) (time.Time, error) {
	if index < 0 || index >= len(s.Brokers) {
		return time.Time{}, fmt.Errorf("hold spare %d: not configured", index)
	}
	b := s.Brokers[index]
	var since []time.Time
	err := s.DB.WithContext(ctx).Raw(`INSERT INTO spare_marks AS m (host, vhost, queue, last_visit, held_since, updated_at)
		VALUES (?, ?, ?, ?, ?, now())
		ON CONFLICT (host, vhost, queue) DO UPDATE SET
			held_since = CASE WHEN m.last_visit IS NOT DISTINCT FROM excluded.last_visit
				THEN coalesce(m.held_since, excluded.held_since) ELSE excluded.held_since END,
			drained_at = CASE WHEN m.last_visit IS NOT DISTINCT FROM excluded.last_visit THEN m.drained_at END,
			last_visit = excluded.last_visit, updated_at = now()
		WHERE m.last_visit IS NOT DISTINCT FROM excluded.last_visit OR m.last_visit IS NOT DISTINCT FROM ?
		RETURNING held_since`,
		strings.ToLower(b.Host), b.Vhost, queue, ref(m.LastVisit), ref(m.HeldSince), ref(read)).Scan(&since).Error
	if err != nil {
		return time.Time{}, fmt.Errorf("date %s on broker %d as held: %w", queue, index, err)
	}
	if len(since) == 0 {
		return time.Time{}, nil
	}
	return since[0].UTC(), nil
}

// markLeft records, in the transaction that moves the active broker away from cur at at,
// that we were active there: what it holds from now on is older than the next one's
// backlog, whether or not the producer's trail has a visit to it. What its queues' marks
// said of them from before (seen empty, holding messages never announced) is over: we
// read them since, and what our windows gave back comes without x-death. A force adds no
// visit to the trail, so without this a broker forced and left again would be read by a
// mark made before the force.
//
// A hop's commit then dates as seen empty the queues its drain check saw idle
// (DrainCheck.Idle): no window held any of their messages, so nothing comes back to them
// but from -retry or -error, and what else they hold later is the producer's future, a
// return it has not announced yet. Left undated, its first event there would read as a
// straggler to a Leftover Drain that came before the word. A force dates nothing: the
// producer may still be on the broker it leaves.
func (s *Store) markLeft(db *gorm.DB, cur, next State, at time.Time) error {
	from := cur.ActiveIndex
	if from == next.ActiveIndex || from < 0 || from >= len(s.Brokers) {
		return nil
	}
	b := s.Brokers[from]
	if err := db.Exec(`UPDATE spare_marks SET drained_at = NULL, held_since = NULL, updated_at = now()
		WHERE host = ? AND vhost = ? AND queue <> ''`, strings.ToLower(b.Host), b.Vhost).Error; err != nil {
		return fmt.Errorf("clear the marks of broker %d: %w", from, err)
	}
	visit, _ := next.lastVisitAt(from)
	for _, q := range seenIdleAtCommit(cur, next) {
		if err := s.markSpare(db, from, q, SpareMark{LastVisit: visit, DrainedAt: at}); err != nil {
			return err
		}
	}
	return s.markSpare(db, from, "", SpareMark{LastVisit: visit, Reached: true})
}

// seenIdleAtCommit is the queues the drain check that let next's hop commit saw idle: none
// unless next committed a hop from cur's active broker on a drain check of it.
func seenIdleAtCommit(cur, next State) []string {
	ls, check := next.LastSwitch, cur.LastDrainCheck
	if ls == nil || ls.Forced || ls.From != cur.ActiveIndex || ls.To != next.ActiveIndex ||
		check == nil || check.BrokerIndex != cur.ActiveIndex || !check.Drained() {
		return nil
	}
	return check.Idle
}

// Now is the time on Postgres' clock, the one the spares' marks and the trail's visits
// are dated by: the workers' and the producer's clocks may differ from it and from each
// other.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var at time.Time
	if err := s.DB.WithContext(ctx).Raw("SELECT clock_timestamp()").Scan(&at).Error; err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return at.UTC(), nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func ref(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.Truncate(time.Microsecond)
	return &t
}
