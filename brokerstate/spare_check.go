package brokerstate

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/brokerswitch/brokerswitch/models"
)

// ErrNotSpare is wrapped into a Leftover Drain batch's error when its broker became the
// active one, or came onto the Pending Switch's route, since the drain decided how to read
// it: the batch goes back unsettled, to be read as the broker's place now says.
var ErrNotSpare = errors.New("the broker is no longer a spare")

// notSpareCode is the SQLSTATE of SpareCheck's refusal.
const notSpareCode = "BS003"

// SpareCheck is the check that a Leftover Drain batch of broker index runs last in its
// transaction (migration 0013's brokerswitch_hold_spare): under the broker state's lock
// in shared mode, it fails unless index is neither the active broker nor on the Pending
// Switch's route, so that a drain that began before a notification was recorded reads
// nothing of that broker once it is. Its refusal wraps ErrNotSpare.
func (s *Store) SpareCheck(index int) models.Check {
	const q = "SELECT brokerswitch_hold_spare($1, $2, $3)"
	args := []any{"", "", index}
	if index >= 0 && index < len(s.Brokers) {
		b := s.Brokers[index]
		args = []any{b.Host, b.Vhost, index}
	}
	return models.Check{Query: q, Args: args, Refused: notSpare}
}

// notSpare returns SpareCheck's refusal as an error wrapping ErrNotSpare, and nil for any
// other err.
func notSpare(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == notSpareCode {
		return fmt.Errorf("%s: %w", pgErr.Message, ErrNotSpare)
	}
	return nil
}
