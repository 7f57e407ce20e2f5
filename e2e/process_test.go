//go:build integration

package e2e

import (
	"os"
	"path/filepath"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/worker"
)

// The brokerswitch binary that scenarios run as real worker processes, built once by
// TestMain into a temporary folder.
var (
	workerBinaryDir string
	workerBinary    string
	workerBinaryErr error
)

func buildWorkerBinary() error {
	dir, err := os.MkdirTemp("", "brokerswitch-e2e-")
	if err != nil {
		return err
	}
	workerBinaryDir = dir
	workerBinary, err = testenv.BuildWorker(dir)
	return err
}

// process is a `brokerswitch worker` running as a child process.
type process struct {
	*testenv.Process
	name string
}

// identity is the process's Temporal identity, as its lease shows it (pid@host@).
func (p *process) identity() string { return worker.IdentityOf(p.Pid()) }

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
	p := &process{Process: s.StartWorkerProcess(workerBinary, filepath.Join(s.t.TempDir(), name+".log"), env), name: name}
	s.t.Cleanup(func() {
		p.Stop()
		if s.t.Failed() {
			s.t.Logf("last lines of %s's log:\n%s", name, p.Tail(30))
		}
	})
	return p
}

// consumers lists, per queue, the consumers RabbitMQ reports on broker index.
func (s *stack) consumers(index int) map[string][]string {
	s.t.Helper()
	return testenv.Consumers(s.t, s.Vhosts[index])
}
