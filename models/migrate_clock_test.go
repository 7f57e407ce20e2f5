//go:build integration

package models

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// Migration 0005 gives existing rows the clock they stored (github_updated_at, in whole
// seconds); rows without one, and every installation, keep none.
func TestMigration0005BackfillsEntityClocks(t *testing.T) {
	ctx := context.Background()
	db, provider := migratedTo(t, 4)

	row := `INSERT INTO github_pull_requests (node_id, id, repository_id, repository_owner, repository_name, number, state,
		github_updated_at, delivery_id, last_delivery_id, processing_state, processing_date) VALUES (?, 1, 1, 'o', 'r', 1, 'open', ?, 'd', 'd', 'NEW', now())`
	require.NoError(t, db.Exec(row, "with", time.Date(2019, 5, 15, 15, 20, 33, 400_000_000, time.UTC)).Error)
	require.NoError(t, db.Exec(row, "without", nil).Error)
	require.NoError(t, db.Exec(`INSERT INTO github_installations (id, app_id, account_id, account_login, account_type, delivery_id,
		last_delivery_id, processing_state, processing_date) VALUES (7, 1, 1, 'o', 'User', 'd', 'd', 'NEW', now())`).Error)
	_, err := provider.UpTo(ctx, 5)
	require.NoError(t, err)

	var with, without PullRequest
	require.NoError(t, db.Take(&with, "node_id = ?", "with").Error)
	require.NoError(t, db.Take(&without, "node_id = ?", "without").Error)
	require.NotNil(t, with.EntityClock)
	require.Equal(t, time.Date(2019, 5, 15, 15, 20, 33, 0, time.UTC), with.EntityClock.UTC())
	require.Nil(t, without.EntityClock, "no stored clock: older than anything")
	var inst Installation
	require.NoError(t, db.Take(&inst, "id = 7").Error)
	require.Nil(t, inst.EntityClock)
}

// migratedTo opens a new database migrated up to version, with the provider that takes it
// further: a migration's test fills the schema as it was before it, then runs it.
func migratedTo(t *testing.T, version int64) (*gorm.DB, *goose.Provider) {
	t.Helper()
	ctx := context.Background()
	db, err := Open(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	fsys, err := fs.Sub(migrations, "migrations")
	require.NoError(t, err)
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys)
	require.NoError(t, err)
	_, err = provider.UpTo(ctx, version)
	require.NoError(t, err)
	return db, provider
}
