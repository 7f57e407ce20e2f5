// Command brokerswitch consumes GitHub webhook events from RabbitMQ into Postgres and
// follows its producer from broker to broker. Run `brokerswitch help` for the subcommands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	temporallog "go.temporal.io/sdk/log"
	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/api"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/errorqueue"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/temporalmetrics"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/operator"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/worker"
)

const usage = `usage: brokerswitch <command>

commands:
  migrate   apply the versioned schema to DATABASE_URL
  worker    run the Temporal worker; it also starts the window and BrokerSwitch workflows
  api       run the HTTP API on HTTP_ADDR
  serve     run worker and api in one process

Every command that runs serves /metrics and /healthz on METRICS_ADDR; the worker and
serve add the worker's /readyz there.
  status    the broker state at a glance: active broker, Pending Switch and what it waits
            for, windows, -error counts (reads the API: -api, $OPERATOR_TOKEN)
  errors    list, show, requeue and purge the messages of the {q}-error queues, through
            the API (errors help)
  simulate  publish like the producer and rotate brokers, to rehearse a switch (simulate -h)
  version   print the version, commit and Go version of this build
  help      print this text

Configuration comes from the environment; see docs/configuration.md.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "brokerswitch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv config.Getenv, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "simulate":
		return simulate.Main(ctx, args[1:], getenv, stdout, stderr)
	case "status":
		return operator.Status(ctx, args[1:], operator.Getenv(getenv), stdout, stderr)
	case "errors":
		return operator.Errors(ctx, args[1:], operator.Getenv(getenv), stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "-version", "--version":
		return printVersion(stdout, buildInfo())
	case "migrate", "worker", "api", "serve":
		if len(args) > 1 {
			return fmt.Errorf("%s takes no arguments (configuration comes from the environment), got %q", args[0], args[1:])
		}
		return runConfigured(ctx, args[0], getenv, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// runConfigured runs command, one of those that read their configuration from the
// environment: migrate, worker, api or serve.
func runConfigured(ctx context.Context, command string, getenv config.Getenv, stderr io.Writer) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.LogLevel, stderr)
	if limit := memoryLimit(cfg, getenv); limit > 0 {
		debug.SetMemoryLimit(limit)
		logger.Info("Go memory limit set from MEMORY_LIMIT", "bytes", limit)
	}
	for _, ep := range cfg.PlaintextBrokers() {
		// ep logs as #index host:port/vhost, never its URL or password.
		logger.WarnContext(ctx, "broker reached by plain amqp:// on a host that is not loopback: its password and messages cross the network unencrypted; use amqps://",
			"broker", ep, "variable", "RABBITMQ_CONNECTION_STRINGS")
	}
	var serve func(context.Context, config.Config, *slog.Logger, services) error
	switch command {
	case "migrate":
		return migrate(ctx, cfg)
	case "worker":
		serve = serveWorker
	case "api":
		if err := cfg.ValidateAPIAuth(); err != nil {
			return err
		}
		serve = serveAPI
	case "serve":
		if err := cfg.ValidateAPIAuth(); err != nil {
			return err
		}
		serve = serveBoth
	default:
		return fmt.Errorf("unknown command %q", command) // unreachable: run checks the commands
	}
	return withServices(ctx, cfg, logger, func(ctx context.Context, s services) error {
		return serve(ctx, cfg, logger, s)
	})
}

// serveWorker runs the worker, and its metrics and probes on METRICS_ADDR.
func serveWorker(ctx context.Context, cfg config.Config, logger *slog.Logger, s services) error {
	if err := brokerstate.NewStore(s.db, cfg.Brokers).RecordBrokerList(ctx); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return worker.Run(ctx, s.workerDeps(cfg, logger)) })
	g.Go(func() error { return s.metrics.Serve(ctx, cfg.MetricsAddr, logger, s.readiness(cfg, logger)) })
	return g.Wait()
}

// serveAPI runs the API, and its metrics on METRICS_ADDR.
func serveAPI(ctx context.Context, cfg config.Config, logger *slog.Logger, s services) error {
	if err := brokerstate.NewStore(s.db, cfg.Brokers).CheckBrokerList(ctx); err != nil {
		return fmt.Errorf("RABBITMQ_CONNECTION_STRINGS: %w (keep the API's list in the order of the workers' Secret, or restart the workers first after a change)", err)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return api.Serve(ctx, s.apiDeps(cfg, logger)) })
	// The API's probes stay on HTTP_ADDR, where they test the port that serves it.
	g.Go(func() error { return s.metrics.Serve(ctx, cfg.MetricsAddr, logger, nil) })
	return g.Wait()
}

// serveBoth runs the worker and the API in one process, and their metrics and the
// worker's probes on METRICS_ADDR.
func serveBoth(ctx context.Context, cfg config.Config, logger *slog.Logger, s services) error {
	if err := brokerstate.NewStore(s.db, cfg.Brokers).RecordBrokerList(ctx); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return worker.Run(ctx, s.workerDeps(cfg, logger)) })
	g.Go(func() error { return api.Serve(ctx, s.apiDeps(cfg, logger)) })
	g.Go(func() error { return s.metrics.Serve(ctx, cfg.MetricsAddr, logger, s.readiness(cfg, logger)) })
	return g.Wait()
}

// memoryLimit is the Go runtime's soft memory limit for MEMORY_LIMIT,
// Config.SoftMemoryLimit, which start-up has held the worst case to. 0 when MEMORY_LIMIT
// is not set, or when GOMEMLIMIT is: the runtime has read that already.
func memoryLimit(cfg config.Config, getenv config.Getenv) int64 {
	if cfg.MemoryLimit == 0 || getenv("GOMEMLIMIT") != "" {
		return 0
	}
	return cfg.SoftMemoryLimit()
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // config has validated it
	// Records logged inside an activity carry its workflow id.
	return slog.New(activities.LogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})))
}

func migrate(ctx context.Context, cfg config.Config) error {
	db, err := models.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer sqlDB.Close()
	return models.Migrate(ctx, sqlDB)
}

// services are the connections one process shares: Postgres, Temporal and the brokers,
// and its one metrics registry.
type services struct {
	db *gorm.DB
	// dbPool is the pool db runs on, which the ingest handler writes through.
	dbPool   *pgxpool.Pool
	temporal client.Client
	pool     *broker.Pool
	metrics  *metrics.Metrics
	// errorQueues counts the operators' requeues and purges (served by the API).
	errorQueues *metrics.ErrorQueues
}

func withServices(ctx context.Context, cfg config.Config, logger *slog.Logger, fn func(context.Context, services) error) error {
	dbPool, err := models.Connect(ctx, cfg.DatabaseURL, models.PoolConfig{
		MaxOpenConns: cfg.DBMaxOpenConns, StatementTimeout: cfg.DBStatementTimeout, LockTimeout: cfg.DBLockTimeout,
		IdleInTransactionTimeout: cfg.DBIdleInTransactionTimeout, DeadPeerTimeout: config.DBSilentSessionTimeout,
	})
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer dbPool.Close()
	db, err := models.OnPool(dbPool)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer sqlDB.Close()
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterRuntime(reg, buildInfo(), dbPool); err != nil {
		return err
	}
	m := metrics.New(reg)
	m.StartAtZero(cfg.Queues, len(cfg.Brokers))
	eq, err := metrics.NewErrorQueues(reg, cfg.Queues, errorqueue.ReasonKinds())
	if err != nil {
		return err
	}
	if err := m.WatchState(worker.StateReader(brokerstate.NewStore(db, cfg.Brokers), cfg.Queues)); err != nil {
		return err
	}
	temporalMetrics, err := temporalmetrics.NewHandler(reg, func(err error) {
		logger.WarnContext(ctx, "temporal metric refused", "error", err)
	})
	if err != nil {
		return err
	}
	opts := cfg.Temporal
	opts.Logger = temporallog.NewStructuredLogger(logger)
	opts.MetricsHandler = temporalMetrics
	if opts.Identity == "" {
		// The worker's lease names the same identity that Temporal records on its attempts.
		opts.Identity = worker.Identity()
	}
	tc, err := client.DialContext(ctx, opts)
	if err != nil {
		return fmt.Errorf("temporal at %s namespace %s (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_TLS_*, TEMPORAL_API_KEY): %w",
			cfg.TemporalAddress, cfg.TemporalNamespace, err)
	}
	defer tc.Close()
	pool := broker.NewPool(cfg.Brokers, logger, worker.PoolSettings(cfg, m))
	defer pool.Close()
	err = fn(ctx, services{db: db, dbPool: dbPool, temporal: tc, pool: pool, metrics: m, errorQueues: eq})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// readiness is the worker's /readyz: it can do its work, being connected to Postgres, to
// Temporal and to the broker that is active now.
func (s services) readiness(cfg config.Config, logger *slog.Logger) *metrics.Readiness {
	store := brokerstate.NewStore(s.db, cfg.Brokers)
	return &metrics.Readiness{
		MaxAge: metrics.DefaultReadyMaxAge,
		Logger: logger,
		Checks: []metrics.Check{
			{Name: "postgres", Run: s.dbPool.Ping},
			{Name: "temporal", Run: func(ctx context.Context) error {
				_, err := s.temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
				return err
			}},
			{Name: "active_broker", Run: func(ctx context.Context) error {
				st, err := store.Load(ctx)
				if err != nil {
					return fmt.Errorf("read the active broker: %w", err)
				}
				ch, err := s.pool.Channel(ctx, st.ActiveIndex)
				if err != nil {
					return err
				}
				return ch.Close()
			}},
		},
	}
}

func (s services) workerDeps(cfg config.Config, logger *slog.Logger) worker.Deps {
	pings := &healthchecks.Pinger{URL: cfg.HealthchecksPingURL, Logger: logger, OnFailure: s.metrics.PingFailed}
	return worker.Deps{Config: cfg, Client: s.temporal, Pool: s.pool, DB: s.db, DBPool: s.dbPool, Logger: logger, Metrics: s.metrics, Pings: pings}
}

func (s services) apiDeps(cfg config.Config, logger *slog.Logger) api.Deps {
	return api.Deps{
		Settings: apiSettings(cfg),
		Temporal: s.temporal,
		Store:    brokerstate.NewStore(s.db, cfg.Brokers),
		Ping:     s.dbPool.Ping,
		Attempts: func(ctx context.Context) ([]liveness.Attempt, error) { return liveness.Attempts(ctx, s.db) },
		Errors:   &errorqueue.Service{Brokers: s.pool, DB: s.db, Queues: cfg.Queues, Logger: logger, Metrics: s.errorQueues},
		Logger:   logger,
	}
}

// apiSettings are the API's part of cfg.
func apiSettings(cfg config.Config) api.Settings {
	return api.Settings{
		Brokers: cfg.Brokers, TaskQueue: cfg.TaskQueue, HTTPAddr: cfg.HTTPAddr,
		OperatorToken: cfg.OperatorToken, ProducerToken: cfg.ProducerToken, InsecureNoAuth: cfg.InsecureNoAuth,
		NotificationMaxClockSkew: cfg.NotificationMaxClockSkew,
		NotificationRate:         cfg.NotificationRate, NotificationBurst: cfg.NotificationBurst,
	}
}
