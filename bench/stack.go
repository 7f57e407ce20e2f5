package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.temporal.io/sdk/client"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// stack is one deployment, built as e2e/harness_test.go builds it: fresh vhosts (reached
// through counting proxies when asked), a fresh database, its own Temporal namespace.
type stack struct {
	s        *figure
	ns       string
	vars     map[string]string
	cfg      config.Config
	db       *gorm.DB
	store    *brokerstate.Store
	temporal client.Client
	rpc      *rpcCounter      // the Temporal RPCs of the in-process worker
	direct   []string         // each broker's URL without proxy: the producer's view
	proxies  []*countingProxy // nil when the service connects directly
	vhosts   []string
	// processes numbers the worker processes started, for their log files.
	processes atomic.Int32
	// batches are the traces of the in-process worker's consumed batches; pgCounted says
	// whether their Postgres round trips were counted (an injected RTT).
	batches   batchLog
	pgCounted bool
}

// stackOptions shape a stack: counting proxies in front of the brokers, an injected round
// trip time to the brokers and Postgres, configuration variables.
type stackOptions struct {
	count bool
	rtt   time.Duration
	env   map[string]string
}

func newStack(s *figure, brokers int, o stackOptions) *stack {
	var urls []string
	st := &stack{s: s}
	for range brokers {
		u := testenv.NewVhost(s)
		st.direct = append(st.direct, u)
		st.vhosts = append(st.vhosts, testenv.VhostOf(s, u))
		if o.count {
			p := newCountingProxy(s, testenv.RabbitAddr())
			st.proxies = append(st.proxies, p)
			u = strings.Replace(u, testenv.RabbitAddr(), p.Addr(), 1)
		}
		if o.rtt > 0 {
			u = throughDelay(s, u, o.rtt)
		}
		urls = append(urls, u)
	}
	dsn := testenv.NewDatabase(s)
	ownDatabase(dsn)
	var dbPool models.PoolConfig
	if o.rtt > 0 {
		var p *delayProxy
		dsn, p = throughDelayProxy(s, dsn, o.rtt)
		dbPool.Tracer = newPGTracer(p.turnsOf)
		st.pgCounted = true
	}
	st.ns, _ = namespace(s)
	st.temporal, st.rpc = countingClient(s, st.ns)
	st.vars = map[string]string{
		"RABBITMQ_CONNECTION_STRINGS": strings.Join(urls, ","),
		"DATABASE_URL":                dsn,
		"TEMPORAL_ADDRESS":            temporalServer.Address(),
		"TEMPORAL_NAMESPACE":          st.ns,
		"TEMPORAL_TASK_QUEUE":         "brokerswitch-" + st.ns,
		"LOG_LEVEL":                   "warn",
		// Two worker processes of one stack must not both take the default port.
		"METRICS_ADDR": "127.0.0.1:0",
	}
	for k, v := range o.env {
		st.vars[k] = v
	}
	cfg, err := config.FromEnv(func(k string) string { return st.vars[k] })
	s.check(err, "config")
	st.cfg = cfg

	ctx := context.Background()
	// The pool the service opens (cmd/brokerswitch): an unbounded one keeps two idle
	// connections, so the consumers would connect, and prepare their statements, again
	// and again.
	dbPool.MaxOpenConns, dbPool.StatementTimeout, dbPool.LockTimeout = cfg.DBMaxOpenConns, cfg.DBStatementTimeout, cfg.DBLockTimeout
	db, err := models.OpenPool(ctx, cfg.DatabaseURL, dbPool)
	s.check(err, "open database")
	sqlDB, err := db.DB()
	s.check(err, "database")
	s.Cleanup(func() { sqlDB.Close() })
	s.check(models.Migrate(ctx, sqlDB), "migrate")
	st.db = db
	st.store = brokerstate.NewStore(db, cfg.Brokers)

	eps, err := broker.ParseEndpoints(strings.Join(st.direct, ","))
	s.check(err, "endpoints")
	pool := broker.NewPool(eps, nil)
	for i := range eps {
		s.check(pool.DeclareTopology(ctx, i, st.topology()), "declare topology")
	}
	_ = pool.Close()
	// Runs before the namespace's client closes: cleanups run last first.
	s.Cleanup(st.terminateWorkflows)
	return st
}

func (st *stack) topology() broker.Topology {
	return broker.Topology{Queues: st.cfg.Queues, RetryTTL: st.cfg.RetryTTL, Type: st.cfg.QueueType}
}

// producer publishes to the stack's brokers without proxy, starting on broker 0.
func (st *stack) producer() *simulate.Producer {
	return newProducer(st.s, st.topology(), st.direct...)
}

// publish publishes events to broker index, each with the extra headers, and returns once
// every one is confirmed.
func (st *stack) publish(index int, events []payloads.Event, extra amqp.Table) {
	p := st.producer()
	defer func() { _ = p.Close() }()
	st.s.check(p.PublishTo(context.Background(), index, messages(extra, events...)...), "publish")
}

// terminateWorkflows stops the namespace's workflows so that the dev server does not go on
// retrying their activities while later figures are measured.
func (st *stack) terminateWorkflows() {
	ids := []string{workflows.BrokerSwitchWorkflowID}
	for _, q := range st.cfg.Queues {
		ids = append(ids, workflows.QueueWindowWorkflowID(q))
	}
	for _, id := range ids {
		_ = st.temporal.TerminateWorkflow(context.Background(), id, "", "benchmark done")
	}
}

// startWorker runs a worker in this process, as e2e's startWorker does.
func (st *stack) startWorker() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	pool := worker.NewPool(st.cfg, nil, nil)
	pool.Trace = st.batches.add
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	go func() {
		done <- worker.Run(ctx, worker.Deps{Config: st.cfg, Client: st.temporal, Pool: pool, DB: st.db, Logger: logger})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					logf("WARN worker: %v", err)
				}
			case <-time.After(time.Minute):
				logf("WARN worker did not stop within a minute")
			}
			_ = pool.Close()
		})
	}
	st.s.Cleanup(stop)
	return stop
}

// startWorkerProcess runs the built binary with the stack's configuration as its
// environment, its memory sampled, and counts its CPU as the service's.
func (st *stack) startWorkerProcess(binary, logDir string) *testenv.Process {
	logPath := filepath.Join(logDir, fmt.Sprintf("worker-%s-%d.log", st.ns, st.processes.Add(1)))
	w := testenv.StartWorker(st.s, binary, st.vars, logPath)
	ownProcess(w.Pid())
	return w
}

// notify tells the service that the producer now publishes to broker index, by the same
// path as e2e's notify (and the API): record the Pending Switch, then signal-with-start
// the BrokerSwitch workflow.
func (st *stack) notify(index int, switchedAt time.Time) error {
	ep := st.cfg.Brokers[index]
	n := brokerstate.Notification{Index: index, Host: ep.Host, Vhost: ep.Vhost, SwitchedAt: switchedAt}
	ctx := context.Background()
	if _, err := st.store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		next, _ := cur.ApplyNotification(n, time.Now())
		return next, nil
	}); err != nil {
		return fmt.Errorf("record notification: %w", err)
	}
	_, err := st.temporal.SignalWithStartWorkflow(ctx, workflows.BrokerSwitchWorkflowID, workflows.SignalPendingSwitch, n,
		workflows.BrokerSwitchStartOptions(st.cfg.TaskQueue), workflows.BrokerSwitch, workflows.BrokerSwitchInput{})
	return err
}

// applied counts the ledger rows of deliveries applied or ignored.
func (st *stack) applied(ctx context.Context) (int64, error) {
	var n int64
	err := st.db.WithContext(ctx).Raw("SELECT count(*) FROM github_deliveries WHERE outcome <> 'error'").Scan(&n).Error
	return n, err
}

func (st *stack) errors(ctx context.Context) int64 {
	var n int64
	_ = st.db.WithContext(ctx).Raw("SELECT count(*) FROM github_deliveries WHERE outcome = 'error'").Scan(&n).Error
	return n
}

// waitApplied waits until n deliveries are applied.
func (st *stack) waitApplied(ctx context.Context, n int64, within time.Duration) error {
	return waitUntil(ctx, within, fmt.Sprintf("%d deliveries applied", n), func() (bool, error) {
		got, err := st.applied(ctx)
		return got >= n, err
	})
}

// switched tells whether broker index is active with nothing pending.
func (st *stack) switched(ctx context.Context, index int) (bool, error) {
	s, err := st.store.Load(ctx)
	if err != nil {
		return false, err
	}
	return s.ActiveIndex == index && s.Pending == nil, nil
}

// appliedTimes loads every ledger row's applied_at by delivery id.
func (st *stack) appliedTimes(ctx context.Context) (map[string]time.Time, error) {
	var rows []struct {
		DeliveryID string
		AppliedAt  *time.Time
	}
	if err := st.db.WithContext(ctx).Raw("SELECT delivery_id, applied_at FROM github_deliveries").Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		if r.AppliedAt != nil {
			out[r.DeliveryID] = *r.AppliedAt
		}
	}
	return out, nil
}

// appliedSpan is the first and last applied_at of the ledger.
func (st *stack) appliedSpan(ctx context.Context) (first, last time.Time, err error) {
	var span struct{ First, Last *time.Time }
	err = st.db.WithContext(ctx).Raw("SELECT min(applied_at) AS first, max(applied_at) AS last FROM github_deliveries").Scan(&span).Error
	if err == nil && (span.First == nil || span.Last == nil) {
		err = errors.New("ledger is empty")
	}
	if err != nil {
		return first, last, err
	}
	return *span.First, *span.Last, nil
}
