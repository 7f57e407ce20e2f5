// Package modelstest gives a test a database of its own at the newest schema. It is apart
// from internal/testenv because models' own tests use testenv, and migrating needs models.
package modelstest

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
)

// NewDB creates a database for the test, migrates it and opens it with models.Open; the
// pool is closed when the test ends. The DSN is for what opens connections of its own:
// a LISTEN, a reader's pool, a worker process.
func NewDB(t testenv.T) (*gorm.DB, string) {
	t.Helper()
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	db, err := models.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open the test database: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatalf("the test database's pool: %v", err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	if err := models.Migrate(ctx, sqlDB); err != nil {
		t.Fatalf("migrate the test database: %v", err)
	}
	return db, dsn
}

// NewPool opens an unbounded pgx pool on dsn, the kind an ingest.Ingester writes
// through; it is closed when the test ends.
func NewPool(t testenv.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := models.Connect(context.Background(), dsn, models.PoolConfig{})
	if err != nil {
		t.Fatalf("open a pool on the test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// GitHubTables are the tables written from GitHub's events: the ledger first, then the
// typed tables in the order their rows refer to one another least.
func GitHubTables() []string {
	return []string{
		models.Delivery{}.TableName(), models.PullRequest{}.TableName(), models.Issue{}.TableName(),
		models.Comment{}.TableName(), models.Push{}.TableName(), models.Branch{}.TableName(),
		models.Installation{}.TableName(), models.Repository{}.TableName(), models.User{}.TableName(),
	}
}
