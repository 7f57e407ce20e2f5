package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

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

// componentOf is the component a process name (/proc/PID/comm) belongs to, "" for none.
func componentOf(comm string) string {
	switch comm {
	case "beam.smp":
		return "RabbitMQ"
	case "postgres":
		return "Postgres"
	case "temporal":
		return "Temporal dev server"
	case "brokerswitch":
		return "worker (process)"
	}
	return ""
}

const (
	ticksPerSecond = 100 // USER_HZ on Linux
	benchComponent = "bench + in-process worker"
)

func (c *classifier) sampleCPU() cpuSample {
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
		comp, ok := c.classify(pid, string(stat[open+1:closing]), self)
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

// classifier tells which processes belong to this benchmark: the machine may run other
// developers' tests and servers on the same Postgres and beside it.
type classifier struct {
	mu       sync.Mutex
	cache    map[int]string // pid → component, "" for someone else's process
	dbs      map[string]bool
	children map[int]bool
	// temporalPort is the port of this run's dev server, once it runs.
	temporalPort string
}

func newClassifier() *classifier {
	return &classifier{cache: map[int]string{}, dbs: map[string]bool{}, children: map[int]bool{}}
}

// ownDatabase and ownProcess tell classify what belongs to this benchmark.
func (c *classifier) ownDatabase(dsn string) {
	name := dsn[strings.LastIndex(dsn, "/")+1:]
	name, _, _ = strings.Cut(name, "?")
	c.mu.Lock()
	c.dbs[name] = true
	c.mu.Unlock()
}

func (c *classifier) ownProcess(pid int) {
	c.mu.Lock()
	c.children[pid] = true
	c.mu.Unlock()
}

// ownTemporal counts the dev server at addr as this benchmark's.
func (c *classifier) ownTemporal(addr string) {
	c.mu.Lock()
	c.temporalPort = addr[strings.LastIndex(addr, ":")+1:]
	c.mu.Unlock()
}

// classify says which component a process is, counting only this benchmark's own
// Temporal dev server and worker process, and, of Postgres, its background processes and
// the backends of this benchmark's databases. RabbitMQ is one process for everyone.
func (c *classifier) classify(pid int, comm string, self int) (string, bool) {
	if pid == self {
		return benchComponent, true
	}
	comp := componentOf(comm)
	if comp == "" {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if known, seen := c.cache[pid]; seen {
		return known, known != ""
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.ReplaceAll(string(cmdline), "\x00", " ")
	switch comm {
	case "temporal":
		if c.temporalPort == "" || !strings.Contains(args+" ", "--port "+c.temporalPort+" ") {
			comp = ""
		}
	case "brokerswitch":
		if !c.children[pid] {
			comp = ""
		}
	case "postgres":
		// A backend's title is "postgres: 15/main: USER DATABASE HOST(PORT) STATE".
		if fields := strings.Fields(args); len(fields) >= 4 && strings.HasPrefix(fields[3], "bs_") && !c.dbs[fields[3]] {
			comp = ""
		}
	}
	c.cache[pid] = comp
	return comp, comp != ""
}

// cpuMeter samples every 100ms so that processes that exit meanwhile (a Postgres backend
// whose pooled connection was closed) still count.
type cpuMeter struct {
	c     *classifier
	first cpuSample
	mu    sync.Mutex
	last  map[int]procCPU
	end   cpuSample
	stop  chan struct{}
	done  chan struct{}
}

func (c *classifier) startCPU() *cpuMeter {
	m := &cpuMeter{c: c, first: c.sampleCPU(), last: map[int]procCPU{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.merge(m.c.sampleCPU())
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
	m.merge(m.c.sampleCPU())
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
