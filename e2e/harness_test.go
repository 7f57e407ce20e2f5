package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/api"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

var temporalServer *testenv.Temporal

// waitingTests is how many tests marked t.Parallel run at once unless -parallel says
// otherwise. They mostly wait (windows, grace periods, a late notification, a dedicated
// dev server), so Go's default of GOMAXPROCS, 2 on a small CI runner, left the package
// waiting for minutes on a machine it barely used: in its first 616 s, a mostly serial
// run used 66 s of CPU, the dev server's included.
//
// A test is parallel when it has its own vhosts, proxies, database and namespace (every
// stack does) and cuts only its own proxies. Go runs the others first, one at a time,
// with nothing beside them: those that assert a timing the design promises (scenario 2's
// switch lag, the rolling restart's take-over, the cut-off window's give-back, the burst
// of scrapes) and the hostile bodies, which burn CPU rather than wait.
const waitingTests = 8

func TestMain(m *testing.M) {
	flag.Parse()
	parallelGiven := false
	flag.Visit(func(f *flag.Flag) { parallelGiven = parallelGiven || f.Name == "test.parallel" })
	if !parallelGiven {
		if err := flag.Set("test.parallel", strconv.Itoa(waitingTests)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// The worker binary, for the scenarios that run workers as real processes, builds
	// while the dev server starts.
	built := make(chan error, 1)
	go func() { built <- buildWorkerBinary() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	srv, err := testenv.StartTemporal(ctx)
	cancel()
	buildErr := <-built
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	temporalServer = srv
	workerBinaryErr = buildErr
	code := m.Run()
	_ = srv.Stop()
	if workerBinaryDir != "" {
		_ = os.RemoveAll(workerBinaryDir)
	}
	printSummaries(os.Stdout)
	testenv.Exit(code)
}

// stack is one deployment under test: its brokers (vhosts behind proxies), its database,
// its Temporal namespace and a running worker.
type stack struct {
	t        *testing.T
	cfg      config.Config
	db       *gorm.DB
	store    *brokerstate.Store
	temporal client.Client
	// direct reaches each broker without its proxy: the producer's and the test's view.
	direct  *broker.Pool
	proxies []*testenv.Proxy
	api     *httptest.Server
	// env is the configuration as worker processes get it in their environment.
	env map[string]string
	// workerDB is the workers' database connection: through pgProxy when there is one.
	workerDB *gorm.DB
	// pgProxy, when set, stands between the workers and Postgres; the test and the API
	// reach Postgres directly.
	pgProxy *testenv.Proxy
	// vhosts are the brokers' vhost names, for rabbitmqctl.
	vhosts []string
	// began is when the stack was built, for the scenario's summary.
	began time.Time
}

// stackOptions shape a deployment beyond newStack's brokers and environment.
type stackOptions struct {
	brokers int
	env     map[string]string
	// temporal, when set, is the Temporal server (address, namespace and client) to use
	// instead of a namespace of the shared dev server.
	temporal *temporalTarget
	// pgProxy puts a cuttable proxy between the workers and Postgres.
	pgProxy bool
	// copies shape the traffic of some brokers' proxies (a slow link), by index.
	copies map[int]testenv.Copy
	// producerQueues has the producer declare the queues first, as quorum queues with the
	// least docs/design.md asks of it ("The topology, for producers"): no single active consumer, which only brokerswitch adds.
	producerQueues bool
}

// temporalTarget is a Temporal server and namespace to run a stack against.
type temporalTarget struct {
	address, namespace string
	client             client.Client
}

const (
	producerToken = "producer-token-for-tests"
	operatorToken = "operator-token-for-tests"
)

// newStack builds a deployment with n brokers; env overrides configuration variables.
func newStack(t *testing.T, n int, env map[string]string) *stack {
	t.Helper()
	return newStackWith(t, stackOptions{brokers: n, env: env})
}

// newStackWith builds a deployment as opts say.
func newStackWith(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	began := time.Now()
	n, env := opts.brokers, opts.env
	var proxied, direct, vhosts []string
	var proxies []*testenv.Proxy
	for i := range n {
		u := testenv.NewVhost(t)
		direct = append(direct, u)
		vhosts = append(vhosts, testenv.VhostOf(t, u))
		p := testenv.NewProxy(t, testenv.RabbitAddr())
		if c := opts.copies[i]; c != nil {
			p.Cut()
			var err error
			p, err = testenv.ListenProxy(testenv.RabbitAddr(), c)
			require.NoError(t, err)
			t.Cleanup(p.Cut)
		}
		proxies = append(proxies, p)
		proxied = append(proxied, strings.Replace(u, testenv.RabbitAddr(), p.Addr(), 1))
	}
	target := opts.temporal
	if target == nil {
		ns, tc := temporalServer.Namespace(t)
		target = &temporalTarget{address: temporalServer.Address(), namespace: ns, client: tc}
	}
	ns, tc := target.namespace, target.client
	dsn := testenv.NewDatabase(t)
	workerDSN := dsn
	var pgProxy *testenv.Proxy
	if opts.pgProxy {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		pgProxy = testenv.NewProxy(t, u.Host)
		u.Host = pgProxy.Addr()
		q := u.Query()
		q.Set("application_name", workerAppName) // to find the workers' backends
		u.RawQuery = q.Encode()
		workerDSN = u.String()
	}
	vars := map[string]string{
		"RABBITMQ_CONNECTION_STRINGS": strings.Join(proxied, ","),
		"DATABASE_URL":                workerDSN,
		"TEMPORAL_ADDRESS":            target.address,
		"METRICS_ADDR":                "127.0.0.1:0",
		"TEMPORAL_NAMESPACE":          ns,
		"TEMPORAL_TASK_QUEUE":         "brokerswitch-" + ns,
		"CONSUMER_WINDOW":             "1m",
		"RETRY_TTL":                   "1s",
		"MAX_RETRY_CYCLES":            "3",
		"DRAIN_CHECK_INTERVAL":        "250ms",
		"LOG_LEVEL":                   "warn",
		"PRODUCER_TOKEN":              producerToken,
		"OPERATOR_TOKEN":              operatorToken,
		// The scenarios rotate faster than a producer does; api tests cover the limit.
		"NOTIFICATION_RATE":  "1000",
		"NOTIFICATION_BURST": "1000",
		"QUEUE_TYPE":         testenv.QueueType(),
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.FromEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)

	ctx := context.Background()
	db, err := models.Open(ctx, dsn)
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { sqlDB.Close() })
	require.NoError(t, models.Migrate(ctx, sqlDB))
	installAudit(t, db)
	workerDB := db
	if opts.pgProxy {
		workerDB, err = models.Open(ctx, workerDSN)
		require.NoError(t, err)
		workerSQL, err := workerDB.DB()
		require.NoError(t, err)
		t.Cleanup(func() { workerSQL.Close() })
	}

	directEndpoints, err := broker.ParseEndpoints(strings.Join(direct, ","))
	require.NoError(t, err)
	s := &stack{
		t: t, cfg: cfg, db: db, temporal: tc, proxies: proxies,
		store:  brokerstate.NewStore(db, cfg.Brokers),
		direct: broker.NewPool(directEndpoints, nil),
		env:    vars, workerDB: workerDB, pgProxy: pgProxy, vhosts: vhosts, began: began,
	}
	t.Cleanup(func() { s.direct.Close() })
	s.api = httptest.NewServer(api.Router(api.Deps{
		Config: cfg, Temporal: tc, Store: s.store, Ping: sqlDB.PingContext,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// A forced switch answers once committed; a loaded machine may take longer than
		// the default allows, and the scenarios test the commit, not its speed.
		CommitWait: patience * api.DefaultCommitWait,
	}))
	t.Cleanup(s.api.Close)
	t.Cleanup(s.replayHistories) // runs after the workers stop: cleanups run last-in first-out
	for i := range n {
		if opts.producerQueues {
			declareProducersQuorumQueues(t, s.direct, i, cfg)
		}
		require.NoError(t, s.direct.DeclareTopology(ctx, i, broker.Topology{Queues: cfg.Queues, RetryTTL: cfg.RetryTTL, Type: cfg.QueueType}))
	}
	return s
}

// declareProducersQuorumQueues declares cfg's queues on broker index as a producer
// would that follows the least topology for quorum queues in docs/design.md.
func declareProducersQuorumQueues(t *testing.T, pool *broker.Pool, index int, cfg config.Config) {
	t.Helper()
	ch, err := pool.Channel(context.Background(), index)
	require.NoError(t, err)
	defer ch.Close()
	for _, q := range cfg.Queues {
		for name, args := range map[string]amqp.Table{
			q:                    {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": broker.RetryQueue(q)},
			broker.RetryQueue(q): {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q, "x-message-ttl": cfg.RetryTTL.Milliseconds()},
			broker.ErrorQueue(q): {},
		} {
			args["x-queue-type"] = "quorum"
			_, err := ch.QueueDeclare(name, true, false, false, false, args)
			require.NoError(t, err, name)
		}
	}
}

// startWorker runs one worker process's worth of the service until the test ends or stop.
func (s *stack) startWorker() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	pool := worker.NewPool(s.cfg, nil, nil)
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- worker.Run(ctx, worker.Deps{Config: s.cfg, Client: s.temporal, Pool: pool, DB: s.workerDB, Logger: logger})
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(s.t, err)
		case <-time.After(time.Minute):
			s.t.Error("worker did not stop within a minute")
		}
		pool.Close()
	}
	s.t.Cleanup(stop)
	return stop
}

// publish sends events to broker index as the producer does.
func (s *stack) publish(index int, events ...payloads.Event) {
	s.t.Helper()
	ctx := context.Background()
	ch, err := s.direct.Channel(ctx, index)
	require.NoError(s.t, err)
	defer ch.Close()
	require.NoError(s.t, ch.Confirm(false))
	for _, ev := range events {
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", ev.Queue, false, false, amqp.Publishing{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			Headers:      amqp.Table{"x-github-event": ev.Event, "x-github-delivery": ev.DeliveryID},
			Body:         ev.Body,
		})
		require.NoError(s.t, err)
		ok, err := conf.WaitContext(ctx)
		require.NoError(s.t, err)
		require.True(s.t, ok, "broker nacked a publish")
	}
}

// publishRaw sends one message with the given headers and body to queue on broker index.
func (s *stack) publishRaw(index int, queue string, headers amqp.Table, body []byte) {
	s.t.Helper()
	ch, err := s.direct.Channel(context.Background(), index)
	require.NoError(s.t, err)
	defer ch.Close()
	require.NoError(s.t, ch.PublishWithContext(context.Background(), "", queue, false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Headers: headers, Body: body}))
}

// counts reads the ready counts of queues on broker index, directly.
func (s *stack) counts(index int, queues ...string) map[string]int {
	s.t.Helper()
	c, err := s.direct.ReadyCounts(context.Background(), index, queues)
	require.NoError(s.t, err)
	return c
}

// workerAppName names the workers' Postgres connections when they go through pgProxy.
const workerAppName = "brokerswitch-e2e-worker"

// workerBackends counts the Postgres backends serving the workers through pgProxy.
func (s *stack) workerBackends() int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.db.Raw("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = ?",
		workerAppName).Scan(&n).Error)
	return n
}

// deliveries counts the ledger rows.
func (s *stack) deliveries() int64 {
	var n int64
	require.NoError(s.t, s.db.Model(&models.Delivery{}).Count(&n).Error)
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func (s *stack) waitFor(what string, within time.Duration, cond func() bool) {
	s.t.Helper()
	s.waitUntil(what, within, func() (bool, string) { return cond(), "" })
}

// patience stretches every wait's deadline. A deadline only ends a test that hangs; on a
// loaded machine (make test-stress beside other work) the Temporal dev server alone can
// stall for half a minute, and a wait ends as soon as its condition holds, so a long
// deadline costs a passing run nothing. Timings the design promises are asserted apart.
const patience = 3

// waitUntil polls cond until it holds or the deadline (within × patience) passes; on a
// timeout the failure shows what cond last said about the value it waits on.
func (s *stack) waitUntil(what string, within time.Duration, cond func() (ok bool, last string)) {
	s.t.Helper()
	within *= patience
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if last != "" {
				last = ": " + last
			}
			s.t.Fatalf("timed out after %s waiting for %s%s", within, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdLedger locks the ledger until release: every batch then waits in hand, unsettled,
// as it does behind a slow or locked database.
func (s *stack) holdLedger() (release func()) {
	s.t.Helper()
	tx := s.db.Begin()
	require.NoError(s.t, tx.Error)
	require.NoError(s.t, tx.Exec("LOCK TABLE github_deliveries IN ACCESS EXCLUSIVE MODE").Error)
	return func() { require.NoError(s.t, tx.Commit().Error) }
}

// state reads the broker state from Postgres.
func (s *stack) state() brokerstate.State {
	st, err := s.store.Load(context.Background())
	require.NoError(s.t, err)
	return st
}

// notify posts the producer's notification that it now publishes to broker index.
func (s *stack) notify(index int, switchedAt time.Time) {
	s.t.Helper()
	ep := s.cfg.Brokers[index]
	body := fmt.Sprintf(`{"host": %q, "vhost": %q, "switchedAt": %q}`, strings.ToUpper(ep.Host), url.PathEscape(ep.Vhost),
		switchedAt.UTC().Format(time.RFC3339Nano))
	status, answer := s.call(http.MethodPost, "/api/v1/broker/pending-switch", producerToken, body)
	require.Contains(s.t, []int{http.StatusOK, http.StatusAccepted}, status, "notification answered %s", answer)
}

// call sends a request to the API with a token and returns the status and body.
func (s *stack) call(method, path, token, body string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.api.URL+path, strings.NewReader(body))
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.api.Client().Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, string(b)
}

// signal sends a signal to the BrokerSwitch workflow, starting it if needed, as the API does.
func (s *stack) signal(name string, arg any) {
	s.t.Helper()
	_, err := s.temporal.SignalWithStartWorkflow(context.Background(), workflows.BrokerSwitchWorkflowID, name, arg,
		workflows.BrokerSwitchStartOptions(s.cfg.TaskQueue), workflows.BrokerSwitch, workflows.BrokerSwitchInput{})
	require.NoError(s.t, err)
}

// requireBrokerOrder checks, queue by queue, that every delivery consumed from broker
// before was applied no later than the first one consumed from broker after.
func (s *stack) requireBrokerOrder(before, after int) {
	s.t.Helper()
	for _, q := range s.cfg.Queues {
		var span struct{ BeforeLast, AfterFirst *time.Time }
		require.NoError(s.t, s.db.Model(&models.Delivery{}).Select(
			"max(applied_at) FILTER (WHERE broker_index = ?) AS before_last, min(applied_at) FILTER (WHERE broker_index = ?) AS after_first",
			before, after).Where("queue = ? AND outcome = 'applied'", q).Scan(&span).Error)
		if span.BeforeLast == nil || span.AfterFirst == nil || !span.AfterFirst.Before(*span.BeforeLast) {
			continue
		}
		// Out of order: show the queue's ledger in applied order, then fail.
		var rows []models.Delivery
		s.db.Where("queue = ?", q).Order("applied_at").Find(&rows)
		for _, r := range rows {
			s.t.Logf("%s applied %s from broker %d: %s %s", q, r.AppliedAt.Format("15:04:05.000000"), r.BrokerIndex, r.Event, r.Action)
		}
		s.t.Fatalf("queue %s: an event from broker %d was applied at %s, before the last from broker %d at %s",
			q, after, span.AfterFirst, before, span.BeforeLast)
	}
}
