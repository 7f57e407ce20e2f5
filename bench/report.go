package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/simulate"
)

// results collects every figure of one invocation.
type results struct {
	Settings settings
	Machine  machine
	Command  string
	Corpus   corpusStats
	Events   int
	A1, A100 []throughput
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
	Drain            []drainResult
	Cap              *capResult
	CatchUp          *catchUpResult
	Actions          *actionsResult
	Ledger           *ledgerResult
	// EntityClock is the apply rate of updates with and without GitHub's clock.
	EntityClock *entityClockResult
	// CatchUpRTT is the same catch-up with Options.rtt injected (no counting proxies).
	CatchUpRTT *catchUpResult
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

// drainRates are the Leftover Drain's rates per run, ack only and with ingest.
func (r *results) drainRates() (raw, ingest []float64) {
	for _, d := range r.Drain {
		raw, ingest = append(raw, d.Raw.rate()), append(ingest, d.Ingest.rate())
	}
	return raw, ingest
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

func summarizeLags(rots []rotation) string {
	lags, waits := lagSeconds(rots)
	return fmt.Sprintf("lag median %.2fs p95 %.2fs; rotation → first new applied median %.2fs p95 %.2fs (n=%d)",
		median(lags), percentile(lags, 95), median(waits), percentile(waits, 95), len(lags))
}

func lagSeconds(rots []rotation) (lags, waits []float64) {
	for _, r := range rots {
		lags = append(lags, r.Lag.Seconds())
		waits = append(waits, r.Wait.Seconds())
	}
	return lags, waits
}

func (r *results) rotations(name string) []rotation {
	var out []rotation
	for _, lr := range r.Lag[name] {
		out = append(out, lr.Rotations...)
	}
	return out
}

// row is one line of the table.
type row struct{ Figure, Median, Spread, Ratio, Target, Status string }

type report struct {
	rows    []row
	targets []string
}

func status(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func (r *results) table() report {
	var rep report
	add := func(rw row) { rep.rows = append(rep.rows, rw) }
	a1, a100, b, p := median(rates(r.A1)), median(rates(r.A100)), median(rates(r.B)), median(rates(r.Product))
	ratio := func(x, y float64) string {
		if x == 0 || y == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", x/y)
	}
	if len(r.A1) > 0 {
		add(row{"Baseline A: bare consumer, ack only, prefetch 1", fmt.Sprintf("%.0f msg/s", a1), spread(rates(r.A1), "%.0f"), "E2E = " + ratio(p, a1), "the limit", ""})
	}
	if len(r.A100) > 0 {
		add(row{"Baseline A: bare consumer, ack only, prefetch 100", fmt.Sprintf("%.0f msg/s", a100), spread(rates(r.A100), "%.0f"), "E2E = " + ratio(p, a100), "the limit", ""})
	}
	if len(r.B) > 0 {
		add(row{"Baseline B: old design (prefetch 1, parse, 1 row in its own tx)", fmt.Sprintf("%.0f msg/s", b), spread(rates(r.B), "%.0f"), "E2E = " + ratio(p, b), "", ""})
	}
	if len(r.Product) > 0 {
		ok := b > 0 && p >= 3*b
		add(row{"brokerswitch end to end (Temporal windows, typed tables + ledger)", fmt.Sprintf("%.0f msg/s", p), spread(rates(r.Product), "%.0f"),
			fmt.Sprintf("%s B, %s A(100), %s A(1)", ratio(p, b), ratio(p, a100), ratio(p, a1)), "≥ 3× B", statusIf(b > 0, ok)})
		rep.targets = append(rep.targets, fmt.Sprintf("End-to-end throughput ≥ 3× Baseline B: %s (%.0f vs %.0f msg/s, %s).", status(ok), p, b, ratio(p, b)))
		add(startupRow(r.Product))
		if q := r.Product[len(r.Product)-1].QueueDone; len(q) > 0 {
			var others []float64
			for _, name := range simulate.DefaultQueues[1:] {
				others = append(others, q[name].Seconds())
			}
			add(row{"  … pull_requests (44% of the events, the largest payloads) applied its last event at", fmt.Sprintf("%.2f s", q["pull_requests"].Seconds()),
				fmt.Sprintf("the other queues by %.2f s", slices.Max(others)), "one ordered consumer per queue", "", ""})
		}
	}
	if len(r.BRTT) > 0 && len(r.ProductRTT) > 0 {
		br, pr := median(rates(r.BRTT)), median(rates(r.ProductRTT))
		add(row{fmt.Sprintf("Baseline B with %s RTT to RabbitMQ and Postgres (injected, measured %s; %s msgs per run)", r.Settings.RTT, r.MeasuredRTT.Round(10*time.Microsecond), commas(int64(r.Settings.RTTEvents))), fmt.Sprintf("%.0f msg/s", br), spread(rates(r.BRTT), "%.0f"),
			"E2E = " + ratio(pr, br), "", ""})
		ok := pr >= 15*br && (p == 0 || pr >= 0.85*p)
		add(row{fmt.Sprintf("brokerswitch end to end with %s RTT (injected; %s msgs per run)", r.Settings.RTT, commas(int64(r.ProductRTT[0].N))), fmt.Sprintf("%.0f msg/s", pr), spread(rates(r.ProductRTT), "%.0f"),
			ratio(pr, br) + " B, " + ratio(pr, p) + " loopback E2E", "≥ 15× B, ≥ 0.85× loopback", statusIf(br > 0, ok)})
		add(startupRow(r.ProductRTT))
		rep.targets = append(rep.targets, fmt.Sprintf("… with %s RTT to RabbitMQ and Postgres, as a service reaching CloudAMQP and a managed Postgres sees it, ≥ 15× B and ≥ 0.85× the loopback figure: %s (%.0f vs %.0f msg/s B, %s; %.0f loopback, %s).",
			r.Settings.RTT, statusIf(br > 0, ok), pr, br, ratio(pr, br), p, ratio(pr, p)))
	}
	if pg := batchRuns(r.ProductRTT, func(b *batchSummary) float64 { return b.FullPGRoundTrips }); len(pg) > 0 {
		amqp := batchRuns(r.ProductRTT, func(b *batchSummary) float64 { return b.AMQPRoundTrips })
		all := batchRuns(r.ProductRTT, func(b *batchSummary) float64 { return b.PGRoundTrips })
		size := r.ProductRTT[len(r.ProductRTT)-1].Batches.FullSize
		ok := median(pg) <= 6
		add(row{fmt.Sprintf("  … Postgres round trips per batch of %d (statements and transaction control, on the wire)", size), fmt.Sprintf("%.0f", median(pg)), spread(pg, "%.0f"),
			fmt.Sprintf("any batch: %.0f; AMQP round trips per batch: %.0f", median(all), median(amqp)), "≤ 6", status(ok)})
		rep.targets = append(rep.targets, fmt.Sprintf("At most 6 Postgres round trips per batch of %d with %s RTT: %s (%.0f, median over the runs' medians).", size, r.Settings.RTT, status(ok), median(pg)))
	}
	for _, name := range r.LagOrder {
		rots := r.rotations(name)
		lags, waits := lagSeconds(rots)
		cfg := r.LagCfg[name]
		target, st := "", ""
		if cfg.DrainInterval == "3s" {
			target, st = "p95 < 2 s", status(percentile(lags, 95) < 2)
			rep.targets = append(rep.targets, fmt.Sprintf("Switch lag p95 < 2 s with defaults (%s): %s (p95 %.2f s, median %.2f s over %d rotations).",
				name, st, percentile(lags, 95), median(lags), len(lags)))
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
		rep.targets = append(rep.targets, fmt.Sprintf("Peak RSS < 150 MB during the %s catch-up: %s (%.0f MB).", commas(int64(c.Backlog)), status(c.PeakRSSMB < 150), c.PeakRSSMB))
	}
	if c := r.CatchUpRTT; c != nil {
		rate := float64(c.Backlog+c.OnNew) / c.Done.Seconds()
		beside := ""
		if l := r.CatchUp; l != nil {
			beside = fmt.Sprintf("loopback: %.1f s", l.Done.Seconds())
		}
		add(row{fmt.Sprintf("Catch-up with %s RTT to RabbitMQ and Postgres (injected), same backlog", r.Settings.RTT),
			fmt.Sprintf("%.1f s", c.Done.Seconds()), "1 run", fmt.Sprintf("%.0f msg/s; %s", rate, beside), "", ""})
		add(row{fmt.Sprintf("Peak RSS of `brokerswitch worker` during the catch-up with %s RTT", r.Settings.RTT), fmt.Sprintf("%.0f MB", c.PeakRSSMB), "1 run", "", "< 150 MB", status(c.PeakRSSMB < 150)})
	}
	if len(r.Drain) > 0 {
		raw, ing := r.drainRates()
		add(row{"Leftover Drain: a consume per batch of 100, ack only", fmt.Sprintf("%.0f msg/s", median(raw)), spread(raw, "%.0f"), "= " + ratio(median(raw), a100) + " A(100)", "", ""})
		add(row{"Leftover Drain: consume + ingest (typed tables + ledger)", fmt.Sprintf("%.0f msg/s", median(ing)), spread(ing, "%.0f"), "= " + ratio(median(ing), p) + " E2E", "", ""})
	}
	if c := r.Cap; c != nil {
		most := 0
		if len(c.PerCycle) > 0 {
			most = slices.Max(c.PerCycle)
		}
		add(row{fmt.Sprintf("Leftover Drain cap: %s leftovers, CONSUMER_WINDOW %s", commas(int64(c.Leftover)), c.Window),
			fmt.Sprintf("%v per cycle", c.PerCycle), fmt.Sprintf("cleared in %.1f s", c.Cleared.Seconds()),
			capEffect(*c), "≤ 500 per cycle", status(most <= 500 && most > 0)})
	}
	r.costRows(add, &rep)
	r.ledgerRows(add, &rep)
	r.entityClockRows(add, &rep)
	r.rssRows(add, &rep)
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

// capEffect says, from the measurement, whether a consume window separated the capped
// drains, and what that means with the default 5m window.
func capEffect(c capResult) string {
	cycles := len(c.PerCycle)
	if cycles < 2 {
		return "one cycle"
	}
	if c.Cleared < time.Duration(cycles-1)*c.Window {
		return "no consume window between capped drains: the next drain follows at once"
	}
	return fmt.Sprintf("a consume window between capped drains: ≈ %d min at the default 5m window", (cycles-1)*5)
}

func (r *results) costRows(add func(row), rep *report) {
	r.actionRows(add, rep)
	// Connections and channels: the worker process of the catch-up, and the in-process
	// workers of the lag runs.
	var conns, chans, dialed []int
	var where []string
	if c := r.CatchUp; c != nil {
		conns = append(conns, c.Footprint.Connections...)
		chans = append(chans, c.Footprint.Channels...)
		dialed = append(dialed, c.Dialed...)
		where = append(where, fmt.Sprintf("catch-up process: %v connections opened over the run, %v open, channels %v, consumers %v per broker",
			c.Dialed, c.Footprint.Connections, c.Footprint.Channels, c.Footprint.Consumers))
	}
	var steadyDeliveries, burstDeliveries []float64
	var windowEvents, switchEvents, checks []float64
	for _, name := range r.LagOrder {
		for _, lr := range r.Lag[name] {
			conns = append(conns, lr.Footprint.Connections...)
			chans = append(chans, lr.Footprint.Channels...)
			dialed = append(dialed, lr.Dialed...)
			per := float64(lr.Traffic.deliveries()) / float64(lr.Events)
			if r.LagCfg[name].Burst == 0 {
				steadyDeliveries = append(steadyDeliveries, per)
			} else {
				burstDeliveries = append(burstDeliveries, per)
			}
			windowEvents = append(windowEvents, lr.History.WindowEvents...)
			if lr.History.Commits > 0 {
				switchEvents = append(switchEvents, float64(lr.History.SwitchEvents)/float64(lr.History.Commits))
				checks = append(checks, float64(lr.History.DrainChecks)/float64(lr.History.Commits))
			}
		}
		if lrs := r.Lag[name]; len(lrs) > 0 {
			fp := lrs[len(lrs)-1].Footprint
			where = append(where, fmt.Sprintf("%s (in-process worker): %v connections opened over the run, %v open at the end, channels %v, consumers %v per broker",
				name, lrs[len(lrs)-1].Dialed, fp.Connections, fp.Channels, fp.Consumers))
		}
	}
	if len(conns) > 0 {
		// A broker the worker never had to read (the pending target before the flip) has
		// none; no broker may have more than the shared one and one per queue read (a
		// message whose headers the client refuses cuts its own queue's connection only),
		// or have any of them dialed twice.
		most := 1 + len(simulate.DefaultQueues)
		ok := slices.Max(conns) <= most && slices.Max(dialed) <= most
		add(row{"AMQP connections per broker per worker process", fmt.Sprintf("%d", slices.Max(conns)),
			fmt.Sprintf("rabbitmqctl: max %d; connections opened per broker over a whole run: max %d", slices.Max(conns), slices.Max(dialed)),
			"", fmt.Sprintf("at most %d (1 shared, 1 per queue)", most), status(ok)})
		add(row{"AMQP channels open per broker per worker process", fmt.Sprintf("%d", slices.Max(chans)), "the active broker: one consumer channel per queue; others: 0 between Leftover Drains", "", "", ""})
		rep.targets = append(rep.targets, fmt.Sprintf("At most one shared connection per broker per worker process, and one per queue it reads, each dialed once: %s (%s).", status(ok), strings.Join(where, "; ")))
	}
	if c := r.CatchUp; c != nil {
		windowEvents = append(windowEvents, c.History.WindowEvents...)
	}
	if len(windowEvents) > 0 {
		mx := slices.Max(windowEvents)
		ok := mx <= 64
		add(row{"Temporal history events per window run (all queues; windows that applied up to the whole 50k backlog included)", fmt.Sprintf("%.0f", median(windowEvents)),
			fmt.Sprintf("max %.0f over %d windows", mx, len(windowEvents)), "", "bounded (≤ 64, whatever a window applies)", status(ok)})
		rep.targets = append(rep.targets, fmt.Sprintf("Bounded history per window: %s (median %.0f, max %.0f events per window run over %d runs; independent of the messages a window applies).",
			status(ok), median(windowEvents), mx, len(windowEvents)))
	}
	if len(switchEvents) > 0 {
		add(row{"Temporal history events per completed switch (BrokerSwitch workflow)", fmt.Sprintf("%.0f", median(switchEvents)),
			fmt.Sprintf("max %.0f over %d runs", slices.Max(switchEvents), len(switchEvents)),
			fmt.Sprintf("drain checks per switch: median %.1f", median(checks)), "", ""})
	}
	if c := r.CatchUp; c != nil && c.History.Commits > 0 {
		add(row{"  … during the catch-up (drain checks every 3 s while the backlog lasts)", fmt.Sprintf("%d", c.History.SwitchEvents/c.History.Commits), "1 run",
			fmt.Sprintf("drain checks: %d", c.History.DrainChecks/c.History.Commits), "", ""})
	}
	var hbPerWindow, rpcPerSec []float64
	for _, name := range r.LagOrder {
		for _, lr := range r.Lag[name] {
			if lr.Seconds > 0 {
				hbPerWindow = append(hbPerWindow, float64(lr.Heartbeats)/lr.Seconds/float64(len(simulate.DefaultQueues)))
				rpcPerSec = append(rpcPerSec, float64(lr.RPCs)/lr.Seconds)
			}
		}
	}
	if len(hbPerWindow) > 0 {
		perMonth := median(hbPerWindow) * float64(len(simulate.DefaultQueues)) * 86400 * 30
		add(row{"Temporal heartbeats per window per second (in-process worker, lag runs)", fmt.Sprintf("%.2f", median(hbPerWindow)), spread(hbPerWindow, "%.2f"),
			fmt.Sprintf("≈ %.1f M heartbeats/month for 4 windows; Temporal RPCs other than long polls: %.1f/s", perMonth/1e6, median(rpcPerSec)), "", ""})
	}
	if len(steadyDeliveries) > 0 {
		m := median(steadyDeliveries)
		ok := m <= 1.01
		add(row{"Messages delivered per event, steady state with rotations (AMQP frames on the wire)", fmt.Sprintf("%.3f", m), spread(steadyDeliveries, "%.3f"), "", "1 per event", status(ok)})
		rep.targets = append(rep.targets, fmt.Sprintf("One delivery per event in steady state: %s (%.3f deliveries per event, counted as basic.deliver + basic.get-ok frames).", status(ok), m))
	}
	if len(burstDeliveries) > 0 {
		add(row{fmt.Sprintf("  … with a %s-event burst at each rotation", commas(int64(r.Settings.LagBurst))), fmt.Sprintf("%.3f", median(burstDeliveries)), spread(burstDeliveries, "%.3f"), "", "", ""})
	}
	if c := r.CatchUp; c != nil {
		total := c.Backlog + c.OnNew
		add(row{"  … during the catch-up", fmt.Sprintf("%.3f", float64(c.Traffic.deliveries())/float64(total)),
			fmt.Sprintf("redelivered %d, basic.get-ok %d", c.Traffic.Redelivered, c.Traffic.GetOK), "", "", ""})
	}
}

func (rep report) text() string {
	w := []int{6, 6, 6, 5, 6, 6}
	cells := func(r row) []string { return []string{r.Figure, r.Median, r.Spread, r.Ratio, r.Target, r.Status} }
	head := row{"Figure", "Median", "Spread", "Ratio", "Target", "Status"}
	for _, r := range append([]row{head}, rep.rows...) {
		for i, c := range cells(r) {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	line := func(r row) {
		for i, c := range cells(r) {
			fmt.Fprintf(&b, "%-*s  ", w[i], c)
		}
		b.WriteString("\n")
	}
	line(head)
	for i := range w {
		b.WriteString(strings.Repeat("-", w[i]) + "  ")
	}
	b.WriteString("\n")
	for _, r := range rep.rows {
		line(r)
	}
	return b.String()
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
	others := r.Background.others(m.CPUs)
	fmt.Fprintf(&b, "Load in the 3 s before the first figure: %.0f%% of the CPUs busy, %.0f%% by processes other than this benchmark's own (its Temporal dev server settles after starting); load average %s%s.\n\n",
		100*r.Background.Busy, 100*others, r.LoadAvg, backgroundNote(others))
	if r.ClockSteps > 0 || r.ClockSlew.Abs() > time.Millisecond {
		fmt.Fprintf(&b, "The VM's wall clock was slewed by %s per second and stepped %d times (largest %s) during the run; times read from the ledger are placed on Go's monotonic clock (sampled every 50 ms), so neither becomes lag.\n\n",
			r.ClockSlew, r.ClockSteps, r.ClockLargestStep)
	}
	if r.Corpus.PerQueue != nil {
		fmt.Fprintf(&b, "Messages: %s per throughput run, real @octokit payloads (%s; %.1f–%.1f KB, mean %.1f KB), published persistent to a fresh vhost before the consumer starts; every figure reads the same corpus shape.\n\n",
			commas(int64(r.Events)), perQueue(r.Corpus.PerQueue), r.Corpus.MinKB, r.Corpus.MaxKB, r.Corpus.AvgKB)
	}
	b.WriteString(rep.markdown())
	b.WriteString(r.batchBreakdown())
	for _, c := range r.charts() {
		b.WriteString("\n" + c.mermaid())
	}
	if len(rep.targets) > 0 {
		b.WriteString("\n**Targets** (from this run):\n\n")
		for _, t := range rep.targets {
			b.WriteString("- " + t + "\n")
		}
	}
	b.WriteString(r.details())
	if len(r.Failures) > 0 {
		b.WriteString("\n**Failed figures:**\n\n")
		for _, f := range r.Failures {
			b.WriteString("- " + f + "\n")
		}
	}
	b.WriteString("\n" + endMarker)
	return b.String()
}

// others is the share of the CPUs busy with processes that are not this benchmark's.
func (u cpuUse) others(cpus int) float64 {
	own := 0.0
	for _, v := range u.ByComponent {
		own += v
	}
	if u.Seconds == 0 || cpus == 0 {
		return u.Busy
	}
	return max(0, u.Busy-own/(u.Seconds*float64(cpus)))
}

func backgroundNote(busy float64) string {
	if busy > 0.10 {
		return " — **other work was running on this machine: the throughput figures are lower than on a quiet one**"
	}
	return ""
}

func perQueue(m map[string]int) string {
	var parts []string
	for _, q := range simulate.DefaultQueues {
		parts = append(parts, fmt.Sprintf("%s %d", q, m[q]))
	}
	return strings.Join(parts, ", ")
}

// details are the raw figures behind the table: per run, and where the CPU went.
func (r *results) details() string {
	var b strings.Builder
	b.WriteString("\n<details><summary>Per-run figures and CPU</summary>\n\n")
	runs := func(name string, ts []throughput) {
		for i, t := range ts {
			fmt.Fprintf(&b, "- %s run %d: %s msgs in %.2f s = **%.0f msg/s**; %s; CPU-ms per message: %s%s\n",
				name, i+1, commas(int64(t.N)), t.Elapsed.Seconds(), t.rate(), t.CPU, perMessage(t), queueDone(t))
		}
	}
	runs("Baseline A prefetch 1", r.A1)
	runs("Baseline A prefetch 100", r.A100)
	runs("Baseline B", r.B)
	runs("End to end", r.Product)
	runs(fmt.Sprintf("Baseline B, %s RTT", r.Settings.RTT), r.BRTT)
	runs(fmt.Sprintf("End to end, %s RTT", r.Settings.RTT), r.ProductRTT)
	for _, name := range r.LagOrder {
		cfg := r.LagCfg[name]
		fmt.Fprintf(&b, "- Switch lag %s (DRAIN_CHECK_INTERVAL=%s, producer %.0f ev/s", name, cfg.DrainInterval, cfg.Rate)
		if cfg.Burst > 0 {
			fmt.Fprintf(&b, ", %d-event burst before each rotation", cfg.Burst)
		}
		b.WriteString("):")
		for _, rot := range r.rotations(name) {
			fmt.Fprintf(&b, " %.2f", rot.Lag.Seconds())
		}
		fmt.Fprintf(&b, " s; committed after rotation (median) %.2f s\n", medianDur(r.rotations(name), func(r rotation) time.Duration { return r.Commit }))
		for i, lr := range r.Lag[name] {
			fmt.Fprintf(&b, "  - run %d: %d events, deliveries %d (redelivered %d, basic.get-ok %d), drain checks %d for %d switches, %d events in BrokerSwitch; %s\n",
				i+1, lr.Events, lr.Traffic.deliveries(), lr.Traffic.Redelivered, lr.Traffic.GetOK, lr.History.DrainChecks, lr.History.Commits, lr.History.SwitchEvents, lr.CPU)
		}
	}
	if c := r.CatchUp; c != nil {
		fmt.Fprintf(&b, "- Catch-up: published in %.1f s; worker process started → old broker's last event applied %.1f s, switch committed %.1f s, all applied %.1f s; peak RSS %.0f MB; %s; AMQP frames: %d deliveries (%d redelivered), %d basic.get-ok, %d basic.get-empty, %d acks, %d queue.declare, %d channel.open, %d connections\n",
			c.Publish.Seconds(), c.OldApplied.Seconds(), c.SwitchDone.Seconds(), c.Done.Seconds(), c.PeakRSSMB, c.CPU,
			c.Traffic.deliveries(), c.Traffic.Redelivered, c.Traffic.GetOK, c.Traffic.GetEmpty, c.Traffic.Ack, c.Traffic.Declare, c.Traffic.ChannelOpen, c.Traffic.Connections)
	}
	for i, d := range r.Drain {
		fmt.Fprintf(&b, "- Leftover Drain run %d: ack only %s in %.2f s = %.0f msg/s (%s); with ingest %.0f msg/s (%s)\n",
			i+1, commas(int64(d.Raw.N)), d.Raw.Elapsed.Seconds(), d.Raw.rate(), d.Raw.CPU, d.Ingest.rate(), d.Ingest.CPU)
	}
	if c := r.Cap; c != nil {
		fmt.Fprintf(&b, "- Leftover Drain cap: %d leftovers on a broker neither active nor pending, CONSUMER_WINDOW=%s: taken %v per window, all applied %.1f s after the worker started\n",
			c.Leftover, c.Window, c.PerCycle, c.Cleared.Seconds())
	}
	b.WriteString("\n</details>\n")
	return b.String()
}

// queueDone says when each queue's last event was applied: one consumer per queue applies
// in order, so the busiest queue is the long pole.
func queueDone(t throughput) string {
	if len(t.QueueDone) == 0 {
		return ""
	}
	var parts []string
	for _, q := range simulate.DefaultQueues {
		if d, ok := t.QueueDone[q]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f s", q, d.Seconds()))
		}
	}
	return "; last event applied per queue: " + strings.Join(parts, ", ")
}

func perMessage(t throughput) string {
	var parts []string
	for _, k := range []string{benchComponent, "worker (process)", "Postgres", "RabbitMQ", "Temporal dev server"} {
		if v := t.CPU.ByComponent[k]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, 1000*v/float64(t.N)))
		}
	}
	return strings.Join(parts, ", ")
}

func medianDur(rots []rotation, f func(rotation) time.Duration) float64 {
	var xs []float64
	for _, r := range rots {
		xs = append(xs, f(r).Seconds())
	}
	return median(xs)
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
	sets := []struct {
		name string
		ts   []throughput
	}{{"loopback", r.Product}, {fmt.Sprintf("%s RTT", r.Settings.RTT), r.ProductRTT}}
	var b strings.Builder
	b.WriteString("\n**Per batch, end to end** (medians over each run's batches, then over the runs; each line its own median, so the phases need not add up to the wall time; what no phase covers is CPU between them, folding the rows and building the verdicts):\n\n| | ")
	var header []string
	for _, set := range sets {
		if len(batchRuns(set.ts, func(s *batchSummary) float64 { return s.WallMS })) > 0 {
			header = append(header, set.name)
		}
	}
	if len(header) == 0 {
		return ""
	}
	b.WriteString(strings.Join(header, " | ") + " |\n|---|" + strings.Repeat("---:|", len(header)) + "\n")
	line := func(label string, f func(*batchSummary) float64, format string) {
		b.WriteString("| " + label + " |")
		for _, set := range sets {
			xs := batchRuns(set.ts, f)
			if len(batchRuns(set.ts, func(s *batchSummary) float64 { return s.WallMS })) == 0 {
				continue
			}
			if len(xs) == 0 {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&b, " "+format+" |", median(xs))
		}
		b.WriteString("\n")
	}
	line("batches per run", func(s *batchSummary) float64 { return float64(s.Batches) }, "%.0f")
	line("deliveries per batch", func(s *batchSummary) float64 { return s.Deliveries }, "%.0f")
	line("wall time per batch", func(s *batchSummary) float64 { return s.WallMS }, "%.1f ms")
	for _, phase := range phaseOrder() {
		line("… "+phase, func(s *batchSummary) float64 { return s.PhaseMS[phase] }, "%.1f ms")
	}
	line("Postgres round trips (any batch)", func(s *batchSummary) float64 { return s.PGRoundTrips }, "%.0f")
	line("Postgres round trips (batches of the largest size)", func(s *batchSummary) float64 { return s.FullPGRoundTrips }, "%.0f")
	line("AMQP round trips", func(s *batchSummary) float64 { return s.AMQPRoundTrips }, "%.0f")
	return b.String()
}
