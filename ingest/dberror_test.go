package ingest

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
)

func TestIsConnectionError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection failure class 08", &pgconn.PgError{Code: "08006"}, true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"wrapped admin shutdown", fmt.Errorf("apply: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"bad UTF-8", &pgconn.PgError{Code: "22021"}, false},
		{"query canceled", &pgconn.PgError{Code: "57014"}, false},
		{"net error", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused")}, true},
		{"bad conn", fmt.Errorf("x: %w", driver.ErrBadConn), true},
		{"EOF", io.EOF, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"deadline", context.DeadlineExceeded, true},
		{"plain error", errors.New("constraint"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, isConnectionError(tt.err))
		})
	}
}

func TestIsDatabaseWide(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"disk full", &pgconn.PgError{Code: "53100"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"io error", &pgconn.PgError{Code: "58030"}, true},
		{"read-only standby", fmt.Errorf("x: %w", &pgconn.PgError{Code: "25006"}), true},
		{"missing table", &pgconn.PgError{Code: "42P01"}, true},
		{"no unique index for ON CONFLICT", &pgconn.PgError{Code: "42P10"}, true},
		{"permission denied", &pgconn.PgError{Code: "42501"}, true},
		{"bad UTF-8 in one payload", &pgconn.PgError{Code: "22021"}, false},
		{"value too long for one payload", &pgconn.PgError{Code: "22001"}, false},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, false},
		{"not a Postgres error", errors.New("x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, isDatabaseWide(tt.err))
		})
	}
}

func TestIsTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true},
		{"deadlock", fmt.Errorf("x: %w", &pgconn.PgError{Code: "40P01"}), true},
		{"lock timeout", &pgconn.PgError{Code: "55P03"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"statement timeout is not: a batch that times out is isolated", &pgconn.PgError{Code: "57014"}, false},
		{"integer out of range", &pgconn.PgError{Code: "22003"}, false},
		{"not a Postgres error", errors.New("x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, isTransient(tt.err))
		})
	}
}

func TestIsDataError(t *testing.T) {
	for code, want := range map[string]bool{
		"22001": true, // string too long
		"22003": true, // integer out of range
		"22P02": true, // invalid text representation
		"22021": true, // NUL or bad UTF-8
		"23502": true, // not-null violation
		"23514": true, // check violation
		"54000": true, // index row size
		"40P01": false,
		"57014": false,
		"P0001": false,
	} {
		assert.Equal(t, want, isDataError(fmt.Errorf("x: %w", &pgconn.PgError{Code: code})), code)
	}
	assert.False(t, isDataError(errors.New("x")))
}
