package stacktest

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/worker"
)

// StartWorker runs one worker process's worth of the service in this process until the
// test ends or stop.
func (s *Stack) StartWorker() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	settings := worker.PoolSettings(s.Config, nil)
	settings.Trace = s.trace
	pool := broker.NewPool(s.Config.Brokers, nil, settings)
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, worker.Deps{Config: s.Config, Client: s.Temporal, Pool: pool, DB: s.WorkerDB, DBPool: s.WorkerPool, Logger: s.logger})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					s.T.Errorf("worker: %v", err)
				}
			case <-time.After(time.Minute):
				s.T.Errorf("worker did not stop within a minute")
			}
			_ = pool.Close()
		})
	}
	s.T.Cleanup(stop)
	return stop
}

// StartWorkerProcess runs `binary worker` with the stack's configuration as its
// environment, env overriding it for this process alone (a worker that reaches Temporal
// through a proxy of its own), its output in logPath, until it is stopped or the test ends.
func (s *Stack) StartWorkerProcess(binary, logPath string, env map[string]string) *testenv.Process {
	s.T.Helper()
	vars := maps.Clone(s.Env)
	maps.Copy(vars, env)
	return testenv.StartWorker(s.T, binary, vars, logPath)
}
