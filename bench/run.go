package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// run is one invocation of the benchmark: its options and what its figures share, the
// dev server, the clock watch, the corpus and the processes it counts as its own.
type run struct {
	o        options
	started  time.Time
	temporal *testenv.Temporal
	clock    *clockWatch
	*corpusMaker
	logDir string
	res    *results

	binaryOnce sync.Once
	binary     string
	binaryErr  error
}

// newRun is a run of o; its corpus is built, nothing is measured yet.
func newRun(o options) (*run, error) {
	c, err := newCorpusMaker()
	if err != nil {
		return nil, err
	}
	return &run{o: o, started: time.Now(), clock: &clockWatch{stop: make(chan struct{})}, corpusMaker: c}, nil
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
}

// workerBinary builds `brokerswitch` once, for the figures that run it as a process.
func (s *figure) workerBinary() string {
	s.binaryOnce.Do(func() { s.binary, s.binaryErr = testenv.BuildWorker(s.logDir) })
	s.check(s.binaryErr, "build ./cmd/brokerswitch")
	return s.binary
}

// figure is the testenv.T of one figure of the report. As testing.T does for a test, it collects the
// figure's cleanups and ends the figure's goroutine on a fatal error (runtime.Goexit, so
// the cleanups still run); record reports that error and the next figure goes on.
type figure struct {
	*run
	name     string
	cleanups []func()
	err      error
}

func (s *figure) Helper()          {}
func (s *figure) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }
func (s *figure) Errorf(f string, args ...any) {
	s.logf("WARN %s: "+f, append([]any{s.name}, args...)...)
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

// record runs fn as one figure in a goroutine of its own, runs its cleanups (last first)
// and records the error that ended it, if any, as a failure of the run.
func (r *run) record(name string, fn func(s *figure)) {
	if err := r.runFigure(name, fn); err != nil {
		r.logf("FAILED %v", err)
		r.res.Failures = append(r.res.Failures, err.Error())
	}
}

// runFigure runs fn as record does and returns the error that ended it.
func (r *run) runFigure(name string, fn func(s *figure)) error {
	s := &figure{run: r, name: name}
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
