package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runsAt are runs of n messages at each rate.
func runsAt(n int, rates ...float64) []throughput {
	var out []throughput
	for _, r := range rates {
		out = append(out, throughput{N: n, Elapsed: time.Duration(float64(n) / r * float64(time.Second))})
	}
	return out
}

func rowNamed(t *testing.T, rep report, prefix string) row {
	t.Helper()
	for _, r := range rep.rows {
		if strings.HasPrefix(r.Figure, prefix) {
			return r
		}
	}
	t.Fatalf("no row %q in %v", prefix, rep.rows)
	return row{}
}

// The table shows medians with their spread, the ratios between the figures, and a
// target's status from the figures themselves.
func TestTableComputesMediansRatiosAndTargets(t *testing.T) {
	r := &results{
		Settings: settings{Prefetch: 200},
		A:        runsAt(1000, 9000, 10000, 12000),
		B:        runsAt(1000, 1000, 1100, 900),
		Product:  runsAt(1000, 2900, 3000, 3500),
	}
	rep := r.table()
	a := rowNamed(t, rep, "Baseline A: bare consumer, ack only, prefetch 200")
	require.Equal(t, "10000 msg/s", a.Median)
	require.Equal(t, "9000–12000 (3 runs)", a.Spread)
	require.Equal(t, "E2E = 0.30×", a.Ratio)
	p := rowNamed(t, rep, "brokerswitch end to end")
	require.Equal(t, "3000 msg/s", p.Median)
	require.Equal(t, "3.00× B, 0.30× A", p.Ratio)
	require.Equal(t, "met", p.Status, "3000 is 3× B's 1000")

	r.Product = runsAt(1000, 2900)
	p = rowNamed(t, r.table(), "brokerswitch end to end")
	require.Equal(t, "**missed**", p.Status)
	require.Equal(t, "1 run", p.Spread)

	r.addLag(lagConfig{Name: "steady, default 3s", DrainInterval: "3s"}, lagResult{Rotations: []rotation{
		{Lag: 100 * time.Millisecond, Wait: 200 * time.Millisecond}, {Lag: 300 * time.Millisecond, Wait: 400 * time.Millisecond},
	}})
	r.addLag(lagConfig{Name: "steady, default 3s", DrainInterval: "3s"}, lagResult{Rotations: []rotation{{Lag: 2500 * time.Millisecond}}})
	lag := rowNamed(t, r.table(), "Switch lag, steady, default 3s")
	require.Equal(t, "0.30 s", lag.Median)
	require.Equal(t, "p95 2.50 s, n=3", lag.Spread, "the rotations of every run")
	require.Equal(t, "**missed**", lag.Status, "p95 < 2 s")
}

// The markdown table indents a sub-row with non-breaking spaces, and the report replaces
// only its generated block, keeping the hand-written text around it.
func TestReportReplacesOnlyItsBlock(t *testing.T) {
	rep := report{rows: []row{{Figure: "A", Median: "1"}, {Figure: "  of which B", Median: "2"}}}
	require.Equal(t, "| Figure | Median | Spread | Ratio | Target | Status |\n|---|---:|---|---|---|---|\n| A | 1 |  |  |  |  |\n| &nbsp;&nbsp;of which B | 2 |  |  |  |  |\n",
		rep.markdown())

	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	before, after := "# Benchmarks\n\nHand-written intro.\n\n", "\n\n## Analysis\n\nKept.\n"
	require.NoError(t, os.WriteFile(path, []byte(before+beginMarker+"\nold table\n"+endMarker+after), 0o644))
	r := &results{B: runsAt(1000, 1000)}
	require.NoError(t, r.writeMarkdown(path, r.table()))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), before+beginMarker), "the text before the block")
	require.True(t, strings.HasSuffix(string(got), endMarker+after), "the text after the block")
	require.NotContains(t, string(got), "old table")
	require.Contains(t, string(got), "| Baseline B: old design (prefetch 1, parse, 1 row in its own tx) | 1000 msg/s |")
}

// The report made from the saved figures (-report-from) holds every row of the table that
// BENCHMARKS.md publishes from them: no figure is lost to a change of the report's code.
func TestSavedFiguresGiveEveryPublishedRow(t *testing.T) {
	data, err := os.ReadFile("results.json")
	require.NoError(t, err)
	var r results
	require.NoError(t, json.Unmarshal(data, &r))
	got := r.table().markdown() + r.batchBreakdown()

	doc, err := os.ReadFile("../BENCHMARKS.md")
	require.NoError(t, err)
	block := string(doc)
	block = block[strings.Index(block, beginMarker):strings.Index(block, endMarker)]
	var published int
	for line := range strings.SplitSeq(block, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| Figure |") && !strings.HasPrefix(line, "| | ") {
			published++
			require.True(t, strings.Contains(got, line+"\n"), "the saved figures do not give the published row\n%s", line)
		}
	}
	require.Greater(t, published, 20, "BENCHMARKS.md's generated table")
}

// -only and -lag-scenarios pick figures and scenarios by the names the help and the table
// use.
func TestOptionsPickFiguresAndScenarios(t *testing.T) {
	o := options{only: "a, lag", lagRate: 50, lagBurst: 10}
	require.True(t, listed(o.only, "a"))
	require.True(t, listed(o.only, "lag"))
	require.False(t, listed(o.only, "b"))
	require.True(t, listed("", "catchup"), "empty: every figure")

	require.Len(t, lagConfigs(o, 2), 4)
	o.lagOnly = "burst-tuned-250ms, steady-default-3s"
	var names []string
	for _, c := range lagConfigs(o, 2) {
		names = append(names, c.Name)
		require.Equal(t, 2, c.Rotations)
		require.InDelta(t, 50, c.Rate, 0)
	}
	require.Equal(t, []string{"steady, default 3s", "burst, tuned 250ms"}, names)
}

// Small formats of the report.
func TestReportFormats(t *testing.T) {
	require.Equal(t, "1,234,567", commas(1234567))
	require.Equal(t, "999", commas(999))
	require.InDelta(t, 2.5, median([]float64{4, 1, 2, 3}), 1e-9)
	require.InDelta(t, 9, percentile([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90), 0)
	require.InDelta(t, 10, percentile([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95), 0)
}
