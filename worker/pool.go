package worker

import (
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/metrics"
)

// PoolSettings are the brokers' connection pool's settings from the configuration, as
// every worker, in a process or in a test, must run it: a pool without MaxMessageBytes
// holds whatever body the broker lets through.
func PoolSettings(cfg config.Config, m *metrics.Metrics) broker.PoolSettings {
	return broker.PoolSettings{
		Metrics:         m,
		MaxBatchBytes:   cfg.MaxBatchBytes,
		MaxMessageBytes: cfg.MaxMessageBytes,
		Heartbeat:       cfg.AMQPHeartbeat,
	}
}
