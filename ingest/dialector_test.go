package ingest

import (
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

func gormDialector(dsn string) gorm.Dialector { return postgres.Open(dsn) }
