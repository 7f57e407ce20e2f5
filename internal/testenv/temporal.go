// Package testenv starts and isolates the real services that tests run against: a
// Temporal dev server, Postgres databases and RabbitMQ vhosts; and the proxies between
// them and the service, which can be cut, slowed, delayed by a round trip or count the
// AMQP frames. Tests and the benchmark only: production code never imports it.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Temporal is a dev server shared by one test binary; each test takes its own namespace.
type Temporal struct {
	addr    string
	metrics string
	dir     string // holds the server's database file
	opts    testsuite.DevServerOptions
	next    atomic.Int32

	ports     []int // gRPC, metrics, HTTP API
	lastWords tail  // of the server's log, for a start that fails

	mu       sync.Mutex
	server   *testsuite.DevServer // replaced by restart; nil while StopServer holds it down
	held     []portHold           // t.ports while no server listens on them
	restarts int
	stopped  bool
}

// StartTemporal starts the pinned Temporal CLI's dev server (bin/temporal, installed by
// make); call it from TestMain and Stop it there.
func StartTemporal(ctx context.Context) (*Temporal, error) {
	exe, err := TemporalCLI()
	if err != nil {
		return nil, err
	}
	// Every port the server opens is named, chosen together and held while no server
	// listens on them (ports.go says why): left to itself the CLI picks its HTTP API's port
	// at random among the free ones, and once picked the gRPC port given to it, freed a
	// moment before ("failed listening for HTTP API on 127.0.0.1:41715: address already in
	// use"). The server's own metrics hold its `action` counter: what Temporal Cloud would
	// bill.
	held, err := holdPorts(3)
	if err != nil {
		return nil, err
	}
	grpcPort, metricsPort, httpPort := strconv.Itoa(held[0].port), strconv.Itoa(held[1].port), strconv.Itoa(held[2].port)
	// The database is a file so that a restart keeps it (devserver.go says why the
	// harness restarts a server). Write-ahead logging without fsync costs what memory did
	// (measured: the same burst of requests in 25 s against 27 s).
	dir, err := os.MkdirTemp("", "brokerswitch-temporal-")
	if err != nil {
		releasePorts(held)
		return nil, fmt.Errorf("temporal dev server's database folder: %w", err)
	}
	t := &Temporal{addr: "127.0.0.1:" + grpcPort, metrics: "http://127.0.0.1:" + metricsPort + "/metrics", dir: dir, held: held}
	for _, h := range held {
		t.ports = append(t.ports, h.port)
	}
	t.opts = testsuite.DevServerOptions{
		ExistingPath:  exe,
		ClientOptions: &client.Options{HostPort: t.addr},
		DBFilename:    filepath.Join(dir, "temporal.db"),
		LogLevel:      "error",
		ExtraArgs:     []string{"--metrics-port", metricsPort, "--http-port", httpPort, "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=off"},
		Stdout:        io.Discard,
		Stderr:        &stuckWatch{out: io.MultiWriter(os.Stderr, &t.lastWords), stuck: func() { t.restartOrSay() }},
	}
	if err := t.startLocked(ctx); err != nil {
		releasePorts(t.held)
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return t, nil
}

// restartOrSay restarts a stuck server; a failed restart is said, and the tests then
// fail on the server they cannot reach.
func (t *Temporal) restartOrSay() {
	if err := t.restart(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
	}
}

// WithTemporal starts a dev server, runs run with it and stops it: how every TestMain
// that needs one, and the benchmark, gets its server. A failed start is returned, and so
// is a failed stop when run succeeded.
func WithTemporal(run func(*Temporal) error) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := StartTemporal(ctx)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := srv.Stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("stop temporal dev server: %w", stopErr)
		}
	}()
	return run(srv)
}

// MainWithTemporal is the TestMain of a package whose tests share a dev server: it starts
// one, sets *srv to it, runs the tests (Run), stops it and exits (Exit). A failed start or
// stop fails the package.
func MainWithTemporal(m *testing.M, srv **Temporal) {
	code := 1
	err := WithTemporal(func(s *Temporal) error {
		*srv = s
		code = Run(m)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		code = 1
	}
	Exit(code)
}

// MetricsURL is where the dev server serves its own Prometheus metrics.
func (t *Temporal) MetricsURL() string { return t.metrics }

// Address is the dev server's frontend host:port.
func (t *Temporal) Address() string { return t.addr }

// Stop ends the dev server for good and removes its database.
func (t *Temporal) Stop() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	defer os.RemoveAll(t.dir)
	err := t.stopLocked()
	releasePorts(t.held)
	t.held = nil
	return err
}

// StopServer stops the dev server as an outage would, and keeps its database file:
// StartServer brings it back on the same port with every namespace and workflow.
func (t *Temporal) StopServer() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.server == nil {
		return errors.New("testenv: the dev server is stopped already")
	}
	return t.stopLocked()
}

// StartServer starts the dev server that StopServer stopped, on the same port and
// database file.
func (t *Temporal) StartServer(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.server != nil {
		return errors.New("testenv: the dev server runs already")
	}
	return t.startLocked(ctx)
}

// Up tells whether the dev server runs: false between StopServer and StartServer.
func (t *Temporal) Up() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.server != nil
}

// stopLocked stops the server process, if one runs, closes the client the SDK dialed to
// wait for it to be ready (the DevServer's own Stop leaves that client redialing) and
// holds the server's ports until it starts again; t.mu is held.
func (t *Temporal) stopLocked() error {
	if t.server == nil {
		return nil
	}
	t.server.Client().Close()
	err := t.server.Stop()
	t.server = nil
	return errors.Join(err, t.holdLocked())
}

// holdLocked holds every port of t that it can and is not held yet, as its server has
// just stopped; t.mu is held.
func (t *Temporal) holdLocked() error {
	var errs []error
	for _, port := range t.ports {
		if holds(t.held, port) {
			continue
		}
		h, err := holdPort(port, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.held = append(t.held, h)
	}
	return errors.Join(errs...)
}

// startLocked starts the server process on t's ports and database file; t.mu is held, or
// t is not shared yet. A start that fails kills what it started, holds the ports again and
// says what the server said last: the SDK waits a minute for a server that has exited.
func (t *Temporal) startLocked(ctx context.Context) error {
	releasePorts(t.held)
	t.held = nil
	t.lastWords.Reset()
	srv, err := testsuite.StartDevServer(ctx, t.opts)
	if err != nil {
		killDevServer(t.addr)
		return errors.Join(fmt.Errorf("start temporal dev server: %w; its last words:\n%s", err, t.lastWords.String()), t.holdLocked())
	}
	t.server = srv
	return nil
}

// Namespace hands a test a namespace of its own, registered for it, and a client for it.
// Registering on demand keeps the count unbounded, so that `go test -count=N` repeats a
// package: a fixed pool registered at start ran out in the second round. A namespace is
// usable as soon as it is registered (measured: a workflow ran 0.1–0.6 s after the
// request).
func (t *Temporal) Namespace(tb T) (string, client.Client) {
	tb.Helper()
	ns := fmt.Sprintf("test-%d", t.next.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := client.NewNamespaceClient(client.Options{HostPort: t.Address(), Logger: QuietLogger{}})
	if err != nil {
		tb.Fatalf("testenv: dial temporal: %v", err)
	}
	defer nc.Close()
	err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        ns,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	if err != nil {
		tb.Fatalf("testenv: register namespace %s: %v", ns, err)
	}
	c, err := client.Dial(client.Options{HostPort: t.Address(), Namespace: ns, Logger: QuietLogger{}})
	if err != nil {
		tb.Fatalf("testenv: dial temporal: %v", err)
	}
	tb.Cleanup(c.Close)
	return ns, c
}

// TemporalCLI finds bin/temporal at the module root.
func TemporalCLI() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	exe := filepath.Join(root, "bin", "temporal")
	if _, err := os.Stat(exe); err != nil {
		return "", fmt.Errorf("testenv: %s is missing: run `make temporal-cli` (make test does it)", exe)
	}
	return exe, nil
}

// ModuleRoot is the folder of go.mod, found upwards from the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// QuietLogger is a Temporal SDK logger that keeps the client logs out of test output.
type QuietLogger struct{}

func (QuietLogger) Debug(string, ...any) {}
func (QuietLogger) Info(string, ...any)  {}
func (QuietLogger) Warn(string, ...any)  {}
func (QuietLogger) Error(string, ...any) {}
