// Command bench measures brokerswitch against the local services: baselines, end-to-end
// throughput, switch lag, catch-up, the Leftover Drain and the cost of a worker. It is a
// benchmark, not a test: `go test ./...` does not run it. `make bench` runs it and writes
// BENCHMARKS.md (its table, and charts in mermaid) and bench/results.json.
//
//	go run ./bench -runs 3 -out BENCHMARKS.md
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/config"
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
	rssCases     string
	only         string
	out          string
	cpuProfile   string
	keepLogs     string
	rtt          time.Duration
	rttEvents    int
	jsonOut      string
	reportFrom   string
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
	flag.StringVar(&o.only, "only", "", "comma-separated figures to run ("+strings.Join(figureNames(), ",")+"); empty: all")
	flag.IntVar(&o.rssMessages, "rss-messages", 12, "pushes of 25 MB in the peak-RSS figure's first two cases")
	flag.StringVar(&o.rssCases, "rss-cases", "", "run only the peak-RSS cases whose name holds this text; empty: all")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "markdown report to write (its generated block is replaced)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the in-process worker during the last end-to-end run")
	flag.DurationVar(&o.rtt, "rtt", 2*time.Millisecond, "round trip time injected between the consumer and RabbitMQ and Postgres for the 'rtt' figure (B and end to end)")
	flag.IntVar(&o.rttEvents, "rtt-events", 2000, "messages per run of Baseline B in the 'rtt' figure (the service runs -events: B's rate is flat, the service's includes its start)")
	flag.StringVar(&o.jsonOut, "json", "bench/results.json", "raw figures, to regenerate the report with -report-from; empty: none")
	flag.StringVar(&o.reportFrom, "report-from", "", "measure nothing: rewrite the table, the report and its charts from a -json file")
	flag.StringVar(&o.keepLogs, "logs", "", "folder for the worker process's logs (default: a temporary folder)")
	flag.Parse()
	r, err := newRun(o)
	if err == nil {
		err = r.measure()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// listed tells whether a comma-separated list of names, as -only and -lag-scenarios take
// them, holds name; an empty list holds every one.
func listed(list, name string) bool {
	if list == "" {
		return true
	}
	for n := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// measurement is one named figure, as -only names it. A figure measured each round is
// interleaved with the others, so that drift on the machine hits every figure; the others
// run once, after them, in this order.
type measurement struct {
	name      string
	eachRound bool
	measure   func(r *run, round int)
}

// figures are every measurement of the benchmark, by name.
func figures() []measurement {
	return []measurement{
		{"a", true, (*run).baselineA},
		{"b", true, (*run).baselineB},
		{"product", true, (*run).product},
		{"rtt", true, (*run).withRTT},
		{"lag", false, (*run).lag},
		{"actions", false, (*run).actions},
		{"catchup", false, (*run).catchUp},
		{"rss", false, (*run).peakRSS},
	}
}

// figureNames are the figures' names, in the order they run.
func figureNames() []string {
	var out []string
	for _, f := range figures() {
		out = append(out, f.name)
	}
	return out
}

// picked are the figures -only asks for, in the order they run.
func (o options) picked() []measurement {
	var out []measurement
	for _, f := range figures() {
		if listed(o.only, f.name) {
			out = append(out, f)
		}
	}
	return out
}

// measure starts the dev server, measures the picked figures and writes the report.
func (r *run) measure() error {
	if r.o.reportFrom != "" {
		return r.publish(nil)
	}
	r.res = &results{
		Settings: settings{Runs: r.o.runs, Events: r.o.events, RTT: r.o.rtt, RTTEvents: r.o.rttEvents, LagBurst: r.o.lagBurst, Prefetch: config.DefaultPrefetch},
		Machine:  describeMachine(), Command: "go run ./bench " + strings.Join(os.Args[1:], " "),
	}
	res := r.res
	r.logf("machine: %d CPUs (%s), %.1f GiB, %s", res.Machine.CPUs, res.Machine.CPUModel, res.Machine.MemoryGiB, res.Machine.Go)
	return testenv.WithTemporal(func(srv *testenv.Temporal) error {
		r.temporal = srv
		r.clock.start()
		defer r.clock.halt()
		// Other work on the machine skews every figure: measure it and say so.
		idle := startCPU()
		time.Sleep(3 * time.Second)
		res.Background = idle.Stop()
		res.LoadAvg = firstLine(exec.Command("cat", "/proc/loadavg"))
		r.logf("background before measuring: %s; load average %s", res.Background, res.LoadAvg)
		if others := res.Background.others(res.Machine.CPUs); others > 0.10 {
			r.logf("WARNING: other processes keep %.0f%% of the CPUs busy before the benchmark starts; the figures will be low", 100*others)
		}
		r.logDir = r.o.keepLogs
		if r.logDir == "" {
			dir, err := os.MkdirTemp("", "brokerswitch-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			r.logDir = dir
		}
		res.Corpus = describe(r.corpus(r.o.events))
		r.logf("corpus: %d events, %v per queue, %.1f–%.1f KB (mean %.1f KB)",
			r.o.events, res.Corpus.PerQueue, res.Corpus.MinKB, res.Corpus.MaxKB, res.Corpus.AvgKB)

		picked := r.o.picked()
		for round := 1; round <= r.o.runs; round++ {
			for _, f := range picked {
				if f.eachRound {
					f.measure(r, round)
				}
			}
		}
		for _, f := range picked {
			if !f.eachRound {
				f.measure(r, 0)
			}
		}
		res.ClockSteps, res.ClockLargestStep, res.ClockSlew = r.clock.steps()
		if res.ClockSteps > 0 || res.ClockSlew.Abs() > time.Millisecond {
			r.logf("the wall clock stepped %d times (largest %s) and was slewed by %s per second", res.ClockSteps, res.ClockLargestStep, res.ClockSlew)
		}
		if err := r.publish(res); err != nil {
			return err
		}
		r.logf("done in %s", time.Since(r.started).Round(time.Second))
		if len(res.Failures) > 0 {
			return fmt.Errorf("%d figure(s) failed: %s", len(res.Failures), strings.Join(res.Failures, "; "))
		}
		return nil
	})
}

// publish saves res (nil: the -report-from file's) as JSON, prints the table and writes
// the report.
func (r *run) publish(res *results) error {
	if res == nil {
		data, err := os.ReadFile(r.o.reportFrom)
		if err != nil {
			return err
		}
		res = &results{}
		if err := json.Unmarshal(data, res); err != nil {
			return fmt.Errorf("decode %s: %w", r.o.reportFrom, err)
		}
	} else if r.o.jsonOut != "" {
		data, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(r.o.jsonOut, data, 0o644)
		}
		if err != nil {
			return fmt.Errorf("write results: %w", err)
		}
		r.logf("raw figures written to %s", r.o.jsonOut)
	}
	rep := res.table()
	fmt.Println(rep.markdown())
	if err := res.writeMarkdown(r.o.out, rep); err != nil {
		return err
	}
	r.logf("report written to %s", r.o.out)
	return nil
}

// lagConfigs are the switch-lag scenarios: the default drain check interval and a tuned
// one, with a producer that keeps the consumer busy but not behind (steady), and with a
// burst that leaves a backlog on the old broker when the notification arrives.
func lagConfigs(o options, rotations int) []lagConfig {
	var out []lagConfig
	for _, c := range []lagConfig{
		{Name: "steady, default 3s", DrainInterval: "3s"},
		{Name: "steady, tuned 250ms", DrainInterval: "250ms"},
		{Name: "burst, default 3s", DrainInterval: "3s", Burst: o.lagBurst},
		{Name: "burst, tuned 250ms", DrainInterval: "250ms", Burst: o.lagBurst},
	} {
		if listed(o.lagOnly, strings.NewReplacer(", ", "-", " ", "-").Replace(c.Name)) {
			c.Rate, c.Rotations, c.Epoch = o.lagRate, rotations, time.Second
			out = append(out, c)
		}
	}
	return out
}
