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
	Chart        string
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
	logf("raw figures written to %s", path)
	return nil
}

// publish prints the table and writes the chart and the report.
func (r *results) publish(o options) error {
	report := r.table()
	fmt.Println(report.text())
	if err := drawChart(o.chart, "brokerswitch: throughput and switch lag",
		fmt.Sprintf("%s · %d CPUs · %.0f GiB · %s · %s", r.Machine.CPUModel, r.Machine.CPUs, r.Machine.MemoryGiB,
			r.Machine.Go, r.Machine.Date.Format("2006-01-02")), r.panels()); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	logf("chart written to %s", o.chart)
	if err := r.writeMarkdown(o.out, report); err != nil {
		return err
	}
	logf("report written to %s", o.out)
	return nil
}

// rewriteReport regenerates the outputs from saved figures.
func rewriteReport(o options) error {
	data, err := os.ReadFile(o.reportFrom)
	if err != nil {
		return err
	}
	var r results
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("decode %s: %w", o.reportFrom, err)
	}
	r.Settings.Chart = o.chart
	return r.publish(o)
}
