//go:build integration

package models_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
)

// openMigrated opens a fresh database with every migration applied.
func openMigrated(t *testing.T) *gorm.DB {
	t.Helper()
	ctx := context.Background()
	db, err := models.Open(ctx, testenv.NewDatabase(t))
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	require.NoError(t, models.Migrate(ctx, sqlDB))
	return db
}

func TestMigrateIsIdempotent(t *testing.T) {
	db := openMigrated(t)
	sqlDB, err := db.DB()
	require.NoError(t, err)

	require.NoError(t, models.Migrate(context.Background(), sqlDB), "second run")

	var applied int
	require.NoError(t, db.Raw("SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&applied).Error)
	files, err := models.MigrationFiles()
	require.NoError(t, err)
	assert.Len(t, files, applied, "each migration recorded once")
}

func TestMigrateConcurrently(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := models.Open(ctx, dsn)
			if err != nil {
				errs[i] = err
				return
			}
			sqlDB, _ := db.DB()
			defer sqlDB.Close()
			errs[i] = models.Migrate(ctx, sqlDB)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

// TestModelsMatchSchema keeps the gorm models and the SQL migrations in step: every
// model field is a column and every column is a model field.
func TestModelsMatchSchema(t *testing.T) {
	db := openMigrated(t)
	for _, model := range []any{
		&models.Setting{}, &models.Delivery{}, &models.User{}, &models.Repository{}, &models.Installation{},
		&models.PullRequest{}, &models.Issue{}, &models.Comment{}, &models.Push{}, &models.Branch{},
	} {
		s, err := schema.Parse(model, &sync.Map{}, db.NamingStrategy)
		require.NoError(t, err)
		var fromModel []string
		for _, f := range s.Fields {
			if f.DBName != "" {
				fromModel = append(fromModel, f.DBName)
			}
		}
		var fromTable []string
		require.NoError(t, db.Raw(
			"SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = ?",
			s.Table).Scan(&fromTable).Error)
		sort.Strings(fromModel)
		sort.Strings(fromTable)
		assert.Equal(t, fromTable, fromModel, s.Table)
	}
}

func TestProcessingStateIsIndexed(t *testing.T) {
	db := openMigrated(t)
	for _, table := range []string{
		"github_users", "github_repositories", "github_installations", "github_pull_requests",
		"github_issues", "github_comments", "github_pushes", "github_branches",
	} {
		var n int
		require.NoError(t, db.Raw(
			"SELECT count(*) FROM pg_indexes WHERE tablename = ? AND indexdef LIKE '%(processing_state, processing_date)%'", table).Scan(&n).Error)
		assert.Equal(t, 1, n, table)
		// Readers claim through the partial index of the rows waiting for them (0006).
		var def string
		require.NoError(t, db.Raw("SELECT indexdef FROM pg_indexes WHERE indexname = ?", table+"_unprocessed_idx").Scan(&def).Error)
		assert.Contains(t, def, "(processing_date) WHERE (processing_state = ANY (ARRAY['NEW'::text, 'RE_REQUESTED'::text, 'UPDATED'::text]))", table)
	}
}

// GitHub numbers past 2^31 - 1 and a login longer than a btree index row fit the schema:
// such payloads must not fail deterministically.
func TestBigNumbersAndLongTextFit(t *testing.T) {
	db := openMigrated(t)
	now := time.Now()
	track := models.Tracking{DeliveryID: "d", LastDeliveryID: "d", ProcessingState: models.ProcessingState("NEW"), ProcessingDate: now}
	big := 3_000_000_000
	require.NoError(t, db.Create(&models.PullRequest{NodeID: "PR_big", ID: 1, RepositoryID: 1, RepositoryOwner: "o", RepositoryName: "r",
		Number: big, State: "open", Tracking: track}).Error)
	require.NoError(t, db.Create(&models.Issue{NodeID: "I_big", ID: 1, RepositoryID: 1, RepositoryOwner: "o", RepositoryName: "r",
		Number: big, State: "open", Tracking: track}).Error)
	require.NoError(t, db.Create(&models.Comment{NodeID: "C_big", Kind: models.KindIssueComment, ID: 1, RepositoryID: 1, Number: &big, Tracking: track}).Error)

	// Random text does not compress: 8 kB is well past a btree row's 2,704 bytes.
	long := make([]byte, 8<<10)
	_, err := rand.Read(long)
	require.NoError(t, err)
	login := hex.EncodeToString(long)
	require.NoError(t, db.Create(&models.User{ID: 1, Login: login, Tracking: track}).Error)
	require.NoError(t, db.Create(&models.Installation{ID: 1, AccountLogin: login, Tracking: track}).Error)
	var n int64
	require.NoError(t, db.Model(&models.User{}).Where("login = ?", login).Count(&n).Error)
	require.EqualValues(t, 1, n)
}
