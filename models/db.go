// Package models holds the Postgres schema (versioned SQL migrations) and the gorm models
// of the tables brokerswitch writes.
package models

import (
	"context"
	"fmt"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Open connects to Postgres through gorm and checks the connection with ctx.
func Open(ctx context.Context, dsn string) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{
		Logger: logger.Discard,
		// Callers run their own transactions; gorm's implicit one per write only adds
		// round trips.
		SkipDefaultTransaction: true,
		// gorm's own ping ignores ctx; ping below instead.
		DisableAutomaticPing: true,
		// PrepareStmt stays off: pgx already prepares and caches every statement per
		// connection, so gorm's cache would only prepare twice.
	})
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return db, nil
}
