package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// figure is the testenv.T of one figure of the report. As testing.T does for a test, it
// collects the figure's cleanups and ends the figure's goroutine on a fatal error
// (runtime.Goexit, so the cleanups still run); runFigure reports that error and the next
// figure goes on.
type figure struct {
	name     string
	cleanups []func()
	err      error
}

func (s *figure) Helper()          {}
func (s *figure) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }
func (s *figure) Errorf(f string, args ...any) {
	logf("WARN %s: "+f, append([]any{s.name}, args...)...)
}

// Fatalf records the error and ends the figure. Like testing.T's, it must be called from
// the figure's own goroutine, not from one it started.
func (s *figure) Fatalf(f string, args ...any) {
	s.err = errors.Join(s.err, fmt.Errorf(f, args...))
	runtime.Goexit()
}

// check ends the figure with err, if any, as Fatalf does.
func (s *figure) check(err error, what string) {
	if err != nil {
		s.Fatalf("%s: %w", what, err)
	}
}

// runFigure runs fn as one figure in a goroutine of its own, runs its cleanups (last first)
// and returns the error that ended it, if any.
func runFigure(name string, fn func(s *figure)) error {
	s := &figure{name: name}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer s.runCleanups()
		fn(s)
	}()
	<-done
	if s.err != nil {
		return fmt.Errorf("%s: %w", name, s.err)
	}
	return nil
}

// runCleanups runs the cleanups, the last registered first; one that ends the figure
// (testenv's cleanups call Fatalf when RabbitMQ refuses) leaves the others to run.
func (s *figure) runCleanups() {
	if n := len(s.cleanups); n > 0 {
		f := s.cleanups[n-1]
		s.cleanups = s.cleanups[:n-1]
		defer s.runCleanups()
		f()
	}
}

var start = time.Now()

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// temporalServer is the dev server of this run; namespaces are handed out by testenv.
var temporalServer *testenv.Temporal

func namespace(s *figure) (string, client.Client) {
	return temporalServer.Namespace(s)
}

// machine describes where the numbers were taken.
type machine struct {
	CPUs      int
	CPUModel  string
	MemoryGiB float64
	Go        string
	Kernel    string
	Postgres  string
	RabbitMQ  string
	Temporal  string
	Date      time.Time
}

func describeMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Date: time.Now()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if kb := testenv.ProcKB("/proc/meminfo", "MemTotal"); kb > 0 {
		m.MemoryGiB = float64(kb) / (1 << 20)
	}
	m.Kernel = firstLine(exec.Command("uname", "-r"))
	m.Postgres = firstLine(exec.Command("psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "SHOW server_version"))
	m.RabbitMQ = firstLine(exec.Command("rabbitmqctl", "--quiet", "version"))
	if root, err := testenv.ModuleRoot(); err == nil {
		m.Temporal = firstLine(exec.Command(filepath.Join(root, "bin", "temporal"), "--version"))
	}
	return m
}

func firstLine(cmd *exec.Cmd) string {
	out, err := cmd.Output()
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// cpuSample is CPU time used so far by the processes that make up the stack, and the
// machine's busy and total time.
type cpuSample struct {
	at    time.Time
	byPID map[int]procCPU
	busy  float64 // seconds of all CPUs
	total float64
}

type procCPU struct {
	component string
	seconds   float64
}

// components maps a process name (/proc/PID/comm) to the component it belongs to.
var components = map[string]string{
	"beam.smp":     "RabbitMQ",
	"postgres":     "Postgres",
	"temporal":     "Temporal dev server",
	"brokerswitch": "worker (process)",
}

const (
	ticksPerSecond = 100 // USER_HZ on Linux
	benchComponent = "bench + in-process worker"
)

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now(), byPID: map[int]procCPU{}}
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// comm is in parentheses and may contain spaces.
		open, closing := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
		if open < 0 || closing < 0 {
			continue
		}
		comp, ok := classify(pid, string(stat[open+1:closing]), self)
		if !ok {
			continue
		}
		fields := strings.Fields(string(stat[closing+2:]))
		if len(fields) < 13 {
			continue
		}
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		s.byPID[pid] = procCPU{comp, (utime + stime) / ticksPerSecond}
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		fields := strings.Fields(line)[1:]
		for i, f := range fields {
			v, _ := strconv.ParseFloat(f, 64)
			s.total += v / ticksPerSecond
			if i != 3 && i != 4 { // idle, iowait
				s.busy += v / ticksPerSecond
			}
		}
	}
	return s
}

var (
	classMu    sync.Mutex
	classCache = map[int]string{} // pid → component, "" for someone else's process
	myDBs      = map[string]bool{}
	myChildren = map[int]bool{}
)

// ownDatabase and ownProcess tell classify what belongs to this benchmark: the machine
// may run other developers' tests and servers on the same Postgres and beside it.
func ownDatabase(dsn string) {
	name := dsn[strings.LastIndex(dsn, "/")+1:]
	name, _, _ = strings.Cut(name, "?")
	classMu.Lock()
	myDBs[name] = true
	classMu.Unlock()
}

func ownProcess(pid int) {
	classMu.Lock()
	myChildren[pid] = true
	classMu.Unlock()
}

// classify says which component a process is, counting only this benchmark's own
// Temporal dev server and worker process, and, of Postgres, its background processes and
// the backends of this benchmark's databases. RabbitMQ is one process for everyone.
func classify(pid int, comm string, self int) (string, bool) {
	if pid == self {
		return benchComponent, true
	}
	comp, ok := components[comm]
	if !ok {
		return "", false
	}
	classMu.Lock()
	defer classMu.Unlock()
	if c, seen := classCache[pid]; seen {
		return c, c != ""
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.ReplaceAll(string(cmdline), "\x00", " ")
	switch comm {
	case "temporal":
		if temporalServer == nil || !strings.Contains(args+" ", "--port "+temporalPort()+" ") {
			comp = ""
		}
	case "brokerswitch":
		if !myChildren[pid] {
			comp = ""
		}
	case "postgres":
		// A backend's title is "postgres: 15/main: USER DATABASE HOST(PORT) STATE".
		if fields := strings.Fields(args); len(fields) >= 4 && strings.HasPrefix(fields[3], "bs_") && !myDBs[fields[3]] {
			comp = ""
		}
	}
	classCache[pid] = comp
	return comp, comp != ""
}

func temporalPort() string {
	addr := temporalServer.Address()
	return addr[strings.LastIndex(addr, ":")+1:]
}

// cpuMeter samples every 100ms so that processes that exit meanwhile (a Postgres backend
// whose pooled connection was closed) still count.
type cpuMeter struct {
	first cpuSample
	mu    sync.Mutex
	last  map[int]procCPU
	end   cpuSample
	stop  chan struct{}
	done  chan struct{}
}

func startCPU() *cpuMeter {
	m := &cpuMeter{first: sampleCPU(), last: map[int]procCPU{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.merge(sampleCPU())
			}
		}
	}()
	return m
}

func (m *cpuMeter) merge(s cpuSample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid, p := range s.byPID {
		m.last[pid] = p
	}
	m.end = s
}

// done stops the meter and says what happened since it started.
func (m *cpuMeter) Stop() cpuUse {
	close(m.stop)
	<-m.done
	m.merge(sampleCPU())
	u := cpuUse{Seconds: m.end.at.Sub(m.first.at).Seconds(), ByComponent: map[string]float64{}}
	if m.end.total > m.first.total {
		u.Busy = (m.end.busy - m.first.busy) / (m.end.total - m.first.total)
	}
	for pid, p := range m.last {
		if d := p.seconds - m.first.byPID[pid].seconds; d > 0 {
			u.ByComponent[p.component] += d
		}
	}
	return u
}

// cpuUse is what happened between two samples.
type cpuUse struct {
	Seconds     float64
	Busy        float64            // share of all CPUs busy, 0..1
	ByComponent map[string]float64 // CPU seconds
}

func (u cpuUse) String() string {
	var parts []string
	for _, k := range []string{benchComponent, "worker (process)", "Postgres", "RabbitMQ", "Temporal dev server"} {
		if v, ok := u.ByComponent[k]; ok && v > 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1fs", k, v))
		}
	}
	return fmt.Sprintf("machine %.0f%% busy over %.1fs; CPU: %s", 100*u.Busy, u.Seconds, strings.Join(parts, ", "))
}

// waitUntil polls cond every 50ms until it holds, ctx ends or within passes.
func waitUntil(ctx context.Context, within time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", within, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
