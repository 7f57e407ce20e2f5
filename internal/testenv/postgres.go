package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresAdminDSNEnv names the environment variable holding the DSN of a maintenance
// database (usually "postgres") on a server where the test user may CREATE DATABASE.
const PostgresAdminDSNEnv = "BS_TEST_POSTGRES_DSN"

// NewDatabase creates a fresh, empty database bs_<random> and returns its DSN. The
// database is dropped (WITH (FORCE), so leftover connections do not block it) when the
// test ends.
func NewDatabase(t T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	admin, adminDSN := pgConnectAdmin(ctx, t)
	defer admin.Close(context.Background())

	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatalf("testenv: random database name: %v", err)
	}
	name := "bs_" + hex.EncodeToString(suffix[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminDSN)
		if err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})

	u, err := url.Parse(adminDSN)
	if err != nil {
		t.Fatalf("testenv: parse admin DSN: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// pgConnectAdmin connects to the maintenance database, returning the connection and the
// DSN that worked.
func pgConnectAdmin(ctx context.Context, t T) (*pgx.Conn, string) {
	t.Helper()
	candidates := []string{os.Getenv(PostgresAdminDSNEnv)}
	if candidates[0] == "" {
		// Developer machines and CI run a local server with trust auth and one of these
		// roles.
		candidates = []string{
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
			"postgres://root@127.0.0.1:5432/postgres?sslmode=disable",
		}
	}
	var lastErr error
	for _, dsn := range candidates {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			return conn, dsn
		}
		lastErr = err
	}
	t.Fatalf("testenv: no Postgres to create a test database on (start it with `make services`, or set %s): %v", PostgresAdminDSNEnv, lastErr)
	return nil, ""
}
