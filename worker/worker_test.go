//go:build integration

package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// server is the dev server of this test binary, started by TestMain.
var server *testenv.Temporal

func TestMain(m *testing.M) { testenv.MainWithTemporal(m, &server) }

// The SDK's worker stops polling for good on an error it counts fatal, here its namespace
// deleted under it, after retrying for two minutes. Run then returns the error, and the
// lease is released, rather than a process that renews its lease and passes readiness
// while nothing polls.
func TestAWorkerWhoseNamespaceIsDeletedStops(t *testing.T) {
	s := stacktest.New(t, stacktest.Options{Brokers: 1, Server: server})
	pool := broker.NewPool(s.Config.Brokers, nil, worker.PoolSettings(s.Config, nil))
	t.Cleanup(func() { _ = pool.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, worker.Deps{Config: s.Config, Client: s.Temporal, Pool: pool, DB: s.WorkerDB, DBPool: s.WorkerPool,
			Logger: slog.New(slog.DiscardHandler)})
	}()
	leases := func() (n int64) {
		require.NoError(t, s.DB.Raw(`SELECT count(*) FROM worker_leases WHERE identity = ?`, worker.Identity()).Scan(&n).Error)
		return n
	}
	// Run's start ends when it has started the long-running workflows: a namespace deleted
	// before that fails the start itself, which is not the stop this test is about.
	ids := []string{workflows.BrokerSwitchWorkflowID}
	for _, q := range s.Config.Queues {
		ids = append(ids, workflows.QueueWindowWorkflowID(q))
	}
	require.NoError(t, testenv.WaitUntil(ctx, time.Minute, "the worker's lease, its activity polls and its workflows", func() (bool, error) {
		q, err := s.Temporal.DescribeTaskQueue(ctx, s.Config.TaskQueue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		if err != nil || leases() != 1 || len(q.GetPollers()) == 0 {
			return false, err
		}
		for _, id := range ids {
			if _, err := s.Temporal.DescribeWorkflowExecution(ctx, id, ""); err != nil {
				var notFound *serviceerror.NotFound
				if errors.As(err, &notFound) {
					return false, nil
				}
				return false, err
			}
		}
		return true, nil
	}))

	_, err := s.Temporal.OperatorService().DeleteNamespace(ctx, &operatorservice.DeleteNamespaceRequest{Namespace: s.Config.TemporalNamespace})
	require.NoError(t, err)
	deleted := time.Now()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "stopped polling for good", "Run returned, but not for the SDK's fatal error")
		var notFound *serviceerror.NamespaceNotFound
		require.True(t, errors.As(err, &notFound), "not the fatal poll error: %v", err)
		t.Logf("Run returned %s after the namespace was deleted: %v", time.Since(deleted).Round(time.Second), err)
	case <-time.After(5 * time.Minute):
		t.Fatal("the worker still runs 5 minutes after its namespace was deleted")
	}
	require.Zero(t, leases(), "the lease was not released")
}
