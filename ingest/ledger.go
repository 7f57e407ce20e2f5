package ingest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/brokerswitch/brokerswitch/models"
)

// maxRowsPerStatement bounds the rows one statement writes, whatever batch size the broker
// uses.
const maxRowsPerStatement = 1000

// maxTextLength bounds the free text (error reasons, actions, hook headers) kept in the
// ledger.
const maxTextLength = 4000

// ledgerColumns are the columns claimLedger writes, in the order of claimSQL's arrays.
const ledgerColumns = "delivery_id, event, action, queue, broker_index, outcome, error_reason, retry_cycles, " +
	"hook_id, hook_installation_target_id, hook_installation_target_type, received_at, applied_at, payload_sha256"

// claimSQL inserts the ledger rows given as one array per column. Its text is the same
// whatever the batch's size, so the driver prepares it once per connection and a batch
// never waits on a prepare. The conflict target is the ledger's key (migration 0008);
// delivery_id is set too so that RETURNING names this attempt's id even if another text
// had the same key. WITH ORDINALITY keeps the claims in the arrays' order.
const claimSQL = `INSERT INTO github_deliveries (` + ledgerColumns + `)
SELECT delivery_id, event, action, queue, broker_index, outcome, error_reason, retry_cycles,
       hook_id, hook_installation_target_id, hook_installation_target_type, received_at, applied_at, payload_sha256
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::integer[], $6::text[], $7::text[], $8::integer[],
              $9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::timestamptz[], $14::bytea[])
       WITH ORDINALITY AS r (delivery_id, event, action, queue, broker_index, outcome, error_reason, retry_cycles,
              hook_id, hook_installation_target_id, hook_installation_target_type, received_at, applied_at, payload_sha256, n)
 ORDER BY n
ON CONFLICT ((github_delivery_key(delivery_id))) DO UPDATE SET
	delivery_id = excluded.delivery_id, event = excluded.event, action = excluded.action, queue = excluded.queue,
	broker_index = excluded.broker_index, outcome = excluded.outcome,
	error_reason = excluded.error_reason, retry_cycles = excluded.retry_cycles,
	hook_id = excluded.hook_id, hook_installation_target_id = excluded.hook_installation_target_id,
	hook_installation_target_type = excluded.hook_installation_target_type,
	received_at = excluded.received_at, applied_at = excluded.applied_at,
	payload_sha256 = excluded.payload_sha256
	WHERE github_deliveries.outcome = 'error'
RETURNING delivery_id`

// claimLedger inserts the ledger rows and returns the delivery ids whose row was written;
// see queueClaim.
func claimLedger(ctx context.Context, conn batchSender, rows []models.Delivery) (map[string]bool, error) {
	p := newPipeline(ctx, conn)
	claimed := queueClaim(p, rows)
	if err := p.send(); err != nil {
		return nil, err
	}
	return claimed, nil
}

// queueClaim adds the insert of the ledger rows to p; the map it returns holds, once p
// sent it, the delivery ids whose row was written.
//
// An existing row is overwritten only when its outcome is error, so a delivery already
// applied or ignored is left alone and comes back missing from the result: that is how a
// redelivery is recognised. Because it is an INSERT, a concurrent transaction claiming
// the same delivery (another broker during a switch) makes this one wait for its outcome
// instead of both applying it.
//
// The rows are claimed in delivery id order, whatever the queue order: two batches that
// share deliveries (the active broker's and a Leftover Drain's during a switch) then wait
// on each other instead of each holding a row the other needs, which is a deadlock.
func queueClaim(p *pipeline, rows []models.Delivery) map[string]bool {
	rows = slices.SortedFunc(slices.Values(rows), func(a, b models.Delivery) int {
		return strings.Compare(a.DeliveryID, b.DeliveryID)
	})
	claimed := make(map[string]bool, len(rows))
	if len(rows) == 0 {
		return claimed
	}
	n := len(rows)
	ids, events, actions, queues := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	brokers, outcomes, reasons, cycles := make([]int32, n), make([]string, n), make([]string, n), make([]int32, n)
	hooks, targetIDs, targetTypes := make([]string, n), make([]string, n), make([]string, n)
	received, applied, hashes := make([]time.Time, n), make([]*time.Time, n), make([][]byte, n)
	for i, r := range rows {
		ids[i], events[i], actions[i], queues[i] = r.DeliveryID, r.Event, r.Action, r.Queue
		brokers[i], outcomes[i], reasons[i], cycles[i] = int32(r.BrokerIndex), string(r.Outcome), r.ErrorReason, int32(r.RetryCycles) //nolint:gosec // small counts
		hooks[i], targetIDs[i], targetTypes[i] = r.HookID, r.HookInstallationTargetID, r.HookInstallationTargetType
		received[i], applied[i], hashes[i] = r.ReceivedAt, r.AppliedAt, r.PayloadSHA256
	}
	p.queue(claimSQL, []any{ids, events, actions, queues, brokers, outcomes, reasons, cycles, hooks, targetIDs, targetTypes, received, applied, hashes},
		func(rs pgx.Rows) error {
			for rs.Next() {
				var id string
				if err := rs.Scan(&id); err != nil {
					return fmt.Errorf("write ledger rows: %w", err)
				}
				claimed[id] = true
			}
			return nil
		})
	return claimed
}

// queueHashes adds the read of the payload hashes the ledger holds for ids to p, leaving
// out rows that have none (written before migration 0004); the map it returns holds them,
// each under the id asked for, once p sent it. Queued after the claim in the same
// transaction, it reads committed rows. It is for redeliveries alone, so its text follows
// the count of ids: Postgres plans it for the ledger as it is, where a plan cached on a
// young ledger would read all of it.
func queueHashes(p *pipeline, ids []string) map[string][]byte {
	hashes := make(map[string][]byte, len(ids))
	for start := 0; start < len(ids); start += maxRowsPerStatement {
		chunk := ids[start:min(start+maxRowsPerStatement, len(ids))]
		values := make([]string, len(chunk))
		args := make([]any, len(chunk))
		for i, id := range chunk {
			values[i], args[i] = fmt.Sprintf("($%d::text)", i+1), id
		}
		p.queue(`SELECT asked.id, d.payload_sha256
			FROM (VALUES `+strings.Join(values, ", ")+`) AS asked (id)
			JOIN github_deliveries d ON github_delivery_key(d.delivery_id) = github_delivery_key(asked.id)
			WHERE d.payload_sha256 IS NOT NULL`, args, func(rs pgx.Rows) error {
			for rs.Next() {
				var id string
				var hash []byte
				if err := rs.Scan(&id, &hash); err != nil {
					return fmt.Errorf("read payload hashes: %w", err)
				}
				hashes[id] = hash
			}
			return nil
		})
	}
	return hashes
}

// cleanText makes free text storable in the ledger: Postgres text rejects NUL and invalid
// UTF-8, and a ledger row must never be what fails (a failure to record a malformed
// delivery would turn its Reject into a Retry).
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", `\x00`)
	if len(s) > maxTextLength {
		cut := maxTextLength
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
