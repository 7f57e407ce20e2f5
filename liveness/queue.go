package liveness

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/models"
)

// ErrQueueTaken is wrapped into a batch's error when another attempt took its queue over
// since this one did (a worker paused or cut off that wakes after its successor started):
// the batch goes back unsettled.
var ErrQueueTaken = errors.New("another attempt took the queue over")

// queueTakenCode is the SQLSTATE of migration 0012's brokerswitch_hold_queue refusal.
const queueTakenCode = "BS002"

// takeQueue advances queue's fencing token (migration 0012) and returns its new
// generation. It waits for the batches of the holder before it that passed their check,
// and refuses every later one.
func takeQueue(tx *gorm.DB, queue string) (int64, error) {
	var generation int64
	err := tx.Raw(`INSERT INTO queue_fences (queue, generation) VALUES (?, 1)
		ON CONFLICT (queue) DO UPDATE SET generation = queue_fences.generation + 1, taken_at = now()
		RETURNING generation`, queue).Scan(&generation).Error
	if err != nil {
		return 0, fmt.Errorf("take queue %s over: %w", queue, err)
	}
	return generation, nil
}

// Checks are what every batch of this attempt runs last in its transaction: for an
// attempt that took a queue over, migration 0012's brokerswitch_hold_queue, which fails
// unless no attempt took the queue over since this one, its refusal turned into
// ErrQueueTaken. A nil Held checks nothing.
func (h *Held) Checks() []models.Check {
	if h == nil || h.queue == "" {
		return nil
	}
	return []models.Check{{
		Query:   "SELECT brokerswitch_hold_queue($1, $2)",
		Args:    []any{h.queue, h.generation},
		Refused: queueTaken,
	}}
}

// queueTaken returns brokerswitch_hold_queue's refusal as an error wrapping ErrQueueTaken,
// and nil for any other err.
func queueTaken(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == queueTakenCode {
		return fmt.Errorf("%s: %w", pgErr.Message, ErrQueueTaken)
	}
	return nil
}
