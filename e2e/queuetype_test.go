//go:build integration

package e2e

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/worker"
)

// A worker started with the other QUEUE_TYPE than the producer's queues have stops at
// once, naming the queue, the type found and the setting, rather than run windows that
// can never consume.
func TestAStartAgainstQueuesOfTheOtherTypeFails(t *testing.T) {
	s := newStack(t, 2, nil)
	cfg := s.Config
	cfg.QueueType = broker.Quorum
	if s.Config.QueueType == broker.Quorum {
		cfg.QueueType = broker.Classic
	}
	pool := broker.NewPool(cfg.Brokers, nil, broker.PoolSettings{})
	t.Cleanup(func() { pool.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err := worker.Run(ctx, worker.Deps{Config: cfg, Client: s.Temporal, Pool: pool, DB: s.WorkerDB, DBPool: s.WorkerPool, Logger: logger})
	require.ErrorIs(t, err, broker.ErrQueueType)
	require.ErrorContains(t, err, "queue "+cfg.Queues[0]+" is a "+string(s.Config.QueueType)+" queue, but QUEUE_TYPE is "+string(cfg.QueueType))
	t.Log(err)
}
