package models

import (
	"fmt"
	"io/fs"
)

// MigrationFiles lists the embedded migration file names, in order, for the tests of
// package models_test.
func MigrationFiles() ([]string, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}
