// Command dashboard writes the Grafana dashboard built by package dashboard into the files
// operators import or provision (`make dashboard`, run from the repository root).
package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/brokerswitch/brokerswitch/dashboard"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run() error {
	files, err := dashboard.Files()
	if err != nil {
		return err
	}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create the directory of %s: %w", path, err)
		}
		if err := os.WriteFile(path, files[path], 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Println("wrote", path)
	}
	return nil
}
