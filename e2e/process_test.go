package e2e

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// The brokerswitch binary that scenarios run as real worker processes, built once by
// TestMain into a temporary folder.
var (
	workerBinaryDir string
	workerBinary    string
	workerBinaryErr error
)

func buildWorkerBinary() error {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "brokerswitch-e2e-")
	if err != nil {
		return err
	}
	workerBinaryDir = dir
	out := filepath.Join(dir, "brokerswitch")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/brokerswitch")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/brokerswitch: %w\n%s", err, b)
	}
	workerBinary = out
	return nil
}

// process is a `brokerswitch worker` running as a child process.
type process struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
	err  error
}

// startWorkerProcess runs `brokerswitch worker` with the stack's configuration in its
// environment, until it is killed or the test ends.
func (s *stack) startWorkerProcess(name string) *process {
	s.t.Helper()
	return s.startWorkerProcessWith(name, nil)
}

// startWorkerProcessWith runs `brokerswitch worker` as startWorkerProcess does, with env
// overriding the stack's configuration for this process alone: a worker that reaches
// Temporal through a proxy of its own, which the soak cuts.
func (s *stack) startWorkerProcessWith(name string, env map[string]string) *process {
	s.t.Helper()
	require.NoError(s.t, workerBinaryErr, "the worker binary was not built")
	logPath := filepath.Join(s.t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	require.NoError(s.t, err)
	cmd := exec.Command(workerBinary, "worker")
	cmd.Env = append(os.Environ()[:0:0], "PATH="+os.Getenv("PATH"), "HOME="+os.Getenv("HOME"))
	for k, v := range s.env {
		if _, over := env[k]; !over {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(s.t, cmd.Start())
	p := &process{t: s.t, name: name, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() {
		p.done <- cmd.Wait()
		f.Close()
	}()
	s.t.Cleanup(func() {
		p.stop()
		if s.t.Failed() {
			s.t.Logf("last lines of %s's log:\n%s", name, tail(logPath, 30))
		}
	})
	return p
}

// kill sends SIGKILL, as an OOM killer or a lost machine would, and waits for the exit.
func (p *process) kill() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(30 * time.Second)
}

// stop asks the worker to stop (SIGTERM) and waits, killing it after a while.
func (p *process) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if !p.wait(time.Minute) {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(10 * time.Second)
	}
}

// exited tells, without waiting, whether the process has ended; its exit error is then
// in p.err.
func (p *process) exited() bool { return p.wait(0) }

// wait waits up to within for the process to end, and tells whether it has.
func (p *process) wait(within time.Duration) bool {
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

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// vhostOf is the vhost of an AMQP URL.
func vhostOf(t *testing.T, amqpURL string) string {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	v, err := url.PathUnescape(strings.TrimPrefix(u.Path, "/"))
	require.NoError(t, err)
	return v
}

// consumers lists, per queue, the consumers RabbitMQ reports on broker index.
func (s *stack) consumers(index int) map[string][]string {
	s.t.Helper()
	return testenv.Consumers(s.t, s.vhosts[index])
}
