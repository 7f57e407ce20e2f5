package ingest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// isConnectionError tells whether err means Postgres could not be reached or dropped the
// connection, as opposed to rejecting one statement. Such an error says nothing about the
// message being applied, so it must not send that message to -retry.
func isConnectionError(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection_exception class
			return true
		case pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03": // cannot_connect_now
			return true
		default:
			return false
		}
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	return errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		pgconn.Timeout(err)
}

// isDatabaseWide tells whether err means the database cannot apply anything right now,
// whatever the message: out of disk or memory, read-only after a failover, a schema or
// privileges that do not match this build. Retrying messages one by one would only send
// every one of them to -retry and break the queue order, so these stop the consumer like
// an unreachable server does.
func isDatabaseWide(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "53", // insufficient_resources: disk full, out of memory, too many connections
		"58": // system_error: I/O errors
		return true
	}
	switch pgErr.Code {
	case "25006", // read_only_sql_transaction: connected to a standby
		"3D000", // invalid_catalog_name: the database is gone
		"57P04", // database_dropped
		"42P01", // undefined_table: migrations not applied
		"42703", // undefined_column
		"42883", // undefined_function
		"42P10", // invalid_column_reference: an ON CONFLICT target the schema lacks (a release older than the migrations)
		"42501": // insufficient_privilege
		return true
	}
	return false
}

// isTransient tells whether err is Postgres turning a statement away because of what
// other sessions or the server's load did at that moment, not because of what the
// statement wrote: a serialization failure, a deadlock, a lock not granted within
// lock_timeout, or no free connection slot. Applying the same batch again shortly after
// is expected to work, so such an error must neither settle nor isolate anything:
// isolating would send healthy messages through -retry, out of queue order.
func isTransient(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"55P03", // lock_not_available: lock_timeout
		"53300", // too_many_connections
		"53400", // configuration_limit_exceeded
		"57P03": // cannot_connect_now: the server is starting
		return true
	}
	return false
}

// isTimeout tells whether err is a statement cancelled by statement_timeout (57014,
// query_canceled). It may be the server's load, or a message that is too costly to apply
// at all; HandleBatch tells them apart by applying the message alone (see timeoutAttempts).
func isTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// isDataError tells whether err says that the values written cannot be stored whatever
// the database's state: a data exception (class 22: a number out of
// range, a string too long, text Postgres cannot hold), an integrity constraint violation
// (class 23: not-null, check, foreign key, unique) or a program limit (class 54: an index
// row too large). Retrying the same payload gives the same error, so the message goes to
// -error at once.
func isDataError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}
