// Command bench measures brokerswitch against the local services: baselines, end-to-end
// throughput, switch lag, catch-up, the Leftover Drain and the cost of a worker. It is a
// benchmark, not a test: `go test ./...` does not run it. `make bench` runs it and writes
// BENCHMARKS.md (its table, and charts in mermaid) and bench/results.json.
//
//	go run ./bench -runs 3 -out BENCHMARKS.md
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

type options struct {
	runs         int
	events       int
	lagRotations int
	lagRate      float64
	lagBurst     int
	lagOnly      string
	catchUp      int
	rssMessages  int
	drain        int
	capLeftover  int
	only         string
	out          string
	cpuProfile   string
	keepLogs     string
	rtt          time.Duration
	rttEvents    int
	jsonOut      string
	reportFrom   string
	ledgerRows   int64
	ledgerRandom bool
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 3, "runs of each figure; the table shows medians")
	flag.IntVar(&o.events, "events", 8000, "messages per throughput run, across the four queues")
	flag.IntVar(&o.lagRotations, "lag-rotations", 10, "rotations per switch-lag scenario, spread over the runs")
	flag.Float64Var(&o.lagRate, "lag-rate", 100, "steady producer rate during the switch-lag scenarios, events/s")
	flag.StringVar(&o.lagOnly, "lag-scenarios", "", "comma-separated switch-lag scenarios to run (as the table names them, e.g. \"steady, default 3s\" is steady-default-3s); empty: all")
	flag.IntVar(&o.lagBurst, "lag-burst", 500, "events published at once right before each rotation in the burst scenarios")
	flag.IntVar(&o.catchUp, "catchup", 50000, "backlog on the old broker at rotation for the catch-up figure")
	flag.IntVar(&o.drain, "drain", 3000, "messages per Leftover Drain throughput run")
	flag.IntVar(&o.capLeftover, "cap-leftover", 1200, "leftover events for the 500-per-cycle cap demonstration")
	flag.StringVar(&o.only, "only", "", "comma-separated figures to run (a,b,product,rtt,lag,drain,cap,actions,catchup,ledger,clock,rss); empty: all")
	flag.Int64Var(&o.ledgerRows, "ledger-rows", 10_000_000, "ledger rows written in SQL beside which the 'ledger' figure measures the apply rate (about 3 GB of disk while it runs)")
	flag.BoolVar(&o.ledgerRandom, "ledger-random-ids", false, "the 'ledger' figure's delivery ids are random version-4 GUIDs instead of GitHub's time-based version-1 ones")
	flag.IntVar(&o.rssMessages, "rss-messages", 12, "pushes of 25 MB in the peak-RSS figure's first two cases")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "markdown report to write (its generated block is replaced)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the in-process worker during the last end-to-end run")
	flag.DurationVar(&o.rtt, "rtt", 2*time.Millisecond, "round trip time injected between the consumer and RabbitMQ and Postgres for the 'rtt' figure (B and end to end)")
	flag.IntVar(&o.rttEvents, "rtt-events", 2000, "messages per run of Baseline B in the 'rtt' figure (the service runs -events: B's rate is flat, the service's includes its start)")
	flag.StringVar(&o.jsonOut, "json", "bench/results.json", "raw figures, to regenerate the report with -report-from; empty: none")
	flag.StringVar(&o.reportFrom, "report-from", "", "measure nothing: rewrite the table, the report and its charts from a -json file")
	flag.StringVar(&o.keepLogs, "logs", "", "folder for the worker process's logs (default: a temporary folder)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o options) wants(figure string) bool {
	if o.only == "" {
		return true
	}
	for f := range strings.SplitSeq(o.only, ",") {
		if strings.TrimSpace(f) == figure {
			return true
		}
	}
	return false
}

func run(o options) error {
	if err := buildTemplates(); err != nil {
		return err
	}
	if o.reportFrom != "" {
		return rewriteReport(o)
	}
	res := &results{
		Settings: settings{Runs: o.runs, Events: o.events, RTT: o.rtt, RTTEvents: o.rttEvents, LagBurst: o.lagBurst},
		Machine:  describeMachine(), Command: commandLine(),
	}
	logf("machine: %d CPUs (%s), %.1f GiB, %s", res.Machine.CPUs, res.Machine.CPUModel, res.Machine.MemoryGiB, res.Machine.Go)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := testenv.StartTemporal(ctx)
	cancel()
	if err != nil {
		return err
	}
	temporalServer = srv
	defer func() { _ = srv.Stop() }()

	clock.start()
	// Other work on the machine skews every figure: measure it and say so.
	idle := startCPU()
	time.Sleep(3 * time.Second)
	res.Background = idle.Stop()
	res.LoadAvg = firstLine(exec.Command("cat", "/proc/loadavg"))
	logf("background before measuring: %s; load average %s", res.Background, res.LoadAvg)
	if others := res.Background.others(res.Machine.CPUs); others > 0.10 {
		logf("WARNING: other processes keep %.0f%% of the CPUs busy before the benchmark starts; the figures will be low", 100*others)
	}

	logDir := o.keepLogs
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "brokerswitch-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(logDir)
	}

	sample := corpus(o.events)
	res.Corpus = describe(sample)
	res.Events = o.events
	logf("corpus: %d events, %v per queue, %.1f–%.1f KB (mean %.1f KB)",
		len(sample), res.Corpus.PerQueue, res.Corpus.MinKB, res.Corpus.MaxKB, res.Corpus.AvgKB)

	// Throughput: the runs are interleaved so that drift on the machine hits every figure.
	for r := 1; r <= o.runs; r++ {
		if o.wants("a") {
			for _, pf := range []int{1, 100} {
				res.record(runFigure(fmt.Sprintf("baseline A prefetch %d run %d", pf, r), func(s *figure) {
					t := runBaselineA(s, corpus(o.events), pf)
					logf("baseline A prefetch %d run %d: %.0f msg/s (%s)", pf, r, t.rate(), t.CPU)
					if pf == 1 {
						res.A1 = append(res.A1, t)
					} else {
						res.A100 = append(res.A100, t)
					}
				}))
			}
		}
		if o.wants("b") {
			res.record(runFigure(fmt.Sprintf("baseline B run %d", r), func(s *figure) {
				t := runBaselineB(s, corpus(o.events), 0)
				logf("baseline B run %d: %.0f msg/s (%s)", r, t.rate(), t.CPU)
				res.B = append(res.B, t)
			}))
		}
		if o.wants("product") {
			res.record(runFigure(fmt.Sprintf("end to end run %d", r), func(s *figure) {
				profile := ""
				if r == o.runs {
					profile = o.cpuProfile
				}
				t := runProduct(s, corpus(o.events), profile, 0)
				logf("end to end run %d: %.0f msg/s, first applied %s after start (%s)", r, t.rate(), t.Startup.Round(time.Millisecond), t.CPU)
				res.Product = append(res.Product, t)
			}))
		}
		if o.wants("rtt") && o.rtt > 0 {
			if res.MeasuredRTT == 0 {
				res.record(runFigure("measure RTT", func(s *figure) {
					res.MeasuredRTT = measureRTT(s, o.rtt)
					logf("injected RTT %s measures %s", o.rtt, res.MeasuredRTT.Round(10*time.Microsecond))
				}))
			}
			res.record(runFigure(fmt.Sprintf("baseline B with %s RTT run %d", o.rtt, r), func(s *figure) {
				t := runBaselineB(s, corpus(o.rttEvents), o.rtt)
				logf("baseline B with %s RTT run %d: %.0f msg/s (%s)", o.rtt, r, t.rate(), t.CPU)
				res.BRTT = append(res.BRTT, t)
			}))
			res.record(runFigure(fmt.Sprintf("end to end with %s RTT run %d", o.rtt, r), func(s *figure) {
				t := runProduct(s, corpus(o.events), "", o.rtt)
				logf("end to end with %s RTT run %d: %.0f msg/s (%s)", o.rtt, r, t.rate(), t.CPU)
				res.ProductRTT = append(res.ProductRTT, t)
			}))
		}
	}

	if o.wants("lag") {
		perRun := (o.lagRotations + o.runs - 1) / o.runs
		for _, cfg := range lagConfigs(o, perRun) {
			for r := 1; r <= o.runs; r++ {
				res.record(runFigure(fmt.Sprintf("switch lag %s run %d", cfg.Name, r), func(s *figure) {
					lr := runLag(s, cfg)
					logf("switch lag %s run %d: %s", cfg.Name, r, summarizeLags(lr.Rotations))
					res.addLag(cfg, lr)
				}))
			}
		}
	}

	if o.wants("drain") {
		for r := 1; r <= o.runs; r++ {
			res.record(runFigure(fmt.Sprintf("leftover drain run %d", r), func(s *figure) {
				d := runDrain(s, o.drain)
				logf("leftover drain run %d: ack only %.0f msg/s, with ingest %.0f msg/s", r, d.Raw.rate(), d.Ingest.rate())
				res.Drain = append(res.Drain, d)
			}))
		}
	}
	if o.wants("cap") {
		res.record(runFigure("leftover drain cap", func(s *figure) {
			c := runCap(s, o.capLeftover, 5*time.Second)
			logf("leftover cap: %d leftovers taken %v per cycle, cleared in %s", c.Leftover, c.PerCycle, c.Cleared.Round(time.Millisecond))
			res.Cap = &c
		}))
	}

	if o.wants("ledger") {
		res.record(runFigure("ledger", func(s *figure) {
			l := runLedger(s, o.events, o.runs, o.ledgerRows, o.ledgerRandom)
			logf("ledger: empty %.0f events/s, beside %s rows %.0f events/s", median(l.Empty), commas(l.Rows), median(l.Full))
			res.Ledger = &l
		}))
	}

	if o.wants("clock") {
		res.record(runFigure("entity clock", func(s *figure) {
			c := runEntityClock(s, o.events, o.runs)
			logf("entity clock: no clock %.0f events/s, newer %.0f, half older %.0f", median(c.NoClock), median(c.Newer), median(c.HalfOlder))
			res.EntityClock = &c
		}))
	}

	if o.wants("actions") {
		res.record(runFigure("temporal actions", func(s *figure) {
			a := runActions(s, 20, buildBinary(s, logDir), logDir)
			logf("temporal actions: idle %s/month (%.0f over %s: %s; %.0f per window restart); per switch %.0f; take-over %s; straggler %s",
				commas(int64(a.idlePerMonth())), total(a.Idle), a.IdlePeriod.Round(time.Second), byTypeOrNone(a.Idle), total(a.Turnover),
				total(a.Switch), a.Takeover.Round(100*time.Millisecond), a.StragglerLag.Round(100*time.Millisecond))
			res.Actions = &a
		}))
	}

	if o.wants("catchup") {
		res.record(runFigure("catch-up", func(s *figure) {
			binary := buildBinary(s, logDir)
			c := runCatchUp(s, o.catchUp, 1000, binary, logDir, 0)
			logf("catch-up: %d backlog + %d new applied and switched in %s (old drained at %s, switch at %s), peak RSS %.0f MB (%s)",
				c.Backlog, c.OnNew, c.Done.Round(time.Millisecond), c.OldApplied.Round(time.Millisecond),
				c.SwitchDone.Round(time.Millisecond), c.PeakRSSMB, c.CPU)
			res.CatchUp = &c
			if o.rtt > 0 {
				c := runCatchUp(s, o.catchUp, 1000, binary, logDir, o.rtt)
				logf("catch-up with %s RTT: applied and switched in %s, peak RSS %.0f MB (%s)", o.rtt, c.Done.Round(time.Millisecond), c.PeakRSSMB, c.CPU)
				res.CatchUpRTT = &c
			}
		}))
	}

	if o.wants("rss") {
		res.record(runFigure("peak RSS", func(s *figure) {
			binary := buildBinary(s, logDir)
			for _, c := range rssCases(o.rssMessages) {
				r := runRSS(s, c, binary, logDir)
				logf("peak RSS, %s: PREFETCH %d, MEMORY_LIMIT %q (worst case %.0f MiB): peak RSS %.0f MB; %d applied and %d moved to -error in %s",
					c.name, r.Prefetch, r.MemoryLimit, r.WorstCaseMB, r.PeakRSSMB, r.Messages, r.ToError, r.Done.Round(time.Millisecond))
				res.RSS = append(res.RSS, r)
			}
		}))
	}

	res.ClockSteps, res.ClockLargestStep, res.ClockSlew = clock.steps()
	if res.ClockSteps > 0 || res.ClockSlew.Abs() > time.Millisecond {
		logf("the wall clock stepped %d times (largest %s) and was slewed by %s per second", res.ClockSteps, res.ClockLargestStep, res.ClockSlew)
	}
	if o.jsonOut != "" {
		if err := res.save(o.jsonOut); err != nil {
			return err
		}
	}
	if err := res.publish(o); err != nil {
		return err
	}
	logf("done in %s", time.Since(start).Round(time.Second))
	if len(res.Failures) > 0 {
		return fmt.Errorf("%d figure(s) failed: %s", len(res.Failures), strings.Join(res.Failures, "; "))
	}
	return nil
}

// buildBinary builds `brokerswitch` into dir, for the figures that run it as a process.
func buildBinary(s *figure, dir string) string {
	binary, err := testenv.BuildWorker(dir)
	s.check(err, "build ./cmd/brokerswitch")
	return binary
}

// lagConfigs are the switch-lag scenarios: the default drain check interval and a tuned
// one, with a producer that keeps the consumer busy but not behind (steady), and with a
// burst that leaves a backlog on the old broker when the notification arrives.
func lagConfigs(o options, rotations int) []lagConfig {
	epoch := time.Second
	all := []lagConfig{
		{Name: "steady, default 3s", DrainInterval: "3s", Rate: o.lagRate, Rotations: rotations, Epoch: epoch},
		{Name: "steady, tuned 250ms", DrainInterval: "250ms", Rate: o.lagRate, Rotations: rotations, Epoch: epoch},
		{Name: "burst, default 3s", DrainInterval: "3s", Rate: o.lagRate, Burst: o.lagBurst, Rotations: rotations, Epoch: epoch},
		{Name: "burst, tuned 250ms", DrainInterval: "250ms", Rate: o.lagRate, Burst: o.lagBurst, Rotations: rotations, Epoch: epoch},
	}
	if o.lagOnly == "" {
		return all
	}
	wanted := map[string]bool{}
	for n := range strings.SplitSeq(o.lagOnly, ",") {
		wanted[strings.TrimSpace(n)] = true
	}
	var out []lagConfig
	for _, c := range all {
		if wanted[strings.NewReplacer(", ", "-", " ", "-").Replace(c.Name)] {
			out = append(out, c)
		}
	}
	return out
}

func commandLine() string {
	if os.Getenv("BENCH_COMMAND") != "" {
		return os.Getenv("BENCH_COMMAND")
	}
	return "go run ./bench " + strings.Join(os.Args[1:], " ")
}
