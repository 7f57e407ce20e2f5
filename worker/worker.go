// Package worker runs the Temporal worker: it builds the activities from configuration,
// registers them with the workflows, and makes sure the long-running workflows exist.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// heartbeatEvery bounds how long a cancelled window keeps consuming: Temporal delivers
// cancellation in a heartbeat's answer, and switch lag is measured in seconds.
const heartbeatEvery = 500 * time.Millisecond

// Deps are what a worker process shares between its parts.
type Deps struct {
	Config config.Config
	Client client.Client
	Pool   *broker.Pool
	DB     *gorm.DB
	Logger *slog.Logger
	// Metrics is handed to the activities and the ingest handler; nil counts nothing. The
	// pool gets it from its builder (broker.Pool.Metrics).
	Metrics *metrics.Metrics
	// Pings reports consumer windows to HealthChecks; nil pings nothing.
	Pings *healthchecks.Pinger
}

// Run serves workflows and activities until ctx ends.
func Run(ctx context.Context, d Deps) error {
	w := sdkworker.New(d.Client, d.Config.TaskQueue, sdkworker.Options{
		MaxHeartbeatThrottleInterval:     heartbeatEvery,
		DefaultHeartbeatThrottleInterval: heartbeatEvery,
	})
	Register(w, d)
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker on task queue %s: %w", d.Config.TaskQueue, err)
	}
	defer w.Stop()
	if err := EnsureWorkflows(ctx, d.Client, d.Config); err != nil {
		return err
	}
	d.Logger.InfoContext(ctx, "worker running", "task_queue", d.Config.TaskQueue, "queues", d.Config.Queues)
	<-ctx.Done()
	return nil
}

// Register adds the workflows and their activities, built from d, to a worker.
func Register(w sdkworker.Registry, d Deps) {
	store := NewBrokerStore(d.DB, d.Pool.Endpoints())
	w.RegisterWorkflow(workflows.QueueWindow)
	w.RegisterWorkflow(workflows.BrokerSwitch)
	w.RegisterActivity(&activities.Window{
		Pool: d.Pool,
		Handlers: &ingest.Ingester{
			DB: d.DB, MaxRetryCycles: d.Config.MaxRetryCycles, Logger: d.Logger, Now: time.Now, Metrics: d.Metrics,
		},
		State:            store,
		Topology:         broker.Topology{Queues: d.Config.Queues, RetryTTL: d.Config.RetryTTL},
		Prefetch:         d.Config.Prefetch,
		WindowLength:     d.Config.ConsumerWindow,
		LeftoverDrainCap: d.Config.LeftoverDrainCap,
		Heartbeat:        heartbeatEvery,
		Logger:           d.Logger,
		Metrics:          d.Metrics,
		Pings:            d.Pings,
	})
	w.RegisterActivity(&activities.Switch{
		Pool:    d.Pool,
		Store:   store,
		Queues:  d.Config.Queues,
		Now:     time.Now,
		Logger:  d.Logger,
		Metrics: d.Metrics,
	})
}

// StateReader reads the broker state for the metrics' scrape-time gauges.
func StateReader(store *models.BrokerStore) metrics.StateReader {
	return func(ctx context.Context) (metrics.StateReading, error) {
		st, err := store.Load(ctx)
		if err != nil {
			return metrics.StateReading{}, err
		}
		r := metrics.StateReading{ActiveIndex: st.ActiveIndex}
		if p := st.Pending; p != nil {
			r.PendingSince, r.PendingHops = p.RecordedAt, len(p.Route)
		}
		if c := st.LastDrainCheck; c != nil {
			r.LastCheck = &metrics.DrainCheckReading{Broker: c.BrokerIndex, Counts: c.Counts, Reachable: c.Reachable, At: c.CheckedAt}
		}
		return r, nil
	}
}

// NewBrokerStore reads the broker state with hops resolved against the configured brokers.
func NewBrokerStore(db *gorm.DB, endpoints []broker.Endpoint) *models.BrokerStore {
	refs := make([]models.BrokerRef, len(endpoints))
	for i, ep := range endpoints {
		refs[i] = models.BrokerRef{Host: ep.Host, Vhost: ep.Vhost}
	}
	return &models.BrokerStore{DB: db, Brokers: refs}
}

// BrokerSwitchInput is the input every starter of the BrokerSwitch workflow gives it.
func BrokerSwitchInput(cfg config.Config) workflows.BrokerSwitchInput {
	return workflows.BrokerSwitchInput{Queues: cfg.Queues, DrainCheckInterval: cfg.DrainCheckInterval}
}

// EnsureWorkflows starts the window workflows and the BrokerSwitch workflow unless they
// run already, so that any number of workers can start at once.
func EnsureWorkflows(ctx context.Context, c client.Client, cfg config.Config) error {
	var errs []error
	for _, q := range cfg.Queues {
		opts := workflows.QueueWindowStartOptions(cfg.TaskQueue, q)
		if _, err := c.ExecuteWorkflow(ctx, opts, workflows.QueueWindow, workflows.QueueWindowInput{Queue: q}); err != nil {
			errs = append(errs, fmt.Errorf("start window workflow for %s: %w", q, err))
		}
	}
	if _, err := c.ExecuteWorkflow(ctx, workflows.BrokerSwitchStartOptions(cfg.TaskQueue), workflows.BrokerSwitch, BrokerSwitchInput(cfg)); err != nil {
		errs = append(errs, fmt.Errorf("start broker switch workflow: %w", err))
	}
	return errors.Join(errs...)
}
