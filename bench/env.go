package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
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
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(cpuinfo)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			m.CPUModel = strings.TrimSpace(v)
			break
		}
	}
	if kb := testenv.ProcKB("/proc/meminfo", "MemTotal"); kb > 0 {
		m.MemoryGiB = float64(kb) / (1 << 20)
	}
	m.Kernel = firstLine(exec.Command("uname", "-r"))
	m.Postgres = firstLine(exec.Command("psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc", "SHOW server_version"))
	m.RabbitMQ = firstLine(exec.Command("rabbitmqctl", "--quiet", "version"))
	if cli, err := testenv.TemporalCLI(); err == nil {
		m.Temporal = firstLine(exec.Command(cli, "--version"))
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

// ticksPerSecond is USER_HZ on Linux, the unit of /proc's CPU times.
const ticksPerSecond = 100

// cpuSample is the machine's busy and total CPU time so far, and this process's: the
// benchmark and the in-process worker.
type cpuSample struct {
	at                time.Time
	busy, total, self float64 // seconds of all CPUs
}

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseFloat(f, 64)
			s.total += v / ticksPerSecond
			if i != 3 && i != 4 { // idle, iowait
				s.busy += v / ticksPerSecond
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return s
}

// cpuMeter measures the CPU from its start to Stop.
type cpuMeter struct{ first cpuSample }

func startCPU() cpuMeter { return cpuMeter{first: sampleCPU()} }

// Stop says what the CPUs did since the meter started.
func (m cpuMeter) Stop() cpuUse {
	end := sampleCPU()
	u := cpuUse{Seconds: end.at.Sub(m.first.at).Seconds(), Self: end.self - m.first.self}
	if end.total > m.first.total {
		u.Busy = (end.busy - m.first.busy) / (end.total - m.first.total)
	}
	return u
}

// cpuUse is what happened between two samples.
type cpuUse struct {
	Seconds float64
	Busy    float64 // share of all CPUs busy, 0..1
	Self    float64 // CPU seconds of the benchmark and the in-process worker
}

func (u cpuUse) String() string {
	return fmt.Sprintf("machine %.0f%% busy over %.1fs; this process %.1f CPU-s", 100*u.Busy, u.Seconds, u.Self)
}

// others is the share of the CPUs busy with processes other than this one.
func (u cpuUse) others(cpus int) float64 {
	if u.Seconds == 0 || cpus == 0 {
		return u.Busy
	}
	return max(0, u.Busy-u.Self/(u.Seconds*float64(cpus)))
}
