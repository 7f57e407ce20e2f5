//go:build integration

package testenv

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// More tests than a fixed pool held get a namespace each, and the last one is usable at
// once: `go test -count=2 ./e2e/` asks for twice as many as one round.
func TestNamespacesAreHandedOutWithoutBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv := startTemporal(ctx, t)

	seen := map[string]bool{}
	var last client.Client
	for range 90 {
		ns, c := srv.Namespace(t)
		require.False(t, seen[ns], "namespace %s handed out twice", ns)
		seen[ns] = true
		last = c
	}
	w := worker.New(last, "q", worker.Options{})
	w.RegisterWorkflowWithOptions(func(workflow.Context) (string, error) { return "ran", nil }, workflow.RegisterOptions{Name: "Hello"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	run, err := last.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "hello", TaskQueue: "q"}, "Hello")
	require.NoError(t, err)
	var out string
	require.NoError(t, run.Get(ctx, &out))
	require.Equal(t, "ran", out)
}

// The dev server's state is in a file, which outlives the server's one database
// connection: an in-memory database ends with that connection, and every namespace with it.
func TestTheDevServerKeepsItsStateInAFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := StartTemporal(ctx)
	require.NoError(t, err)
	ns, _ := srv.Namespace(t)

	var stored []byte
	for _, name := range []string{"temporal.db", "temporal.db-wal"} {
		b, err := os.ReadFile(filepath.Join(srv.dir, name))
		require.NoError(t, err)
		stored = append(stored, b...)
	}
	require.True(t, bytes.Contains(stored, []byte(ns)), "namespace %s is not in the database file", ns)
	require.NoError(t, srv.Stop())
	require.NoDirExists(t, srv.dir, "Stop removes the database")
}

// A stuck database's restart keeps the address, the namespaces and the workflows: the
// watch that saw it stuck restarts the server, and a client dialed before goes on.
func TestAStuckDevServerIsRestartedWithItsState(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	srv, c := startWithAWorkflow(ctx, t)

	logStuck(t, srv)
	require.NoError(t, WaitUntil(ctx, 2*time.Minute, "the restart", func() (bool, error) {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.restarts == 1, nil
	}))
	requireKept(ctx, t, c)
}

// A server a test stopped, as an outage, stays down whatever its log said until the test
// starts it again, on the same address with its workflows.
func TestAStoppedDevServerStaysDownUntilStartedWithItsState(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	srv, c := startWithAWorkflow(ctx, t)

	require.NoError(t, srv.StopServer())
	require.False(t, srv.Up())
	requireHeld(t, srv)
	require.Error(t, srv.StopServer(), "a stopped server cannot be stopped again")
	logStuck(t, srv)
	require.NoError(t, srv.restart(), "the watch's restart of a stopped server does nothing")
	require.False(t, srv.Up(), "the watch does not start a server the test stopped")
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, err := c.DescribeWorkflowExecution(short, "kept", "")
	cancelShort()
	require.Error(t, err, "nothing answers while the server is stopped")

	require.NoError(t, srv.StartServer(ctx))
	require.True(t, srv.Up())
	require.Error(t, srv.StartServer(ctx), "a running server cannot be started again")
	requireKept(ctx, t, c)
}

// A start that fails says why in the server's own words and leaves no server behind, so
// that the next start can succeed.
func TestAFailedStartSaysWhyAndLeavesNoServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	srv, c := startWithAWorkflow(ctx, t)
	require.NoError(t, srv.StopServer())

	// Something takes the HTTP API's port as the server starts.
	srv.mu.Lock()
	releasePorts(srv.held)
	srv.held = nil
	taken, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(srv.ports[2]))
	srv.mu.Unlock()
	require.NoError(t, err)
	// The SDK dials an exited server for a minute; the start is cut short once the server
	// has said why it exited, not after a guess at how long that takes on a busy machine.
	short, cancelShort := context.WithCancel(ctx)
	go func() {
		defer cancelShort()
		_ = WaitUntil(short, time.Minute, "the server's complaint", func() (bool, error) {
			return strings.Contains(srv.lastWords.String(), "address already in use"), nil
		})
	}()
	err = srv.StartServer(short)
	cancelShort()
	require.ErrorContains(t, err, "address already in use", "the server's last words")
	require.False(t, srv.Up())
	require.NoError(t, taken.Close())
	_, err = net.Dial("tcp", srv.Address())
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "no server is left listening")

	require.NoError(t, srv.StartServer(ctx))
	requireKept(ctx, t, c)
}

// requireHeld checks that every port of srv is held, as while no server listens on them.
func requireHeld(t *testing.T, srv *Temporal) {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var held []int
	for _, h := range srv.held {
		held = append(held, h.port)
	}
	require.ElementsMatch(t, srv.ports, held)
}

// startWithAWorkflow starts a dev server of the test's own and, in a namespace of its
// own, a workflow "kept" that nobody runs; it returns the namespace's client.
func startWithAWorkflow(ctx context.Context, t *testing.T) (*Temporal, client.Client) {
	t.Helper()
	srv := startTemporal(ctx, t)
	_, c := srv.Namespace(t)
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "kept", TaskQueue: "nobody"}, "Nothing")
	require.NoError(t, err)
	return srv, c
}

// logStuck writes to srv's log what a stuck database logs, as many times as the watch
// needs to see it stuck.
func logStuck(t *testing.T, srv *Temporal) {
	t.Helper()
	for range stuckInterrupts {
		_, err := srv.opts.Stderr.Write([]byte("error=\"GetTasks operation failed. Error: interrupted (9)\"\n"))
		require.NoError(t, err)
	}
}

// requireKept waits until the server answers for the workflow startWithAWorkflow started.
func requireKept(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	require.NoError(t, WaitUntil(ctx, time.Minute, "the workflow started before", func() (bool, error) {
		_, err := c.DescribeWorkflowExecution(ctx, "kept", "")
		return err == nil, err
	}))
}

// startTemporal starts a dev server of the test's own, stopped when the test ends.
func startTemporal(ctx context.Context, t *testing.T) *Temporal {
	t.Helper()
	srv, err := StartTemporal(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}
