package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// settings are the options a report needs to describe its figures.
type settings struct {
	Runs, Events int
	RTT          time.Duration
	RTTEvents    int
	LagBurst     int
	// Prefetch is the service's default, which Baseline A uses too.
	Prefetch int
}

// results collects every figure of one invocation.
type results struct {
	Settings settings
	Machine  machine
	Command  string
	Corpus   corpusStats
	A        []throughput
	B        []throughput
	Product  []throughput
	// BRTT and ProductRTT are B and the service with Options.rtt injected.
	BRTT, ProductRTT []throughput
	MeasuredRTT      time.Duration
	// Background is the machine's load in the 3 s before the first figure.
	Background cpuUse
	LoadAvg    string
	// The wall clock against the monotonic clock over the run.
	ClockSteps       int
	ClockLargestStep time.Duration
	ClockSlew        time.Duration
	LagOrder         []string
	LagCfg           map[string]lagConfig
	Lag              map[string][]lagResult
	CatchUp          *catchUpResult
	Actions          *actionsResult
	// RSS is the worker's peak resident set in each case of the peak-RSS figure.
	RSS      []rssResult
	Failures []string
}

func (r *results) addLag(cfg lagConfig, lr lagResult) {
	if r.Lag == nil {
		r.Lag, r.LagCfg = map[string][]lagResult{}, map[string]lagConfig{}
	}
	if _, ok := r.Lag[cfg.Name]; !ok {
		r.LagOrder = append(r.LagOrder, cfg.Name)
		r.LagCfg[cfg.Name] = cfg
	}
	r.Lag[cfg.Name] = append(r.Lag[cfg.Name], lr)
}

func rates(ts []throughput) []float64 {
	out := make([]float64, len(ts))
	for i, t := range ts {
		out[i] = t.rate()
	}
	return out
}

func spread(xs []float64, format string) string {
	if len(xs) < 2 {
		return "1 run"
	}
	return fmt.Sprintf(format+"–"+format+" (%d runs)", slices.Min(xs), slices.Max(xs), len(xs))
}

func lagSeconds(rots []rotation) (lags, waits []float64) {
	for _, r := range rots {
		lags = append(lags, r.Lag.Seconds())
		waits = append(waits, r.Wait.Seconds())
	}
	return lags, waits
}

// row is one line of the table.
type row struct{ Figure, Median, Spread, Ratio, Target, Status string }

// report is the table's rows, in order.
type report struct{ rows []row }

func status(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func (r *results) table() report {
	var rep report
	add := func(rw row) { rep.rows = append(rep.rows, rw) }
	a, b, p := median(rates(r.A)), median(rates(r.B)), median(rates(r.Product))
	ratio := func(x, y float64) string {
		if x == 0 || y == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", x/y)
	}
	if len(r.A) > 0 {
		add(row{fmt.Sprintf("Baseline A: bare consumer, ack only, prefetch %d (the service's)", r.Settings.Prefetch), fmt.Sprintf("%.0f msg/s", a), spread(rates(r.A), "%.0f"), "E2E = " + ratio(p, a), "the limit", ""})
	}
	if len(r.B) > 0 {
		add(row{"Baseline B: old design (prefetch 1, parse, 1 row in its own tx)", fmt.Sprintf("%.0f msg/s", b), spread(rates(r.B), "%.0f"), "E2E = " + ratio(p, b), "", ""})
	}
	if len(r.Product) > 0 {
		add(row{"brokerswitch end to end (Temporal windows, typed tables + ledger)", fmt.Sprintf("%.0f msg/s", p), spread(rates(r.Product), "%.0f"),
			fmt.Sprintf("%s B, %s A", ratio(p, b), ratio(p, a)), "≥ 3× B", statusIf(b > 0, p >= 3*b)})
		add(startupRow(r.Product))
	}
	if len(r.BRTT) > 0 && len(r.ProductRTT) > 0 {
		br, pr := median(rates(r.BRTT)), median(rates(r.ProductRTT))
		add(row{fmt.Sprintf("Baseline B with %s RTT to RabbitMQ and Postgres (injected, measured %s; %s msgs per run)", r.Settings.RTT, r.MeasuredRTT.Round(10*time.Microsecond), commas(int64(r.Settings.RTTEvents))), fmt.Sprintf("%.0f msg/s", br), spread(rates(r.BRTT), "%.0f"),
			"E2E = " + ratio(pr, br), "", ""})
		add(row{fmt.Sprintf("brokerswitch end to end with %s RTT (injected; %s msgs per run)", r.Settings.RTT, commas(int64(r.ProductRTT[0].N))), fmt.Sprintf("%.0f msg/s", pr), spread(rates(r.ProductRTT), "%.0f"),
			ratio(pr, br) + " B, " + ratio(pr, p) + " loopback E2E", "≥ 15× B, ≥ 0.85× loopback", statusIf(br > 0, pr >= 15*br && (p == 0 || pr >= 0.85*p))})
		add(startupRow(r.ProductRTT))
	}
	if pg := batchRuns(r.ProductRTT, func(b *batchSummary) float64 { return b.FullPGRoundTrips }); len(pg) > 0 {
		amqp := batchRuns(r.ProductRTT, func(b *batchSummary) float64 { return b.AMQPRoundTrips })
		all := batchRuns(r.ProductRTT, func(b *batchSummary) float64 { return b.PGRoundTrips })
		size := r.ProductRTT[len(r.ProductRTT)-1].Batches.FullSize
		add(row{fmt.Sprintf("  … Postgres round trips per batch of %d (statements and transaction control, on the wire)", size), fmt.Sprintf("%.0f", median(pg)), spread(pg, "%.0f"),
			fmt.Sprintf("any batch: %.0f; AMQP round trips per batch: %.0f", median(all), median(amqp)), "≤ 6", status(median(pg) <= 6)})
	}
	for _, name := range r.LagOrder {
		var rots []rotation
		for _, lr := range r.Lag[name] {
			rots = append(rots, lr.Rotations...)
		}
		lags, waits := lagSeconds(rots)
		cfg := r.LagCfg[name]
		target, st := "", ""
		if cfg.DrainInterval == "3s" {
			target, st = "p95 < 2 s", status(percentile(lags, 95) < 2)
		}
		add(row{fmt.Sprintf("Switch lag, %s", name), fmt.Sprintf("%.2f s", median(lags)),
			fmt.Sprintf("p95 %.2f s, n=%d", percentile(lags, 95), len(lags)),
			fmt.Sprintf("rotation → 1st new applied: %.2f s (p95 %.2f)", median(waits), percentile(waits, 95)), target, st})
	}
	if c := r.CatchUp; c != nil {
		rate := float64(c.Backlog+c.OnNew) / c.Done.Seconds()
		add(row{fmt.Sprintf("Catch-up: %s on the old broker at rotation (+%s on the new), until all applied and switched", commas(int64(c.Backlog)), commas(int64(c.OnNew))),
			fmt.Sprintf("%.1f s", c.Done.Seconds()), "1 run",
			fmt.Sprintf("%.0f msg/s = %s E2E", rate, ratio(rate, p)), "", ""})
		add(row{"Peak RSS of `brokerswitch worker` during the catch-up (VmHWM)", fmt.Sprintf("%.0f MB", c.PeakRSSMB), "1 run", "", "< 150 MB", status(c.PeakRSSMB < 150)})
	}
	r.actionRows(add)
	r.deliveryRows(add)
	r.rssRows(add)
	return rep
}

// startupRow is the time from the worker's start to its first applied event, over runs.
func startupRow(ts []throughput) row {
	var starts []float64
	for _, t := range ts {
		starts = append(starts, t.Startup.Seconds())
	}
	return row{"  of which worker start → first event applied", fmt.Sprintf("%.2f s", median(starts)), spread(starts, "%.2f"), "", "", ""}
}

func statusIf(known, ok bool) string {
	if !known {
		return "?"
	}
	return status(ok)
}

// deliveryRows are the AMQP deliveries per event the counting proxies saw: one each,
// however the switches fall.
func (r *results) deliveryRows(add func(row)) {
	var steady, burst []float64
	for _, name := range r.LagOrder {
		for _, lr := range r.Lag[name] {
			per := float64(lr.Traffic.Deliveries()) / float64(lr.Events)
			if r.LagCfg[name].Burst == 0 {
				steady = append(steady, per)
			} else {
				burst = append(burst, per)
			}
		}
	}
	if len(steady) > 0 {
		m := median(steady)
		add(row{"Messages delivered per event, steady state with rotations (AMQP frames on the wire)", fmt.Sprintf("%.3f", m), spread(steady, "%.3f"), "", "1 per event", status(m <= 1.01)})
	}
	if len(burst) > 0 {
		add(row{fmt.Sprintf("  … with a %s-event burst at each rotation", commas(int64(r.Settings.LagBurst))), fmt.Sprintf("%.3f", median(burst)), spread(burst, "%.3f"), "", "", ""})
	}
	if c := r.CatchUp; c != nil && c.Traffic.Deliveries() > 0 {
		add(row{"  … during the catch-up", fmt.Sprintf("%.3f", float64(c.Traffic.Deliveries())/float64(c.Backlog+c.OnNew)),
			fmt.Sprintf("redelivered %d, basic.get-ok %d", c.Traffic.Redelivered, c.Traffic.GetOK), "", "", ""})
	}
}

func (rep report) markdown() string {
	var b strings.Builder
	b.WriteString("| Figure | Median | Spread | Ratio | Target | Status |\n|---|---:|---|---|---|---|\n")
	for _, r := range rep.rows {
		fig := r.Figure
		if strings.HasPrefix(fig, "  ") {
			fig = "&nbsp;&nbsp;" + strings.TrimSpace(fig)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", fig, r.Median, r.Spread, r.Ratio, r.Target, r.Status)
	}
	return b.String()
}

const (
	beginMarker = "<!-- bench:begin — generated by `make bench`; everything up to bench:end is replaced on the next run -->"
	endMarker   = "<!-- bench:end -->"
)

// writeMarkdown replaces the generated block of path, keeping the hand-written analysis
// around it, or writes a new file.
func (r *results) writeMarkdown(path string, rep report) error {
	block := r.generated(rep)
	old, err := os.ReadFile(path)
	if err == nil {
		s := string(old)
		i, j := strings.Index(s, "<!-- bench:begin"), strings.Index(s, endMarker)
		if i >= 0 && j > i {
			return os.WriteFile(path, []byte(s[:i]+block+s[j+len(endMarker):]), 0o644)
		}
	}
	doc := "# Benchmarks\n\n" + block + "\n\n## What bounds the numbers\n\n(analysis goes here; it is kept across runs)\n"
	return os.WriteFile(path, []byte(doc), 0o644)
}

func (r *results) generated(rep report) string {
	var b strings.Builder
	m := r.Machine
	b.WriteString(beginMarker + "\n\n")
	fmt.Fprintf(&b, "Measured %s on %d CPUs (%s), %.1f GiB memory, %s, Linux %s; Postgres %s, RabbitMQ %s, %s (dev server, in-memory SQLite).\n\n",
		m.Date.Format("2006-01-02 15:04 MST"), m.CPUs, m.CPUModel, m.MemoryGiB, m.Go, m.Kernel, m.Postgres, m.RabbitMQ, m.Temporal)
	fmt.Fprintf(&b, "Command: `make bench` (`%s`), %d runs of each figure, medians shown. Everything — RabbitMQ, Postgres, the Temporal dev server, the producer and the worker — shares these %d CPUs.\n\n",
		r.Command, r.Settings.Runs, m.CPUs)
	others, note := r.Background.others(m.CPUs), ""
	if others > 0.10 {
		note = " — **other work was running on this machine: the throughput figures are lower than on a quiet one**"
	}
	fmt.Fprintf(&b, "Load in the 3 s before the first figure: %.0f%% of the CPUs busy, %.0f%% by processes other than this benchmark's own (its Temporal dev server, settling after its start, among them); load average %s%s.\n\n",
		100*r.Background.Busy, 100*others, r.LoadAvg, note)
	if r.ClockSteps > 0 || r.ClockSlew.Abs() > time.Millisecond {
		fmt.Fprintf(&b, "The VM's wall clock was slewed by %s per second and stepped %d times (largest %s) during the run; times read from the ledger are placed on Go's monotonic clock (sampled every 50 ms), so neither becomes lag.\n\n",
			r.ClockSlew, r.ClockSteps, r.ClockLargestStep)
	}
	if r.Corpus.PerQueue != nil {
		var perQueue []string
		for _, q := range simulate.DefaultQueues {
			perQueue = append(perQueue, fmt.Sprintf("%s %d", q, r.Corpus.PerQueue[q]))
		}
		fmt.Fprintf(&b, "Messages: %s per throughput run, real @octokit payloads (%s; %.1f–%.1f KB, mean %.1f KB), published persistent to a fresh vhost before the consumer starts; every figure reads the same corpus shape.\n\n",
			commas(int64(r.Settings.Events)), strings.Join(perQueue, ", "), r.Corpus.MinKB, r.Corpus.MaxKB, r.Corpus.AvgKB)
	}
	b.WriteString(rep.markdown())
	b.WriteString(r.batchBreakdown())
	if len(r.Failures) > 0 {
		b.WriteString("\n**Failed figures:**\n\n")
		for _, f := range r.Failures {
			b.WriteString("- " + f + "\n")
		}
	}
	b.WriteString("\n" + endMarker)
	return b.String()
}

// commas writes n with thousands separators: 12,345.
func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// batchRuns is f of each run's batch summary, for the runs that have one counted.
func batchRuns(ts []throughput, f func(*batchSummary) float64) []float64 {
	var out []float64
	for _, t := range ts {
		if t.Batches != nil && f(t.Batches) >= 0 {
			out = append(out, f(t.Batches))
		}
	}
	return out
}

// batchBreakdown is where a consumed batch's wall time goes, loopback beside the injected
// RTT: medians over each run's batches, then the median over the runs.
func (r *results) batchBreakdown() string {
	type set struct {
		name string
		ts   []throughput
	}
	var sets []set
	for _, c := range []set{{"loopback", r.Product}, {fmt.Sprintf("%s RTT", r.Settings.RTT), r.ProductRTT}} {
		if len(batchRuns(c.ts, func(s *batchSummary) float64 { return s.WallMS })) > 0 {
			sets = append(sets, c)
		}
	}
	if len(sets) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n**Per batch, end to end** (medians over each run's batches, then over the runs; each line its own median, so the phases need not add up to the wall time; what no phase covers is CPU between them, folding the rows and building the verdicts):\n\n| |")
	for _, c := range sets {
		b.WriteString(" " + c.name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(sets)) + "\n")
	line := func(label string, f func(*batchSummary) float64, format string) {
		b.WriteString("| " + label + " |")
		for _, c := range sets {
			if xs := batchRuns(c.ts, f); len(xs) > 0 {
				fmt.Fprintf(&b, " "+format+" |", median(xs))
			} else {
				b.WriteString(" — |")
			}
		}
		b.WriteString("\n")
	}
	line("batches per run", func(s *batchSummary) float64 { return float64(s.Batches) }, "%.0f")
	line("deliveries per batch", func(s *batchSummary) float64 { return s.Deliveries }, "%.0f")
	line("wall time per batch", func(s *batchSummary) float64 { return s.WallMS }, "%.1f ms")
	for p := range broker.PhaseCount {
		line("… "+p.String(), func(s *batchSummary) float64 { return s.PhaseMS[p.String()] }, "%.1f ms")
	}
	line("Postgres round trips (any batch)", func(s *batchSummary) float64 { return s.PGRoundTrips }, "%.0f")
	line("Postgres round trips (batches of the largest size)", func(s *batchSummary) float64 { return s.FullPGRoundTrips }, "%.0f")
	line("AMQP round trips", func(s *batchSummary) float64 { return s.AMQPRoundTrips }, "%.0f")
	return b.String()
}
