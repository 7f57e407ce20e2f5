package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// settings are the options a report needs to describe its figures.
type settings struct {
	Runs, Events int
	RTT          time.Duration
	RTTEvents    int
	LagBurst     int
}

// save writes the raw figures as JSON.
func (r *results) save(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// publish prints the table and writes the report, charts included.
func (r *results) publish(o options) error {
	report := r.table()
	fmt.Println(report.text())
	if err := r.writeMarkdown(o.out, report); err != nil {
		return err
	}
	return nil
}
