// Package worker runs the Temporal worker: it builds the activities from configuration,
// registers them with the workflows, and makes sure the long-running workflows exist.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// Deps are what a worker process shares between its parts.
type Deps struct {
	Config config.Config
	Client client.Client
	Pool   *broker.Pool
	DB     *gorm.DB
	// DBPool is the pool DB runs on (models.OnPool): the ingest handler writes through it.
	DBPool *pgxpool.Pool
	Logger *slog.Logger
	// Metrics is handed to the activities and the ingest handler; nil counts nothing. The
	// pool gets it from its builder (broker.Pool.Metrics).
	Metrics *metrics.Metrics
	// Pings reports consumer windows to HealthChecks; nil pings nothing.
	Pings *healthchecks.Pinger
}

// ensureEvery is how often a worker checks that the long-running workflows still run; a
// describe costs no Action, and a window that failed is restarted by its retry policy first.
const ensureEvery = 5 * time.Minute

// Run serves workflows and activities until ctx ends. Then it stops taking tasks and
// lets every running window settle its batch in hand and return, for up to
// WorkerStopTimeout, before it returns: the caller closes the brokers, the database and
// the client only after that.
func Run(ctx context.Context, d Deps) error {
	if d.DB == nil || d.DBPool == nil {
		// Without them every batch would fail, one by one, forever.
		return errors.New("worker: Deps.DB and Deps.DBPool are both needed (models.Connect, models.OnPool)")
	}
	if err := checkQueueTypes(ctx, d.Pool, topology(d.Config), d.Logger); err != nil {
		return err
	}
	watchCtx, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatching()
	watcher := &brokerstate.StateWatcher{Store: brokerstate.NewStore(d.DB, d.Pool.Endpoints()), DSN: d.Config.DatabaseURL, Logger: d.Logger}
	go watcher.Run(watchCtx)
	// The sweep stops with the worker: a DELETE cut short rolls back and is done again
	// by the next worker's first sweep.
	retention := &ingest.Retention{DB: d.DB, After: d.Config.LedgerRetention, Logger: d.Logger, Metrics: d.Metrics}
	defer background(ctx, retention.Run)()

	// The lease outlives the worker: it is released only after every activity returned.
	keeper := NewKeeper(d)
	defer background(context.WithoutCancel(ctx), keeper.Run)()

	fatal := make(chan error, 1)
	w := sdkworker.New(d.Client, d.Config.TaskQueue, runOptions(d.Config, keeper, fatal))
	Register(w, d, watcher, keeper)
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker on task queue %s: %w", d.Config.TaskQueue, err)
	}
	// Stop waits for the activities, which read the watcher until they return.
	defer w.Stop()
	if err := ensureWorkflows(ctx, d.Client, d.Config); err != nil {
		if ctx.Err() != nil {
			// Told to stop while it started the workflows: a stop, not a failure. The
			// next worker to start ensures them.
			d.Logger.InfoContext(ctx, "worker stopping before the workflows were ensured", "error", err)
			return nil
		}
		return err
	}
	d.Logger.InfoContext(ctx, "worker running", "task_queue", d.Config.TaskQueue, "queues", d.Config.Queues)
	tick := time.NewTicker(ensureEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.Logger.InfoContext(ctx, "worker stopping: windows settle their batch in hand", "stop_timeout", d.Config.WorkerStopTimeout.String())
			return nil
		case err := <-fatal:
			return fmt.Errorf("temporal worker on task queue %s stopped polling for good: %w", d.Config.TaskQueue, err)
		case <-tick.C:
			if err := ensureWorkflows(ctx, d.Client, d.Config); err != nil && ctx.Err() == nil {
				d.Logger.WarnContext(ctx, "workflows not ensured", "error", err)
			}
		}
	}
}

// background runs run until ctx ends or the returned stop is called, and stop waits for it
// to return.
func background(ctx context.Context, run func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Options are the worker's options. The workflow tests and the replay tests run the
// workflows with them too, so that no test takes a path the worker does not.
func Options(cfg config.Config) sdkworker.Options {
	return sdkworker.Options{
		WorkerStopTimeout: cfg.WorkerStopTimeout,
		// A worker throttled at its CPU limit (a container, a busy node) can take longer
		// than the SDK's 1 s default over a workflow task of ours, which fails the task, and
		// again on every retry while the starvation lasts: an operator's order then waits
		// past the API's wait and is answered 504. Five seconds stays within the server's
		// 10 s workflow task timeout.
		DeadlockDetectionTimeout: 5 * time.Second,
		// The BrokerSwitch workflow takes its orders in the order they arrived.
		Interceptors: []interceptor.WorkerInterceptor{&workflows.OrderIntake{}},
	}
}

// runOptions are Options and what only a running worker has. The keeper's interceptor
// tells it which attempts this process runs. A poll error that the SDK counts fatal
// (NamespaceNotFound, InvalidArgument, ClientVersionNotSupported, past its two minutes of
// grace) stops the SDK's worker for good, which is reported on fatal: Run then returns it,
// and the process stops (its lease released as on any stop) instead of renewing its lease
// and passing readiness while it never polls again.
func runOptions(cfg config.Config, keeper *liveness.Keeper, fatal chan<- error) sdkworker.Options {
	opts := Options(cfg)
	opts.Interceptors = append(opts.Interceptors, keeper.Running)
	opts.OnFatalError = func(err error) {
		select {
		case fatal <- err:
		default: // the SDK reports only its first fatal error
		}
	}
	return opts
}

// NewKeeper builds the worker's lease keeper (see package liveness).
func NewKeeper(d Deps) *liveness.Keeper {
	workflowIDs := []string{workflows.BrokerSwitchWorkflowID}
	for _, q := range d.Config.Queues {
		workflowIDs = append(workflowIDs, workflows.QueueWindowWorkflowID(q))
	}
	return &liveness.Keeper{
		DB: d.DB, Temporal: d.Client, Identity: Identity(), TTL: d.Config.WorkerLeaseTTL, Logger: d.Logger, Metrics: d.Metrics,
		Namespace: d.Config.TemporalNamespace, Workflows: workflowIDs, Running: &liveness.Running{},
	}
}

// Identity is this process's worker identity as the Temporal SDK's client makes it by
// default (pid@host@), which Temporal records as an activity's last worker and the Web UI
// shows: the lease holds the same. The binary sets it on its client explicitly.
func Identity() string { return IdentityOf(os.Getpid()) }

// IdentityOf is the identity of the worker process pid on this host.
func IdentityOf(pid int) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%d@%s@", pid, host)
}

// Register adds the workflows and their activities, built from d, to a worker; keeper
// holds their attempts under the worker's lease.
func Register(w sdkworker.Registry, d Deps, watcher *brokerstate.StateWatcher, keeper *liveness.Keeper) {
	store := brokerstate.NewStore(d.DB, d.Pool.Endpoints())
	w.RegisterWorkflow(workflows.QueueWindow)
	w.RegisterWorkflow(workflows.BrokerSwitch)
	w.RegisterActivity(&activities.Window{
		Pool: d.Pool,
		Handlers: &ingest.Ingester{
			DB: d.DBPool, MaxRetryCycles: d.Config.MaxRetryCycles, Logger: d.Logger, Now: time.Now, Metrics: d.Metrics,
			MaxMessageBytes: d.Config.MaxMessageBytes, MaxClockSkew: d.Config.NotificationMaxClockSkew,
			WebhookSecret: []byte(d.Config.WebhookSecret), Active: store,
		},
		State:            store,
		Marks:            store,
		UnnotifiedGrace:  d.Config.UnnotifiedBrokerGrace,
		Watcher:          watcher,
		Topology:         topology(d.Config),
		Prefetch:         d.Config.Prefetch,
		WindowLength:     d.Config.ConsumerWindow,
		LeftoverDrainCap: d.Config.LeftoverDrainCap,
		Leases:           keeper,
		SpareCheck:       d.Config.SpareCheckInterval,
		StatementTimeout: d.Config.DBStatementTimeout,
		Logger:           d.Logger,
		Metrics:          d.Metrics,
		Pings:            d.Pings,
	})
	w.RegisterActivity(&activities.Switch{
		Pool:   d.Pool,
		Store:  store,
		Queues: d.Config.Queues,
		// Read by each run of the BrokerSwitch workflow, so that a change takes effect.
		DrainCheckInterval: d.Config.DrainCheckInterval,
		Now:                time.Now,
		Logger:             d.Logger,
		Watcher:            watcher,
		Metrics:            d.Metrics,
		// The same limit the API applies, for a signal sent around it.
		MaxClockSkew:    d.Config.NotificationMaxClockSkew,
		Leases:          keeper,
		UnnotifiedGrace: d.Config.UnnotifiedBrokerGrace,
	})
}

func topology(cfg config.Config) broker.Topology {
	return broker.Topology{Queues: cfg.Queues, RetryTTL: cfg.RetryTTL, Type: cfg.QueueType}
}

// topologyCheckTimeout bounds the start-up declaration on one broker: a broker that does
// not answer is a spare's trouble for its windows, not a reason to stay down.
const topologyCheckTimeout = 10 * time.Second

// checkQueueTypes declares the topology on every broker, all at once, and fails when a
// queue there is of another type than QUEUE_TYPE: every window would fail on it. A broker
// that cannot be reached, or refuses the declaration for another reason, is a warning;
// its windows report it.
func checkQueueTypes(ctx context.Context, pool *broker.Pool, t broker.Topology, logger *slog.Logger) error {
	eps := pool.Endpoints()
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	for i := range eps {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, topologyCheckTimeout)
			defer cancel()
			errs[i] = pool.DeclareTopology(cctx, i, t)
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case errors.Is(err, broker.ErrQueueType):
			return fmt.Errorf("start: %w", err)
		case err != nil && ctx.Err() == nil:
			logger.WarnContext(ctx, "topology not declared at start", "broker", eps[i], "error", err)
		}
	}
	return nil
}

// StateReader reads the broker state, and which queues live workers consume, for the
// metrics' scrape-time gauges.
func StateReader(store *brokerstate.Store, queues []string) metrics.StateReader {
	return func(ctx context.Context) (metrics.StateReading, error) {
		st, err := store.Load(ctx)
		if err != nil {
			return metrics.StateReading{}, err
		}
		r := metrics.StateReading{ActiveIndex: st.ActiveIndex, Consuming: map[string]int{}}
		if p := st.Pending; p != nil {
			r.PendingSince, r.PendingHops = p.RecordedAt, len(p.Route)
		}
		if c := st.LastDrainCheck; c != nil {
			r.LastCheck = &metrics.DrainCheckReading{Broker: c.BrokerIndex, Counts: c.Counts, Reachable: c.Reachable, At: c.CheckedAt}
		}
		held, err := liveness.Attempts(ctx, store.DB)
		if err != nil {
			return metrics.StateReading{}, err
		}
		for _, q := range queues {
			r.Consuming[q] = 0
		}
		for _, a := range held {
			if a.ActivityType == "Consume" {
				r.Consuming[a.Queue]++
			}
		}
		return r, nil
	}
}

// ensureWorkflows starts the window workflows and the BrokerSwitch workflow unless they
// run already, so that any number of workers can start at once. It describes each one
// first: a describe is free, while a start counts as an Action even when it finds the
// workflow running.
func ensureWorkflows(ctx context.Context, c client.Client, cfg config.Config) error {
	var errs []error
	for _, q := range cfg.Queues {
		opts := workflows.QueueWindowStartOptions(cfg.TaskQueue, q)
		if err := ensure(ctx, c, opts, workflows.QueueWindow, workflows.QueueWindowInput{Queue: q}); err != nil {
			errs = append(errs, fmt.Errorf("start window workflow for %s: %w", q, err))
		}
	}
	if err := ensure(ctx, c, workflows.BrokerSwitchStartOptions(cfg.TaskQueue), workflows.BrokerSwitch, workflows.BrokerSwitchInput{}); err != nil {
		errs = append(errs, fmt.Errorf("start broker switch workflow: %w", err))
	}
	return errors.Join(errs...)
}

func ensure(ctx context.Context, c client.Client, opts client.StartWorkflowOptions, wf, arg any) error {
	desc, err := c.DescribeWorkflowExecution(ctx, opts.ID, "")
	var notFound *serviceerror.NotFound
	switch {
	case err == nil && desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return nil
	case err != nil && !errors.As(err, &notFound):
		return err
	}
	_, err = c.ExecuteWorkflow(ctx, opts, wf, arg)
	return err
}
