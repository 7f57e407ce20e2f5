//go:build integration

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// The oracle: from the simulator's log alone, what Postgres and the brokers must hold once
// every message was consumed. It writes the message contract and the Processing State
// rules out again, independently of package ingest, so that a bug there cannot hide
// itself.

// expectedRow is what the typed table must hold for an entity after its events were
// applied: the newest by the clock its payloads carry, equal or missing clocks in publish
// order. State is checked for pull requests and issues only; Clock (Unix seconds, 0 for
// none) for the tables that keep one.
type expectedRow struct {
	LastDeliveryID  string
	LastAction      string
	State           string
	ProcessingState string
	Clock           int64
}

// creates are the actions that create a row of the tables without a lifecycle that
// follow a clock: a row first seen through any other event is UPDATED, not NEW.
var creates = map[string]map[string]bool{
	simulate.EntityComment:      {"created": true, "submitted": true},
	simulate.EntityInstallation: {"created": true},
}

// tabled are the events that have a typed table; any other event is ledgered as ignored.
var tabled = map[string]bool{
	"pull_request": true, "issues": true, "issue_comment": true, "commit_comment": true,
	"pull_request_review_comment": true, "pull_request_review": true, "push": true, "create": true,
	"delete": true, "installation": true, "installation_repositories": true, "repository": true,
}

// expectation is what a log says the deployment must end up with.
type expectation struct {
	// published are the log's publish records by delivery id (poison included).
	published map[string]simulate.Record
	// good are the deliveries that must be applied (or ignored) once each.
	good []simulate.Record
	// poison are the messages that must end in -error.
	poison []simulate.Record
	// rows are the typed rows by entity.
	rows map[string]expectedRow
}

// expect computes the expectation from publish records in publish order.
func expect(records []simulate.Record) expectation {
	e := expectation{published: map[string]simulate.Record{}, rows: map[string]expectedRow{}}
	sorted := append([]simulate.Record(nil), records...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Seq < sorted[j].Seq })
	for _, r := range sorted {
		e.published[r.Delivery] = r
		if r.Poison {
			e.poison = append(e.poison, r)
			continue
		}
		e.good = append(e.good, r)
		applyRow(e.rows, r)
	}
	return e
}

// applyRow applies one good delivery to the expected rows, as the ingester must when it
// arrives in that order.
func applyRow(rows map[string]expectedRow, r simulate.Record) {
	if r.Entity == "" {
		return
	}
	kind, _, _ := strings.Cut(r.Entity, ":")
	row, exists := rows[r.Entity]
	// GitHub's clock: an event older than the row changes nothing but the ledger.
	clock := int64(0)
	if !r.Clock.IsZero() {
		clock = r.Clock.Unix()
	}
	if exists && clock != 0 && clock < row.Clock {
		return
	}
	newer := exists && clock != 0 && clock > row.Clock
	row.Clock = max(row.Clock, clock)
	row.LastDeliveryID = r.Delivery
	row.LastAction = r.Action
	if row.LastAction == "" {
		row.LastAction = r.Event // push, create, delete: the column says what happened
	}
	switch kind {
	case simulate.EntityPullRequest, simulate.EntityIssue:
		// The Processing State rules.
		switch {
		case r.Action == "opened" && exists:
			row.State, row.ProcessingState = "open", "RE_REQUESTED"
		case r.Action == "opened":
			row.State, row.ProcessingState = "open", "NEW"
		case r.Action == "reopened":
			row.State, row.ProcessingState = "open", "RE_REQUESTED"
		case r.Action == "closed":
			row.State, row.ProcessingState = "closed", "UPDATED"
		case !exists || newer:
			// Never seen before (its opened predates the log or is still on its way), or
			// newer than the row: the payload is GitHub's truth, state included.
			row.State, row.ProcessingState = cmp.Or(r.State, row.State, "open"), "UPDATED"
		case row.State == "closed":
			// Another action on a closed row, and no clock to tell it is newer: only
			// last_delivery_id and last_action change.
		default:
			row.ProcessingState = "UPDATED"
		}
	default:
		// Rows without lifecycle rules: NEW when created by the entity's creating event
		// (any event, for tables without a clock), UPDATED by every later one.
		row.ProcessingState = "NEW"
		if made, clocked := creates[kind]; exists || (clocked && !made[r.Action]) {
			row.ProcessingState = "UPDATED"
		}
	}
	rows[r.Entity] = row
}

// entityTables says where each kind of entity lives and how its key and clock are read.
var entityTables = map[string]struct{ table, key, state, clock string }{
	simulate.EntityPullRequest:  {"github_pull_requests", "node_id", "state", clockSeconds},
	simulate.EntityIssue:        {"github_issues", "node_id", "state", clockSeconds},
	simulate.EntityComment:      {"github_comments", "node_id", "''", clockSeconds},
	simulate.EntityPush:         {"github_pushes", "delivery_id", "''", "0"},
	simulate.EntityBranch:       {"github_branches", "repository_id || '/' || ref_type || '/' || ref", "''", "0"},
	simulate.EntityInstallation: {"github_installations", "id::text", "''", clockSeconds},
}

// clockSeconds reads a row's entity clock as Unix seconds, 0 for none.
const clockSeconds = "coalesce(extract(epoch FROM entity_clock)::bigint, 0)"

// auditSQL records, in a test-only table, every committed write of a ledger row (applied or
// ignored) and of a typed row, in commit order per row, with the transaction that wrote
// it: it shows what applied an event twice or out of order, which the final rows alone
// could hide. Every completed switch is kept too (broker.last_switch keeps only the last),
// so that each hop of a route can be checked.
const auditSQL = `
CREATE TABLE test_audit (
	id          bigserial PRIMARY KEY,
	tbl         text NOT NULL,
	key         text NOT NULL,
	delivery_id text NOT NULL,
	tx          bigint NOT NULL DEFAULT txid_current(),
	at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION test_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	k text;
BEGIN
	IF TG_TABLE_NAME = 'github_deliveries' THEN
		IF NEW.outcome = 'error' THEN
			RETURN NULL;
		END IF;
		INSERT INTO test_audit (tbl, key, delivery_id) VALUES (TG_TABLE_NAME, NEW.delivery_id, NEW.delivery_id);
		RETURN NULL;
	ELSIF TG_TABLE_NAME = 'github_pushes' THEN
		k := NEW.delivery_id;
	ELSIF TG_TABLE_NAME = 'github_branches' THEN
		k := NEW.repository_id || '/' || NEW.ref_type || '/' || NEW.ref;
	ELSIF TG_TABLE_NAME = 'github_installations' THEN
		k := NEW.id::text;
	ELSE
		k := NEW.node_id;
	END IF;
	INSERT INTO test_audit (tbl, key, delivery_id) VALUES (TG_TABLE_NAME, k, NEW.last_delivery_id);
	RETURN NULL;
END $$;
CREATE TABLE test_switches (
	id    bigserial PRIMARY KEY,
	value text NOT NULL
);
CREATE FUNCTION test_switches() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO test_switches (value) VALUES (NEW.value);
	RETURN NULL;
END $$;
CREATE TRIGGER test_switches AFTER INSERT OR UPDATE ON settings FOR EACH ROW
	WHEN (NEW.key = 'broker.last_switch' AND NEW.value <> '') EXECUTE FUNCTION test_switches();
`

// auditedTables are the tables whose every write the audit records: all but repositories
// and users, which events write beside the row they are about (a pull request's
// repository, its author), so the oracle judges order on the rows the events are about.
func auditedTables() []string {
	return slices.DeleteFunc(modelstest.GitHubTables(), func(t string) bool {
		return t == models.Repository{}.TableName() || t == models.User{}.TableName()
	})
}

func installAudit(t *testing.T, db *gorm.DB) {
	t.Helper()
	require.NoError(t, db.Exec(auditSQL).Error)
	for _, tbl := range auditedTables() {
		require.NoError(t, db.Exec(fmt.Sprintf(
			"CREATE TRIGGER test_audit AFTER INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION test_audit()", tbl)).Error)
	}
}

// verdict is what the oracle found.
type verdict struct {
	Published, Poison int
	// Applied counts the good deliveries in the ledger as applied or ignored.
	Applied int
	// Duplicates counts writes of a ledger or typed row by a delivery that had written it
	// already.
	Duplicates int
	// OrderViolations counts writes that came after a write of a later-published delivery:
	// to the same typed row, or, on the ledger, from the same queue.
	OrderViolations int
	// Lost counts good deliveries missing from the ledger.
	Lost int
	// Excused counts the deliveries applied after newer ones where an excuse allows it
	// (docs/tables.md, "What order cannot be kept"); ExcusedDeliveries names them.
	Excused           int
	ExcusedDeliveries []string
	// Retried counts deliveries that went through -retry though the log did not put them there.
	Retried int
	// Diffs list every difference, by entity and delivery.
	Diffs []string
}

func (v *verdict) diff(format string, args ...any) {
	v.Diffs = append(v.Diffs, fmt.Sprintf(format, args...))
}

// orderExempt tells the deliveries the log placed in a -retry queue: they come back after
// RETRY_TTL, behind messages published after them, by design.
func orderExempt(r simulate.Record) bool { return r.RoutingKey != "" }

// excuse names the deliveries docs/tables.md lets be applied after newer ones ("What order
// cannot be kept"), computed from a schedule: those published to Broker with a sequence
// number in (From, To] may follow newer deliveries published to other brokers. Their order
// among themselves, and every other delivery's, is checked as strictly as ever.
type excuse struct {
	Broker   int
	From, To int64
	Why      string
}

// covers tells whether the excuse lets late be applied after early.
func (x excuse) covers(late, early simulate.Record) bool {
	return late.Broker == x.Broker && late.Seq > x.From && late.Seq <= x.To && early.Broker != x.Broker
}

// excused tells whether some excuse lets late be applied after early.
func excused(excuses []excuse, late, early simulate.Record) bool {
	for _, x := range excuses {
		if x.covers(late, early) {
			return true
		}
	}
	return false
}

// check compares Postgres and the brokers with the expectation. It reads the brokers
// through pool, whose indexes are the producer's.
func (e expectation) check(t *testing.T, db *gorm.DB, pool *broker.Pool, brokers int, queues []string) verdict {
	t.Helper()
	return e.checkExcusing(t, db, pool, brokers, queues, nil)
}

// checkExcusing is check with excuses: a delivery they cover may be applied after newer
// ones of other brokers, and the rows of its entity must then be what the Processing
// State rules make of the order the deliveries arrived in.
func (e expectation) checkExcusing(t *testing.T, db *gorm.DB, pool *broker.Pool, brokers int, queues []string, excuses []excuse) verdict {
	t.Helper()
	v := verdict{Published: len(e.published), Poison: len(e.poison)}
	e.checkLedger(t, db, &v)
	arrival := e.checkAudit(t, db, &v, excuses)
	e.excusedRows(arrival, &v)
	e.checkRows(t, db, &v)
	e.checkQueues(t, pool, brokers, queues, &v)
	return v
}

// excusedRows recomputes the expected rows of every entity an excused delivery touched by
// applying that entity's deliveries in the order they arrived.
func (e *expectation) excusedRows(arrival []simulate.Record, v *verdict) {
	if v.Excused == 0 {
		return
	}
	touched := map[string]bool{}
	for _, d := range v.ExcusedDeliveries {
		if ent := e.published[d].Entity; ent != "" {
			touched[ent] = true
		}
	}
	rows := map[string]expectedRow{}
	for _, r := range arrival {
		if touched[r.Entity] {
			applyRow(rows, r)
		}
	}
	out := make(map[string]expectedRow, len(e.rows))
	for ent, row := range e.rows {
		if touched[ent] {
			row = rows[ent]
		}
		out[ent] = row
	}
	e.rows = out
}

func (e expectation) checkLedger(t *testing.T, db *gorm.DB, v *verdict) {
	type ledgerRow struct {
		DeliveryID  string
		Outcome     string
		RetryCycles int
		ErrorReason string
	}
	var rows []ledgerRow
	require.NoError(t, db.Raw("SELECT delivery_id, outcome, retry_cycles, error_reason FROM github_deliveries").Scan(&rows).Error)
	ledger := map[string]ledgerRow{}
	for _, r := range rows {
		ledger[r.DeliveryID] = r
		if _, ok := e.published[r.DeliveryID]; !ok {
			v.diff("ledger: delivery %s was never published", r.DeliveryID)
		}
	}
	for _, r := range e.good {
		got, ok := ledger[r.Delivery]
		want := "applied"
		if !tabled[r.Event] {
			want = "ignored"
		}
		switch {
		case !ok:
			v.Lost++
			v.diff("ledger: delivery %s (#%d %s %s of %s, broker %d) is missing: lost", r.Delivery, r.Seq, r.Event, r.Action, r.Entity, r.Broker)
		case got.Outcome != want:
			v.diff("ledger: delivery %s (#%d %s %s of %s) is %s (%s), want %s", r.Delivery, r.Seq, r.Event, r.Action, r.Entity, got.Outcome, got.ErrorReason, want)
		default:
			v.Applied++
		}
		if ok && got.RetryCycles > 0 && !orderExempt(r) {
			v.Retried++
			v.diff("ledger: delivery %s (#%d %s %s) went through -retry %d times", r.Delivery, r.Seq, r.Event, r.Action, got.RetryCycles)
		}
	}
	for _, r := range e.poison {
		got, ok := ledger[r.Delivery]
		if r.PoisonKind == simulate.PoisonMissingDelivery {
			if ok {
				v.diff("ledger: poison %s without a delivery header has a row", r.Delivery)
			}
			continue
		}
		if !ok || got.Outcome != "error" || got.ErrorReason == "" {
			v.diff("ledger: poison %s (%s) is %+v, want an error row with its reason", r.Delivery, r.PoisonKind, got)
		}
	}
}

func (e expectation) checkRows(t *testing.T, db *gorm.DB, v *verdict) {
	for kind, tbl := range entityTables {
		var rows []struct {
			Key             string
			LastDeliveryID  string
			LastAction      string
			State           string
			ProcessingState string
			Clock           int64
		}
		require.NoError(t, db.Raw(fmt.Sprintf(
			"SELECT %s AS key, last_delivery_id, last_action, %s AS state, processing_state, %s AS clock FROM %s",
			tbl.key, tbl.state, tbl.clock, tbl.table)).Scan(&rows).Error)
		got := map[string]expectedRow{}
		for _, r := range rows {
			got[kind+":"+r.Key] = expectedRow{r.LastDeliveryID, r.LastAction, r.State, r.ProcessingState, r.Clock}
		}
		for entity, w := range e.rows {
			if !strings.HasPrefix(entity, kind+":") {
				continue
			}
			g, ok := got[entity]
			delete(got, entity)
			if !ok {
				v.diff("%s: no row, want last delivery %s (%s)", entity, w.LastDeliveryID, w.LastAction)
				continue
			}
			if g != w {
				v.diff("%s: got last delivery %s (#%d %s) state %q %s clock %d, want %s (#%d %s) state %q %s clock %d", entity,
					g.LastDeliveryID, e.published[g.LastDeliveryID].Seq, g.LastAction, g.State, g.ProcessingState, g.Clock,
					w.LastDeliveryID, e.published[w.LastDeliveryID].Seq, w.LastAction, w.State, w.ProcessingState, w.Clock)
			}
		}
		for entity := range got {
			v.diff("%s: a row that no published event explains", entity)
		}
	}
}

// checkAudit counts duplicates and order violations from the audit trail, but for what
// the excuses allow, and returns the good deliveries in the order they arrived.
func (e expectation) checkAudit(t *testing.T, db *gorm.DB, v *verdict, excuses []excuse) []simulate.Record {
	var audit []struct {
		Tbl, Key, DeliveryID string
		Tx                   int64
	}
	require.NoError(t, db.Raw("SELECT tbl, key, delivery_id, tx FROM test_audit ORDER BY id").Scan(&audit).Error)
	type rowKey struct{ tbl, key string }
	written := map[rowKey]map[string]bool{}
	// A typed row's highest writer so far, overall and per broker (an excused delivery
	// must still follow its own broker's order).
	lastSeq, lastBy := map[rowKey]int64{}, map[rowKey]map[int]int64{}
	lastDelivery := map[rowKey]string{}
	// The ledger rows of one transaction commit together, and the ingester claims them in
	// delivery id order so that concurrent claims cannot deadlock: their order inside the
	// transaction is no order anyone can see. A ledger row is compared with what earlier
	// transactions of its queue applied, overall and from its broker.
	queue, perBroker := newTxMax(), newTxMax()
	// timeline says, per queue, from which brokers deliveries were applied, run by run:
	// "b0×120 b1×35", the first thing to read when the order broke.
	timeline := map[string][]string{}
	run := map[string][2]int{} // queue → broker, length of the current run
	excusedSeen := map[string]bool{}
	excuse := func(d string) {
		if !excusedSeen[d] {
			excusedSeen[d] = true
			v.Excused++
			v.ExcusedDeliveries = append(v.ExcusedDeliveries, d)
		}
	}
	// arrival: the ledger's deliveries by transaction, in the order their transactions
	// committed, in publish order inside one (one batch of one broker's queue).
	var arrival []simulate.Record
	var tx []simulate.Record
	lastTx := int64(-1)
	flush := func() {
		sort.Slice(tx, func(i, j int) bool { return tx[i].Seq < tx[j].Seq })
		arrival, tx = append(arrival, tx...), nil
	}
	for _, a := range audit {
		k := rowKey{a.Tbl, a.Key}
		if written[k] == nil {
			written[k] = map[string]bool{}
		}
		if written[k][a.DeliveryID] {
			v.Duplicates++
			v.diff("%s %s: delivery %s written twice", a.Tbl, a.Key, a.DeliveryID)
			continue
		}
		written[k][a.DeliveryID] = true
		r, ok := e.published[a.DeliveryID]
		if ok && a.Tbl == "github_deliveries" && !r.Poison {
			if a.Tx != lastTx {
				flush()
				lastTx = a.Tx
			}
			tx = append(tx, r)
		}
		if !ok || orderExempt(r) {
			continue
		}
		if a.Tbl == "github_deliveries" {
			qb := fmt.Sprintf("%s/%d", r.Queue, r.Broker)
			queue.begin(r.Queue, a.Tx)
			perBroker.begin(qb, a.Tx)
			if cur, ok := run[r.Queue]; ok && cur[0] == r.Broker {
				run[r.Queue] = [2]int{cur[0], cur[1] + 1}
			} else {
				if ok {
					timeline[r.Queue] = append(timeline[r.Queue], fmt.Sprintf("b%d×%d", cur[0], cur[1]))
				}
				run[r.Queue] = [2]int{r.Broker, 1}
			}
			if r.Seq < queue.max[r.Queue] {
				early := e.published[queue.delivery[r.Queue]]
				switch {
				case excused(excuses, r, early) && r.Seq > perBroker.max[qb]:
					excuse(r.Delivery)
				default:
					v.OrderViolations++
					v.diff("queue %s: delivery %s (#%d %s %s, broker %d) applied after %s (#%d, broker %d)", r.Queue, r.Delivery, r.Seq,
						r.Event, r.Action, r.Broker, early.Delivery, early.Seq, early.Broker)
				}
			}
			queue.see(r.Queue, r)
			perBroker.see(qb, r)
			continue
		}
		if lastBy[k] == nil {
			lastBy[k] = map[int]int64{}
		}
		if r.Seq < lastSeq[k] {
			early := e.published[lastDelivery[k]]
			if excused(excuses, r, early) && r.Seq > lastBy[k][r.Broker] {
				excuse(r.Delivery)
			} else {
				v.OrderViolations++
				v.diff("%s %s: delivery %s (#%d %s) applied after #%d", a.Tbl, a.Key, a.DeliveryID, r.Seq, r.Action, lastSeq[k])
			}
		}
		if r.Seq > lastSeq[k] {
			lastSeq[k], lastDelivery[k] = r.Seq, r.Delivery
		}
		lastBy[k][r.Broker] = max(lastBy[k][r.Broker], r.Seq)
	}
	flush()
	if v.OrderViolations > 0 {
		for q, cur := range run {
			v.diff("queue %s applied, by broker: %s", q, strings.Join(append(timeline[q], fmt.Sprintf("b%d×%d", cur[0], cur[1])), " "))
		}
	}
	return arrival
}

// txMax keeps, per key, the highest sequence number that earlier transactions applied:
// a transaction's own highest joins it once the key's next transaction begins.
type txMax struct {
	max, txHigh          map[string]int64
	delivery, txDelivery map[string]string
	tx                   map[string]int64
}

func newTxMax() *txMax {
	return &txMax{max: map[string]int64{}, txHigh: map[string]int64{}, delivery: map[string]string{},
		txDelivery: map[string]string{}, tx: map[string]int64{}}
}

// begin notes that key's next ledger row was written by transaction tx.
func (m *txMax) begin(key string, tx int64) {
	if m.tx[key] == tx {
		return
	}
	if m.txHigh[key] > m.max[key] {
		m.max[key], m.delivery[key] = m.txHigh[key], m.txDelivery[key]
	}
	m.tx[key], m.txHigh[key] = tx, 0
}

// see notes a delivery of key's current transaction.
func (m *txMax) see(key string, r simulate.Record) {
	if r.Seq > m.txHigh[key] {
		m.txHigh[key], m.txDelivery[key] = r.Seq, r.Delivery
	}
}

// checkQueues: every queue and -retry queue on every broker is empty, and -error holds
// exactly the poison published to that broker and queue, each with its reason.
func (e expectation) checkQueues(t *testing.T, pool *broker.Pool, brokers int, queues []string, v *verdict) {
	wantErrors := map[string]bool{}
	for _, r := range e.poison {
		wantErrors[fmt.Sprintf("%d/%s/%s", r.Broker, broker.ErrorQueue(r.Queue), r.Delivery)] = true
	}
	seen := map[string]bool{}
	ctx := context.Background()
	for b := range brokers {
		names := withRetryQueues(queues)
		counts, err := pool.ReadyCounts(ctx, b, names)
		require.NoError(t, err)
		for _, q := range names {
			if counts[q] != 0 {
				v.diff("broker %d: %s holds %d messages, want none", b, q, counts[q])
			}
		}
		for _, q := range queues {
			for _, msg := range peek(t, pool, b, broker.ErrorQueue(q)) {
				key := fmt.Sprintf("%d/%s/%s", b, broker.ErrorQueue(q), msg.MessageId)
				reason, _ := msg.Headers[broker.HeaderErrorReason].(string)
				switch {
				case seen[key]:
					v.diff("broker %d: %s holds poison %s more than once", b, broker.ErrorQueue(q), msg.MessageId)
				case !wantErrors[key]:
					v.diff("broker %d: %s holds message %s, which was not sent as poison", b, broker.ErrorQueue(q), msg.MessageId)
				case reason == "":
					v.diff("broker %d: %s holds poison %s without a reason", b, broker.ErrorQueue(q), msg.MessageId)
				}
				delete(wantErrors, key)
				seen[key] = true
			}
		}
	}
	for key := range wantErrors {
		v.diff("poison %s did not reach -error", key)
	}
}

// peek reads every message of a queue and puts them all back.
func peek(t *testing.T, pool *broker.Pool, index int, queue string) []amqp.Delivery {
	t.Helper()
	ch, err := pool.Channel(context.Background(), index)
	require.NoError(t, err)
	defer ch.Close() // unacknowledged: all go back, in order
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		require.NoError(t, err)
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// settled tells whether every delivery of the expectation has been dealt with: the good
// ones applied or ignored, the poison in -error, and no queue or -retry queue holding a
// message. The last matters because a window fenced after its batch committed puts the
// batch back unsettled: its messages are in the ledger already and wait to be taken
// again and acknowledged as duplicates, which the oracle would otherwise catch half done.
func (s *stack) settled(e expectation) bool {
	if s.Applied() < int64(len(e.good)) {
		return false
	}
	perBroker := map[int]int{}
	for _, r := range e.poison {
		perBroker[r.Broker]++
	}
	for b, want := range perBroker {
		if got, err := s.Ready(b, s.ErrorQueues()...); err != nil || got < want {
			return false
		}
	}
	return s.queuesEmpty()
}

// withRetryQueues is queues, each followed by its -retry queue.
func withRetryQueues(queues []string) []string {
	var names []string
	for _, q := range queues {
		names = append(names, q, broker.RetryQueue(q))
	}
	return names
}

// queuesEmpty tells whether no broker holds a message ready in a queue or -retry queue.
func (s *stack) queuesEmpty() bool {
	for b := range s.Config.Brokers {
		if !s.drained(b) {
			return false
		}
	}
	return true
}

// verify waits until the log's deliveries are settled (for within × patience at most),
// then runs the oracle on the log file and fails the test on any difference. It returns
// the verdict for the summary.
func (s *stack) verify(log string, within time.Duration) verdict {
	s.t.Helper()
	return s.verifyExcusing(log, within, nil)
}

// verifyExcusing is verify with excuses (see excuse).
func (s *stack) verifyExcusing(log string, within time.Duration, excuses []excuse) verdict {
	s.t.Helper()
	e := expectFromFile(s.t, log)
	deadline := time.Now().Add(within * patience)
	for !s.settled(e) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	// Let a message still in flight, if there were one too many, show itself.
	time.Sleep(300 * time.Millisecond)
	return e.checkExcusing(s.t, s.DB, s.Direct, len(s.Config.Brokers), s.Config.Queues, excuses)
}

// expectFromFile reads a simulator log and computes its expectation.
func expectFromFile(t *testing.T, path string) expectation {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	l, err := simulate.ReadLog(f)
	require.NoError(t, err)
	return expect(l.Published)
}

// excusedLine says what the excuses allowed and which deliveries they excused.
func (v verdict) excusedLine(excuses []excuse) string {
	if len(excuses) == 0 {
		return "nothing: the schedule draws no order docs/tables.md says cannot be kept"
	}
	var why []string
	for _, x := range excuses {
		why = append(why, fmt.Sprintf("broker %d's events among #%d–#%d may follow newer events of other brokers (%s)", x.Broker, x.From+1, x.To, x.Why))
	}
	out := strings.Join(why, "; ") + fmt.Sprintf("; %d of them did", v.Excused)
	if v.Excused > 0 {
		shown := v.ExcusedDeliveries
		if len(shown) > 20 {
			shown = append(shown[:20:20], fmt.Sprintf("and %d more", len(v.ExcusedDeliveries)-20))
		}
		out += ": " + strings.Join(shown, " ")
	}
	return out
}

// requireClean fails the test with every difference the oracle found.
func requireClean(t *testing.T, v verdict) {
	t.Helper()
	if len(v.Diffs) > 0 {
		shown := append([]string(nil), v.Diffs...)
		sort.SliceStable(shown, func(i, j int) bool {
			return strings.Contains(shown[i], "applied, by broker") && !strings.Contains(shown[j], "applied, by broker")
		})
		if len(shown) > 50 {
			shown = append(shown[:50:50], fmt.Sprintf("... and %d more", len(v.Diffs)-50))
		}
		t.Fatalf("the oracle found %d differences (applied %d/%d, duplicates %d, order violations %d, lost %d):\n  %s",
			len(v.Diffs), v.Applied, v.Published-v.Poison, v.Duplicates, v.OrderViolations, v.Lost, strings.Join(shown, "\n  "))
	}
}
