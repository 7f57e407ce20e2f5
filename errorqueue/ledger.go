package errorqueue

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// markerRetention is how long error_requeues keeps a requeued message's key: far longer
// than a requeue run lasts, or than an interrupted one waits for its second run.
const markerRetention = 7 * 24 * time.Hour

// ledgerRow is the ledger's row of m's delivery, nil when it has none (a message
// without a delivery id, or one never applied: oversize, unreadable).
func (s *Service) ledgerRow(ctx context.Context, m Message) (*models.Delivery, error) {
	if m.deliveryID == "" {
		return nil, nil
	}
	var rows []models.Delivery
	err := s.DB.WithContext(ctx).Where("github_delivery_key(delivery_id) = github_delivery_key(?)", m.deliveryID).
		Limit(1).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read the ledger row of %s: %w", m.deliveryID, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// checkApplied sets m.AppliedSince from the ledger.
func (s *Service) checkApplied(ctx context.Context, m *Message) error {
	row, err := s.ledgerRow(ctx, *m)
	if err != nil {
		return err
	}
	m.AppliedSince = appliedSince(row, m.bodySHA)
	return nil
}

// appliedSince tells whether row shows the delivery applied (or ignored, having no table)
// with the body whose SHA-256 is sum: a delivery id reused with another payload is not.
func appliedSince(row *models.Delivery, sum [32]byte) bool {
	if row == nil || (row.Outcome != models.OutcomeApplied && row.Outcome != models.OutcomeIgnored) {
		return false
	}
	return row.PayloadSHA256 == nil || bytes.Equal(row.PayloadSHA256, sum[:])
}

// copiedBefore tells whether an earlier requeue run had m's copy confirmed.
func (s *Service) copiedBefore(ctx context.Context, m Message) (bool, error) {
	var n int64
	if err := s.DB.WithContext(ctx).Raw("SELECT count(*) FROM error_requeues WHERE message_key = decode(?, 'hex')", hex.EncodeToString(m.key)).Scan(&n).Error; err != nil {
		return false, fmt.Errorf("read error_requeues: %w", err)
	}
	return n > 0, nil
}

// The keys go to Postgres as hex: gorm spreads a []byte argument into a list.

// markCopied records that m's copy was confirmed, before m is taken from -error.
func (s *Service) markCopied(ctx context.Context, m Message) error {
	err := s.DB.WithContext(ctx).Exec(`INSERT INTO error_requeues (message_key, broker_index, queue, delivery_id)
		VALUES (decode(?, 'hex'), ?, ?, ?) ON CONFLICT (message_key) DO NOTHING`, hex.EncodeToString(m.key), m.Broker, m.Queue, m.deliveryID).Error
	if err != nil {
		return fmt.Errorf("record the requeue of %s in error_requeues: %w", m.ID, err)
	}
	return nil
}

// forgetOldMarkers deletes the keys of requeues older than markerRetention.
func (s *Service) forgetOldMarkers(ctx context.Context) error {
	err := s.DB.WithContext(ctx).Exec("DELETE FROM error_requeues WHERE copied_at < ?", time.Now().Add(-markerRetention)).Error
	if err != nil {
		return fmt.Errorf("delete old rows of error_requeues: %w", err)
	}
	return nil
}
