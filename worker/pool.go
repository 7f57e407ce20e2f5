package worker

import (
	"log/slog"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/metrics"
)

// NewPool is the brokers' connection pool with the configuration's limits, as every
// worker, in a process or in a test, must run it: a pool without MaxMessageBytes holds
// whatever body the broker lets through.
func NewPool(cfg config.Config, logger *slog.Logger, m *metrics.Metrics) *broker.Pool {
	pool := broker.NewPool(cfg.Brokers, logger)
	pool.Metrics = m
	pool.MaxBatchBytes = cfg.MaxBatchBytes
	pool.MaxMessageBytes = cfg.MaxMessageBytes
	pool.Heartbeat = cfg.AMQPHeartbeat
	return pool
}
