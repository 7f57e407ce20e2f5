package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildWorker builds `brokerswitch` (./cmd/brokerswitch) into dir and returns its path.
func BuildWorker(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "brokerswitch")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/brokerswitch")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/brokerswitch: %w\n%s", err, b)
	}
	return out, nil
}

// Process is a `brokerswitch worker` running as a child process, its output in a log
// file and its resident set sampled while it runs.
type Process struct {
	// Log is the file that holds the process's stdout and stderr.
	Log  string
	cmd  *exec.Cmd
	done chan error
	err  error

	mu       sync.Mutex
	maxRSSKB int64
}

// StartWorker runs `binary worker` with env as its whole environment (beside PATH and
// HOME: nothing of the caller's own leaks in), its output in logPath, until it is stopped
// or the test ends.
func StartWorker(t T, binary string, env map[string]string, logPath string) *Process {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("worker log: %v", err)
	}
	cmd := exec.Command(binary, "worker")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s worker: %v", binary, err)
	}
	p := &Process{Log: logPath, cmd: cmd, done: make(chan error, 1)}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		f.Close()
		close(exited)
		p.done <- err
	}()
	go p.sample(exited)
	t.Cleanup(p.Stop)
	return p
}

// sample records the largest resident set seen every 100 ms, for PeakRSSMB once the
// process is gone.
func (p *Process) sample(exited <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-exited:
			return
		case <-t.C:
			if kb := ProcKB(fmt.Sprintf("/proc/%d/status", p.Pid()), "VmRSS"); kb > 0 {
				p.mu.Lock()
				p.maxRSSKB = max(p.maxRSSKB, kb)
				p.mu.Unlock()
			}
		}
	}
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// PeakRSSMB is the kernel's high-water mark of the process's resident set (VmHWM), or the
// largest sample if the process is gone.
func (p *Process) PeakRSSMB() float64 {
	kb := ProcKB(fmt.Sprintf("/proc/%d/status", p.Pid()), "VmHWM")
	p.mu.Lock()
	kb = max(kb, p.maxRSSKB)
	p.mu.Unlock()
	return float64(kb) / 1024
}

// Kill sends SIGKILL, as an OOM killer or a lost machine would, and waits for the exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.Wait(30 * time.Second)
}

// Pause stops the process without ending it (SIGSTOP), as a frozen VM or a container
// throttled to nothing would: its sockets stay open, and nothing answers on them.
func (p *Process) Pause() { _ = p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume wakes a paused process (SIGCONT).
func (p *Process) Resume() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// Stop asks the worker to stop (SIGTERM) and waits, killing it after a minute.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if !p.Wait(time.Minute) {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		p.Wait(10 * time.Second)
	}
}

// Exited tells, without waiting, whether the process has ended; Err then holds how.
func (p *Process) Exited() bool { return p.Wait(0) }

// Err is the process's exit error once it has ended (nil for a clean exit).
func (p *Process) Err() error { return p.err }

// Wait waits up to within for the process to end, and tells whether it has.
func (p *Process) Wait(within time.Duration) bool {
	if p.done == nil {
		return true
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case p.err = <-p.done:
	case <-timer.C:
		select { // the exit and the timer may come together
		case p.err = <-p.done:
		default:
			return false
		}
	}
	p.done = nil
	return true
}

// Tail is the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ProcKB reads a "Key:   123 kB" line from a /proc file such as /proc/meminfo or
// /proc/PID/status; 0 when it is missing.
func ProcKB(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
