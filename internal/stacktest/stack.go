// Package stacktest builds the deployment under test: brokers (vhosts, behind proxies),
// a database, a Temporal namespace, the HTTP API, and workers in this process or as
// processes. The end-to-end tests and the benchmark build theirs here, so that the
// benchmark measures the paths the tests check. Test support: the product never imports it.
// The api package's own tests cannot (it imports api); they share testenv's WaitUntil and
// WithTemporal with it instead.
package stacktest

import (
	"context"
	"log/slog"
	"maps"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/api"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

// The tokens the stack's API accepts.
const (
	ProducerToken = "producer-token-for-tests"
	OperatorToken = "operator-token-for-tests"
)

// WorkerAppName names the workers' Postgres connections when they go through the
// Postgres proxy, so that a test can find their backends.
const WorkerAppName = "brokerswitch-e2e-worker"

// Target is a Temporal server and namespace to run a stack against.
type Target struct {
	Address, Namespace string
	Client             client.Client
}

// Options shape a deployment.
type Options struct {
	Brokers int
	// Env overrides configuration variables.
	Env map[string]string
	// Server hands out the namespace when Temporal is nil.
	Server *testenv.Temporal
	// Temporal, when set, is the server, namespace and client to use instead of a
	// namespace of Server.
	Temporal *Target
	// Copies shape the traffic of some brokers' proxies, by index: a slow link, a frame
	// counter, a delay.
	Copies map[int]testenv.Copy
	// Direct has the service reach the brokers that Copies does not name without a proxy,
	// so that a throughput figure pays for no copying.
	Direct bool
	// PGProxy puts a cuttable proxy between the workers and Postgres; PGCopy, when set,
	// shapes its traffic (and implies it). The test and the API reach Postgres directly.
	PGProxy bool
	PGCopy  testenv.Copy
	// ServicePool opens the in-process worker's database as cmd/brokerswitch does: bounded
	// by the configuration, PGTracer watching its statements.
	ServicePool bool
	PGTracer    pgx.QueryTracer
	// Predeclare, when set, runs on each broker before the service's topology is declared:
	// a producer that declared the queues first.
	Predeclare func(t testenv.T, pool *broker.Pool, index int, cfg config.Config)
	// CommitWait bounds how long a forced switch's answer waits for the commit (0: the
	// API's default).
	CommitWait time.Duration
	// Logger is the in-process workers' and the API's log (nil: warnings to stderr).
	Logger *slog.Logger
	// Trace receives the in-process workers' consumed batches (broker.Pool.Trace).
	Trace func(*broker.BatchTrace)
}

// Stack is one deployment under test.
type Stack struct {
	T      testenv.T
	Config config.Config
	// DB is the test's connection to the stack's database, never through the proxy.
	DB *gorm.DB
	// DSN is DB's DSN.
	DSN string
	// WorkerDB is the in-process workers' database connection: through PGProxy when there
	// is one.
	WorkerDB *gorm.DB
	// WorkerPool is the pool WorkerDB runs on, which the workers' ingest writes through.
	WorkerPool *pgxpool.Pool
	Store      *brokerstate.Store
	Temporal   client.Client
	// Direct reaches each broker without its proxy: the producer's and the test's view.
	Direct *broker.Pool
	// DirectURLs are the brokers' URLs without proxy.
	DirectURLs []string
	// Proxies stand between the service and each broker (nil where Direct left none).
	Proxies []*testenv.Proxy
	// PGProxy, when asked for, stands between the workers and Postgres.
	PGProxy *testenv.Proxy
	// API serves the api package's router for this stack.
	API *httptest.Server
	// Env is the configuration as worker processes get it in their environment.
	Env map[string]string
	// Vhosts are the brokers' vhost names, for rabbitmqctl.
	Vhosts []string
	// Began is when the stack was built.
	Began time.Time

	logger *slog.Logger
	trace  func(*broker.BatchTrace)
}

// New builds a deployment as o says; it is torn down when t ends.
func New(t testenv.T, o Options) *Stack {
	t.Helper()
	s := &Stack{T: t, Began: time.Now(), logger: o.Logger, trace: o.Trace}
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var urls []string
	for i := range o.Brokers {
		u := testenv.NewVhost(t)
		s.DirectURLs = append(s.DirectURLs, u)
		s.Vhosts = append(s.Vhosts, testenv.VhostOf(t, u))
		c, shaped := o.Copies[i]
		if !shaped && o.Direct {
			s.Proxies = append(s.Proxies, nil)
			urls = append(urls, u)
			continue
		}
		p, err := testenv.ListenProxy(testenv.RabbitAddr(), c)
		check(t, err, "broker proxy")
		t.Cleanup(p.Close)
		s.Proxies = append(s.Proxies, p)
		urls = append(urls, strings.Replace(u, testenv.RabbitAddr(), p.Addr(), 1))
	}
	target := o.Temporal
	if target == nil && o.Server == nil {
		t.Fatalf("stacktest: neither a Temporal target nor a server to take a namespace of")
	}
	if target == nil {
		ns, tc := o.Server.Namespace(t)
		target = &Target{Address: o.Server.Address(), Namespace: ns, Client: tc}
	}
	s.Temporal = target.Client

	s.DB, s.DSN = modelstest.NewDB(t)
	sqlDB, err := s.DB.DB()
	check(t, err, "database")
	workerDSN := s.DSN
	if o.PGProxy || o.PGCopy != nil {
		u, err := url.Parse(s.DSN)
		check(t, err, "parse the DSN")
		p, err := testenv.ListenProxy(u.Host, o.PGCopy)
		check(t, err, "Postgres proxy")
		t.Cleanup(p.Close)
		s.PGProxy = p
		u.Host = p.Addr()
		q := u.Query()
		q.Set("application_name", WorkerAppName)
		u.RawQuery = q.Encode()
		workerDSN = u.String()
	}
	s.Env = map[string]string{
		"RABBITMQ_CONNECTION_STRINGS": strings.Join(urls, ","),
		"DATABASE_URL":                workerDSN,
		"TEMPORAL_ADDRESS":            target.Address,
		"TEMPORAL_NAMESPACE":          target.Namespace,
		"TEMPORAL_TASK_QUEUE":         "brokerswitch-" + target.Namespace,
		// Two worker processes of one stack must not both take the default port.
		"METRICS_ADDR":   "127.0.0.1:0",
		"LOG_LEVEL":      "warn",
		"PRODUCER_TOKEN": ProducerToken,
		"OPERATOR_TOKEN": OperatorToken,
		// Tests and figures rotate faster than a producer does; api tests cover the limit.
		"NOTIFICATION_RATE":  "1000",
		"NOTIFICATION_BURST": "1000",
		"QUEUE_TYPE":         testenv.QueueType(),
	}
	maps.Copy(s.Env, o.Env)
	s.Config, err = config.FromEnv(func(k string) string { return s.Env[k] })
	check(t, err, "config")
	s.WorkerPool, s.WorkerDB = s.openWorkerDB(o, workerDSN)
	s.Store = brokerstate.NewStore(s.DB, s.Config.Brokers)

	eps, err := broker.ParseEndpoints(strings.Join(s.DirectURLs, ","))
	check(t, err, "endpoints")
	// Named apart from the service's connections, which the benchmark counts.
	s.Direct = broker.NewPool(eps, nil, broker.PoolSettings{ConnectionName: "stacktest", Heartbeat: config.DefaultAMQPHeartbeat})
	t.Cleanup(func() { _ = s.Direct.Close() })
	s.API = httptest.NewServer(api.Router(api.Deps{
		Settings: APISettings(s.Config), Temporal: s.Temporal, Store: s.Store, Ping: sqlDB.PingContext,
		Logger: s.logger, CommitWait: o.CommitWait,
	}))
	t.Cleanup(s.API.Close)
	ctx := context.Background()
	for i := range eps {
		if o.Predeclare != nil {
			o.Predeclare(t, s.Direct, i, s.Config)
		}
		check(t, s.Direct.DeclareTopology(ctx, i, s.Topology()), "declare topology")
	}
	return s
}

// openWorkerDB is the in-process workers' pool, and gorm on it: as the service bounds it
// when o says so, unbounded otherwise.
func (s *Stack) openWorkerDB(o Options, dsn string) (*pgxpool.Pool, *gorm.DB) {
	var bounds models.PoolConfig
	if o.ServicePool {
		bounds = models.PoolConfig{MaxOpenConns: s.Config.DBMaxOpenConns, StatementTimeout: s.Config.DBStatementTimeout,
			LockTimeout: s.Config.DBLockTimeout, Tracer: o.PGTracer}
	}
	pool, err := models.Connect(context.Background(), dsn, bounds)
	check(s.T, err, "open the workers' pool")
	s.T.Cleanup(pool.Close)
	db, err := models.OnPool(pool)
	check(s.T, err, "the workers' database")
	sqlDB, err := db.DB()
	check(s.T, err, "the workers' database")
	s.T.Cleanup(func() { _ = sqlDB.Close() })
	return pool, db
}

// Topology is the queues the service declares on every broker.
func (s *Stack) Topology() broker.Topology {
	return broker.Topology{Queues: s.Config.Queues, RetryTTL: s.Config.RetryTTL, Type: s.Config.QueueType}
}

// check ends t with err, if any.
func check(t testenv.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("stacktest: %s: %v", what, err)
	}
}

// APISettings are the API's part of cfg, as the service hands them over.
func APISettings(cfg config.Config) api.Settings {
	return api.Settings{
		Brokers: cfg.Brokers, TaskQueue: cfg.TaskQueue, HTTPAddr: cfg.HTTPAddr,
		OperatorToken: cfg.OperatorToken, ProducerToken: cfg.ProducerToken, InsecureNoAuth: cfg.InsecureNoAuth,
		NotificationMaxClockSkew: cfg.NotificationMaxClockSkew,
		NotificationRate:         cfg.NotificationRate, NotificationBurst: cfg.NotificationBurst,
	}
}
