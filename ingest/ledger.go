package ingest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/models"
)

// maxRowsPerStatement bounds multi-row statements well below Postgres' 65535 bind
// parameters, whatever batch size the broker uses.
const maxRowsPerStatement = 1000

// maxTextLength bounds the free text (error reasons, actions, hook headers) kept in the
// ledger.
const maxTextLength = 4000

// ledgerColumns are the columns claimLedger writes, in bind order.
const ledgerColumns = "delivery_id, event, action, queue, broker_index, outcome, error_reason, retry_cycles, " +
	"hook_id, hook_installation_target_id, hook_installation_target_type, received_at, applied_at, payload_sha256"

const ledgerColumnCount = 14

// claimLedger inserts the ledger rows and returns the delivery ids whose row was written.
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
func claimLedger(ctx context.Context, tx *gorm.DB, rows []models.Delivery) (map[string]bool, error) {
	rows = slices.SortedFunc(slices.Values(rows), func(a, b models.Delivery) int {
		return strings.Compare(a.DeliveryID, b.DeliveryID)
	})
	claimed := make(map[string]bool, len(rows))
	for start := 0; start < len(rows); start += maxRowsPerStatement {
		chunk := rows[start:min(start+maxRowsPerStatement, len(rows))]
		var sql strings.Builder
		sql.WriteString("INSERT INTO github_deliveries (" + ledgerColumns + ") VALUES ")
		args := make([]any, 0, len(chunk)*ledgerColumnCount)
		for i, r := range chunk {
			if i > 0 {
				sql.WriteString(", ")
			}
			sql.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			args = append(args, r.DeliveryID, r.Event, r.Action, r.Queue, r.BrokerIndex, string(r.Outcome),
				r.ErrorReason, r.RetryCycles, r.HookID, r.HookInstallationTargetID, r.HookInstallationTargetType,
				r.ReceivedAt, r.AppliedAt, r.PayloadSHA256)
		}
		// The conflict target is the ledger's key (migration 0008); delivery_id is set too
		// so that RETURNING names this attempt's id even if another text had the same key.
		sql.WriteString(` ON CONFLICT ((github_delivery_key(delivery_id))) DO UPDATE SET
			delivery_id = excluded.delivery_id, event = excluded.event, action = excluded.action, queue = excluded.queue,
			broker_index = excluded.broker_index, outcome = excluded.outcome,
			error_reason = excluded.error_reason, retry_cycles = excluded.retry_cycles,
			hook_id = excluded.hook_id, hook_installation_target_id = excluded.hook_installation_target_id,
			hook_installation_target_type = excluded.hook_installation_target_type,
			received_at = excluded.received_at, applied_at = excluded.applied_at,
			payload_sha256 = excluded.payload_sha256
			WHERE github_deliveries.outcome = 'error'
			RETURNING delivery_id`)
		var ids []string
		if err := tx.WithContext(ctx).Raw(sql.String(), args...).Scan(&ids).Error; err != nil {
			return nil, fmt.Errorf("write ledger rows: %w", err)
		}
		for _, id := range ids {
			claimed[id] = true
		}
	}
	return claimed, nil
}

// storedHashes returns the payload hashes the ledger holds for ids, leaving out rows
// that have none (written before migration 0004). Called in the transaction that
// claimed them, after the claim waited for any concurrent one, it reads committed rows.
// Rows are found by the ledger's key, and each hash is returned under the id asked for.
func storedHashes(ctx context.Context, tx *gorm.DB, ids []string) (map[string][]byte, error) {
	hashes := make(map[string][]byte, len(ids))
	for start := 0; start < len(ids); start += maxRowsPerStatement {
		chunk := ids[start:min(start+maxRowsPerStatement, len(ids))]
		var rows []struct {
			ID            string
			PayloadSHA256 []byte
		}
		err := tx.WithContext(ctx).Raw(`SELECT asked.id, d.payload_sha256
			FROM (VALUES `+strings.Repeat("(?::text), ", len(chunk)-1)+`(?::text)) AS asked (id)
			JOIN github_deliveries d ON github_delivery_key(d.delivery_id) = github_delivery_key(asked.id)
			WHERE d.payload_sha256 IS NOT NULL`, anySlice(chunk)...).Scan(&rows).Error
		if err != nil {
			return nil, fmt.Errorf("read payload hashes: %w", err)
		}
		for _, r := range rows {
			hashes[r.ID] = r.PayloadSHA256
		}
	}
	return hashes, nil
}

// anySlice is ids as bind arguments.
func anySlice(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
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
