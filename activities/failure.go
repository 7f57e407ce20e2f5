package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/healthchecks"
)

// failureKind names a window's failure for a HealthChecks /fail ping: the kind only,
// never the error's text, which names hosts, vhosts and delivery ids. The worker's logs
// and the Web UI keep the whole error.
func failureKind(err error) healthchecks.Kind {
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	var amqpErr *amqp.Error
	switch {
	case errors.Is(err, broker.ErrUnreachable):
		return "broker unreachable"
	case errors.Is(err, broker.ErrTopologyMismatch):
		return "topology mismatch"
	case errors.Is(err, broker.ErrExclusiveConsumer):
		return "queue already has a consumer"
	case errors.As(err, &connectErr):
		return "database unreachable"
	case errors.As(err, &pgErr):
		// A SQLSTATE is a code, not data: it tells a timeout from a constraint.
		return healthchecks.Kind("database error " + pgErr.Code)
	case errors.As(err, &amqpErr):
		return healthchecks.Kind(fmt.Sprintf("broker error %d", amqpErr.Code))
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "window failed"
	}
}
