// Package config reads the service's configuration from the environment and
// refuses to start on a value it cannot use, naming the variable.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/brokerswitch/brokerswitch/broker"
)

// Config is everything the binary needs; each field names its variable and default.
// A field that holds a secret is tagged `secret:"true"`: String, Format, LogValue and
// MarshalJSON show it as xxxxx.
type Config struct {
	// Brokers from RABBITMQ_CONNECTION_STRINGS (default amqp://guest:guest@127.0.0.1:5672/);
	// a broker's index is its position in the list.
	Brokers []broker.Endpoint
	// DatabaseURL from DATABASE_URL (default a local Postgres database named brokerswitch).
	DatabaseURL string `secret:"true"`
	// DBMaxOpenConns from DB_MAX_OPEN_CONNS (default 10): the Postgres connections one
	// process may hold. Size it per process: the sum over every worker and API replica
	// must stay below the server's max_connections, or a burst starves ingestion.
	DBMaxOpenConns int
	// DBStatementTimeout from DB_STATEMENT_TIMEOUT (default 30s): Postgres ends a statement
	// that runs longer, so that a stuck query cannot hold a pooled connection forever.
	DBStatementTimeout time.Duration
	// DBLockTimeout from DB_LOCK_TIMEOUT (default 10s): Postgres ends a wait for a lock
	// that lasts longer; the activity or request that waited is retried.
	DBLockTimeout time.Duration
	// DBIdleInTransactionTimeout from DB_IDLE_IN_TRANSACTION_TIMEOUT (default 5s): Postgres
	// ends a session of ours that sits in an open transaction without a statement for
	// longer (idle_in_transaction_session_timeout), so that the ledger claims and row locks
	// of a worker paused or cut off mid-batch are gone before its lease expires
	// (WORKER_LEASE_TTL) and a peer takes its queues; longer, the peer's batches wait on
	// them until DB_LOCK_TIMEOUT and are retried.
	DBIdleInTransactionTimeout time.Duration
	// TemporalAddress from TEMPORAL_ADDRESS (default 127.0.0.1:7233).
	TemporalAddress string
	// TemporalNamespace from TEMPORAL_NAMESPACE (default "default").
	TemporalNamespace string
	// Temporal are the client options that the SDK's envconfig reads from a profile file
	// (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE) and from TEMPORAL_ADDRESS,
	// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH,
	// TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
	// TEMPORAL_TLS_SERVER_NAME and the rest of its variables. It holds secrets: never log it.
	Temporal client.Options `secret:"true"`
	// TaskQueue from TEMPORAL_TASK_QUEUE (default "brokerswitch").
	TaskQueue string
	// Queues from QUEUES (default pull_requests,issues,pushes,installations): the logical queues.
	Queues []string
	// ConsumerWindow from CONSUMER_WINDOW (default 2h): the longest a consumer window lasts.
	// A window ends earlier when a switch is committed or a spare it watches has
	// stragglers; each window costs 3 Temporal Actions per queue.
	ConsumerWindow time.Duration
	// SpareCheckInterval from SPARE_CHECK_INTERVAL (default 15s): how often a consumer
	// window counts the spares' queues (a passive declare: no message, no Action), so that
	// a straggler on a spare is read within about this long.
	SpareCheckInterval time.Duration
	// RetryTTL from RETRY_TTL (default 10m): the TTL of the -retry queues; must equal the producer's.
	RetryTTL time.Duration
	// QueueType from QUEUE_TYPE (default classic, or quorum): the x-queue-type of every
	// queue declared; must equal the producer's. A queue found of the other type stops the
	// worker at start and fails each window, naming the queue, the type and this setting.
	QueueType broker.QueueType
	// MaxRetryCycles from MAX_RETRY_CYCLES (default 10): retry cycles before a message goes to -error.
	MaxRetryCycles int
	// LedgerRetention from LEDGER_RETENTION (default 168h, 7 days): the worker deletes
	// ledger rows whose last attempt is older. A delivery that comes back later is applied
	// again, so it must outlast every redelivery path; see MinLedgerRetention.
	LedgerRetention time.Duration
	// Prefetch from PREFETCH (default 200, at most 500): unacknowledged messages per consumer,
	// also the largest batch committed in one transaction; the batch settling ahead holds
	// about half of them, so batches run near half of it. CloudAMQP's shared plans close a
	// connection with more than 1,000 unacknowledged messages, so it stays well below that.
	Prefetch int
	// MaxMessageBytes from MAX_MESSAGE_BYTES (default 26214400, 25 MiB: GitHub's own cap
	// on a webhook payload): a message whose body is larger goes to -error, unread, with
	// the limit in its reason.
	MaxMessageBytes int
	// MaxBatchBytes from MAX_BATCH_BYTES (default 16777216, 16 MiB): the most body bytes
	// committed in one transaction, besides PREFETCH messages; a single message larger than
	// this is committed alone.
	MaxBatchBytes int
	// MemoryLimit from MEMORY_LIMIT (default empty: no limit), in bytes or with a Ki, Mi,
	// Gi or Ti suffix: the memory the process may use, the container's limit. The Go
	// runtime's soft limit (GOMEMLIMIT, unless that is set) is put at 90% of it,
	// SoftMemoryLimit, and start-up refuses settings whose WorstCaseMemory exceeds that.
	MemoryLimit int64
	// WorkerLeaseTTL from WORKER_LEASE_TTL (default 8s, at least 2s): how long a worker's
	// lease in Postgres outlives its last renewal. A worker renews it every quarter of
	// this while it reaches Postgres and Temporal, and stops its windows once it has not
	// for three quarters; a peer retries a dead worker's windows once its lease expired.
	WorkerLeaseTTL time.Duration
	// AMQPHeartbeat from AMQP_HEARTBEAT (default 3s): the AMQP heartbeat timeout offered to
	// the brokers. A worker whose host vanishes (no TCP close), or that is paused, keeps its
	// consumer, and so its queue, until the broker drops its silent connection, about three
	// times this long after.
	AMQPHeartbeat time.Duration
	// WorkerStopTimeout from WORKER_STOP_TIMEOUT (default 1m): how long a stopping worker
	// lets its windows settle their batch in hand. Keep a container's termination grace
	// period longer.
	WorkerStopTimeout time.Duration
	// DrainCheckInterval from DRAIN_CHECK_INTERVAL (default 3s): the pause between drain checks
	// while a switch is pending.
	DrainCheckInterval time.Duration
	// NotificationMaxClockSkew from NOTIFICATION_MAX_CLOCK_SKEW (default 5m): how far ahead
	// of this server's clock a notification's switchedAt may be; beyond it the
	// notification is refused, so that a producer's clock gone wrong cannot hide the real
	// notifications that follow.
	NotificationMaxClockSkew time.Duration
	// NotificationRate from NOTIFICATION_RATE (default 1): the notifications a second one
	// token may post beyond NotificationBurst; more are answered 429 with Retry-After.
	// 0 in a Config built in code means no limit.
	NotificationRate float64
	// NotificationBurst from NOTIFICATION_BURST (default 10): the notifications one token
	// may post at once before NotificationRate applies.
	NotificationBurst int
	// LeftoverDrainCap from LEFTOVER_DRAIN_CAP (default 500): messages one Leftover Drain takes
	// per queue and window at most.
	LeftoverDrainCap int
	// UnnotifiedBrokerGrace from UNNOTIFIED_BROKER_GRACE (default 2h): how long messages on a
	// broker the producer never announced wait for its notification before they are read
	// (once the active broker is empty), and how long such messages, or messages on a
	// broker seen empty since the producer left it, hold the commit of a drained broker's
	// hop: the word placing them may still be on its way. Keep it longer than the
	// producer's notification retries take: WebhooksHandler's take up to 10 × 10 minutes.
	UnnotifiedBrokerGrace time.Duration
	// HTTPAddr from HTTP_ADDR (default :8080).
	HTTPAddr string
	// ProducerToken from PRODUCER_TOKEN: may only post pending-switch notifications.
	ProducerToken string `secret:"true"`
	// OperatorToken from OPERATOR_TOKEN: may do everything.
	OperatorToken string `secret:"true"`
	// InsecureNoAuth from API_INSECURE_NO_AUTH (default false): lets the API start with no token,
	// for local development only.
	InsecureNoAuth bool
	// LogLevel from LOG_LEVEL (default info): debug, info, warn or error.
	LogLevel string
	// MetricsAddr from METRICS_ADDR (default :9090): where `worker`, `api` and `serve`
	// serve /metrics and /healthz (and the worker's /readyz), apart from HTTP_ADDR.
	MetricsAddr string
	// HealthchecksPingURL from HEALTHCHECKS_PING_URL (default empty: no pings): a
	// healthchecks.io-style check pinged at the start, success and failure of every
	// consumer window.
	HealthchecksPingURL string `secret:"true"`
	// WebhookSecret from WEBHOOK_SECRET (default empty: payloads are not verified): the
	// secret of the GitHub webhook; when set, every message must carry GitHub's
	// X-Hub-Signature-256 of its body, forwarded as x-hub-signature-256, or it goes to
	// {q}-error. Never logged.
	WebhookSecret string `secret:"true"`
}

// The defaults whose reason takes more than the field's line; read writes the others.
// docs/configuration.md repeats them all, and a test holds it to FromEnv.
const (
	// DefaultWorkerLeaseTTL is WORKER_LEASE_TTL's default: a killed worker's queues are
	// read again about this long after its last renewal.
	DefaultWorkerLeaseTTL = 8 * time.Second
	// DefaultAMQPHeartbeat is AMQP_HEARTBEAT's default. RabbitMQ drops a silent
	// connection about three heartbeats later (3.10: 29 s at 10 s, 8 s at 3 s, measured
	// against a SIGSTOPped client), and with it the exclusive consumer of a paused or
	// cut-off worker: at 3 s its queues are read again within the 15 s a killed worker's
	// are. RabbitMQ advises at least 5 s against false positives; at 5 s the broker alone
	// would take about 15 s, and a live connection dropped as silent only ends its
	// windows, their batches back at the head of their queues.
	DefaultAMQPHeartbeat = 3 * time.Second
	// DefaultPrefetch is PREFETCH's default. The batch ahead, settling while the next is
	// handled, holds its deliveries until its acks are in, so the batch in hand gets
	// about half the prefetch: 200 keeps batches near 100.
	DefaultPrefetch = 200
	// DBSilentSessionTimeout is about how soon either end of a Postgres connection gives a
	// silent link up (TCP keepalives, tcp_user_timeout): the session of a worker cut off
	// mid-batch, and its ledger claims and row locks, are gone within it, before its lease
	// expires and a peer takes its queues.
	DBSilentSessionTimeout = 5 * time.Second
	// DefaultUnnotifiedBrokerGrace is UNNOTIFIED_BROKER_GRACE's default. WebhooksHandler
	// retries a failed notification through its own -retry queue, ten minutes a cycle and
	// ten cycles at most: a notification can arrive 100 minutes after the rotation and
	// still be the producer's word. Two hours covers that with room for the producer's
	// own backlog.
	DefaultUnnotifiedBrokerGrace = 2 * time.Hour
	// DefaultNotificationMaxClockSkew is NOTIFICATION_MAX_CLOCK_SKEW's default, the bound
	// on a notification's switchedAt and on an event's entity clock alike.
	DefaultNotificationMaxClockSkew = 5 * time.Minute
)

// Getenv looks a variable up; os.Getenv fits, and tests pass a map's lookup.
type Getenv func(string) string

// FileVariables are the secrets that may instead be read from a file named by the same
// variable with _FILE appended (DATABASE_URL_FILE=/run/secrets/database-url), as a
// mounted Kubernetes or Docker secret gives them.
var FileVariables = []string{"DATABASE_URL", "RABBITMQ_CONNECTION_STRINGS", "OPERATOR_TOKEN", "PRODUCER_TOKEN", "TEMPORAL_API_KEY",
	"HEALTHCHECKS_PING_URL", "WEBHOOK_SECRET"}

// optionalFiles are the FileVariables that may be left unset: a _FILE naming a file that
// does not exist leaves them unset, as a key missing from an optional Secret volume does.
var optionalFiles = []string{"TEMPORAL_API_KEY", "HEALTHCHECKS_PING_URL", "WEBHOOK_SECRET"}

// FromEnv reads the configuration, each variable left unset taking its default, and
// validates it; the error names every bad variable.
func FromEnv(getenv Getenv) (Config, error) {
	r := reader{}
	r.getenv = r.withFiles(getenv)
	c := r.read()
	r.validate(c)
	return c, errors.Join(r.errs...)
}

// read reads every variable, or its default: the one place a default is written.
// A value it cannot parse is named and read as zero.
func (r *reader) read() Config {
	c := Config{
		Brokers:                    r.brokers("RABBITMQ_CONNECTION_STRINGS", "amqp://guest:guest@127.0.0.1:5672/"),
		DatabaseURL:                r.str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/brokerswitch?sslmode=disable"),
		DBMaxOpenConns:             r.positiveInt("DB_MAX_OPEN_CONNS", 10),
		DBStatementTimeout:         r.durationAtMost("DB_STATEMENT_TIMEOUT", 30*time.Second, maxPostgresTimeout),
		DBLockTimeout:              r.durationAtMost("DB_LOCK_TIMEOUT", 10*time.Second, maxPostgresTimeout),
		DBIdleInTransactionTimeout: r.durationAtMost("DB_IDLE_IN_TRANSACTION_TIMEOUT", 5*time.Second, maxPostgresTimeout),
		Temporal:                   r.temporal(r.getenv),
		TaskQueue:                  r.str("TEMPORAL_TASK_QUEUE", "brokerswitch"),
		Queues:                     r.list("QUEUES", "pull_requests,issues,pushes,installations"),
		ConsumerWindow:             r.duration("CONSUMER_WINDOW", 2*time.Hour),
		SpareCheckInterval:         r.duration("SPARE_CHECK_INTERVAL", 15*time.Second),
		RetryTTL:                   r.duration("RETRY_TTL", 10*time.Minute),
		QueueType:                  r.queueType("QUEUE_TYPE", broker.Classic),
		MaxRetryCycles:             r.positiveInt("MAX_RETRY_CYCLES", 10),
		LedgerRetention:            r.duration("LEDGER_RETENTION", 168*time.Hour),
		Prefetch:                   r.positiveInt("PREFETCH", DefaultPrefetch),
		MaxMessageBytes:            r.intAtMost("MAX_MESSAGE_BYTES", 26214400, MaxBodyBytes),
		MaxBatchBytes:              r.intAtMost("MAX_BATCH_BYTES", 16777216, MaxBodyBytes),
		MemoryLimit:                r.bytes("MEMORY_LIMIT"),
		DrainCheckInterval:         r.duration("DRAIN_CHECK_INTERVAL", 3*time.Second),
		WorkerLeaseTTL:             r.duration("WORKER_LEASE_TTL", DefaultWorkerLeaseTTL),
		AMQPHeartbeat:              r.duration("AMQP_HEARTBEAT", DefaultAMQPHeartbeat),
		WorkerStopTimeout:          r.duration("WORKER_STOP_TIMEOUT", time.Minute),
		LeftoverDrainCap:           r.positiveInt("LEFTOVER_DRAIN_CAP", 500),
		UnnotifiedBrokerGrace:      r.duration("UNNOTIFIED_BROKER_GRACE", DefaultUnnotifiedBrokerGrace),
		HTTPAddr:                   r.str("HTTP_ADDR", ":8080"),
		ProducerToken:              r.token("PRODUCER_TOKEN"),
		OperatorToken:              r.token("OPERATOR_TOKEN"),
		InsecureNoAuth:             r.boolean("API_INSECURE_NO_AUTH"),
		LogLevel:                   r.str("LOG_LEVEL", "info"),
		MetricsAddr:                r.str("METRICS_ADDR", ":9090"),
		HealthchecksPingURL:        r.str("HEALTHCHECKS_PING_URL", ""),
		WebhookSecret:              r.str("WEBHOOK_SECRET", ""),
		NotificationMaxClockSkew:   r.duration("NOTIFICATION_MAX_CLOCK_SKEW", DefaultNotificationMaxClockSkew),
		NotificationRate:           r.positiveFloat("NOTIFICATION_RATE", 1),
		NotificationBurst:          r.positiveInt("NOTIFICATION_BURST", 10),
	}
	c.TemporalAddress, c.TemporalNamespace = c.Temporal.HostPort, c.Temporal.Namespace
	if r.getenv("WINDOW_HEARTBEAT_TIMEOUT") != "" {
		r.fail("WINDOW_HEARTBEAT_TIMEOUT", "is no longer read: windows send no heartbeats, a worker's liveness is its lease in Postgres (WORKER_LEASE_TTL); remove the variable")
	}
	return c
}

// validate names each value read that the service cannot use, alone or with another.
// A value already refused by read is zero and not checked again.
func (r *reader) validate(c Config) {
	if len(c.Queues) == 0 {
		r.fail("QUEUES", "no queue configured")
	}
	if c.WorkerLeaseTTL > 0 && c.WorkerLeaseTTL < 2*time.Second {
		r.fail("WORKER_LEASE_TTL", "must be at least 2s: the lease is renewed every quarter of it")
	}
	if c.Prefetch > broker.MaxPrefetch {
		r.fail("PREFETCH", fmt.Sprintf("must be at most %d: CloudAMQP closes connections with more than 1000 unacknowledged messages", broker.MaxPrefetch))
	}
	if c.LedgerRetention > 0 && c.RetryTTL > 0 && c.MaxRetryCycles > 0 {
		if least := MinLedgerRetention(c.RetryTTL, c.MaxRetryCycles); c.LedgerRetention < least {
			r.fail("LEDGER_RETENTION", fmt.Sprintf("%s is shorter than the longest redelivery path: RETRY_TTL × MAX_RETRY_CYCLES + margin = %s × %d + %s = %s; a delivery still going through -retry would be applied again",
				c.LedgerRetention, c.RetryTTL, c.MaxRetryCycles, LedgerRetentionMargin, least))
		}
	}
	r.checkMemory(c)
	if c.HealthchecksPingURL != "" {
		if u, err := url.Parse(c.HealthchecksPingURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// The URL is the check's credential: it is not quoted.
			r.fail("HEALTHCHECKS_PING_URL", "is not an http or https URL such as https://hc-ping.com/<uuid>")
		}
	}
	r.errs = append(r.errs, c.tokenErrors()...)
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		r.fail("LOG_LEVEL", "must be debug, info, warn or error")
	}
}

// LedgerRetentionMargin is added to the -retry path in MinLedgerRetention: a delivery also
// waits in its queue before each attempt, behind a backlog or through a consumer outage,
// and that wait has no bound in the configuration. A day covers an outage noticed and
// fixed within it.
const LedgerRetentionMargin = 24 * time.Hour

// MinLedgerRetention is the shortest LEDGER_RETENTION accepted: a delivery can come back
// through -retry for retryTTL × cycles after its first attempt, plus LedgerRetentionMargin.
// A sum that overflows counts as the longest duration, which no LEDGER_RETENTION reaches.
func MinLedgerRetention(retryTTL time.Duration, cycles int) time.Duration {
	return time.Duration(addCapped(mulCapped(int64(retryTTL), int64(cycles)), int64(LedgerRetentionMargin)))
}

// mulCapped is a×b for a, b ≥ 0, or math.MaxInt64 when that overflows.
func mulCapped(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// addCapped is a+b for a, b ≥ 0, or math.MaxInt64 when that overflows.
func addCapped(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// PlaintextBrokers are the brokers reached by plain amqp:// on a host that is not
// loopback: their passwords and messages cross the network unencrypted. The process
// starts anyway (a private network may be trusted) and warns of each.
func (c Config) PlaintextBrokers() []broker.Endpoint {
	var out []broker.Endpoint
	for _, ep := range c.Brokers {
		if !strings.HasPrefix(strings.ToLower(ep.URL), "amqp://") {
			continue
		}
		if ep.Host == "localhost" {
			continue
		}
		if ip := net.ParseIP(ep.Host); ip != nil && ip.IsLoopback() {
			continue
		}
		out = append(out, ep)
	}
	return out
}

// MinTokenLength is the shortest token accepted: a short token can be guessed.
const MinTokenLength = 16

// ValidateAPIAuth refuses an API with no token unless development mode was asked for, and
// tokens that are too short or equal (a Config built in code skips FromEnv's checks).
func (c Config) ValidateAPIAuth() error {
	if c.ProducerToken == "" && c.OperatorToken == "" && !c.InsecureNoAuth {
		return errors.New("config: OPERATOR_TOKEN and PRODUCER_TOKEN are both empty; set them, or API_INSECURE_NO_AUTH=true for local development")
	}
	return errors.Join(c.tokenErrors()...)
}

// tokenErrors checks the tokens that are set; the errors never quote a token.
func (c Config) tokenErrors() []error {
	var errs []error
	for _, t := range []struct{ name, value string }{{"OPERATOR_TOKEN", c.OperatorToken}, {"PRODUCER_TOKEN", c.ProducerToken}} {
		if t.value != "" && len(t.value) < MinTokenLength {
			errs = append(errs, fmt.Errorf("config: %s: is %d characters long, at least %d are required", t.name, len(t.value), MinTokenLength))
		}
	}
	if c.OperatorToken != "" && c.OperatorToken == c.ProducerToken {
		// The producer would hold the operator's powers.
		errs = append(errs, errors.New("config: OPERATOR_TOKEN and PRODUCER_TOKEN are equal; give each role its own token"))
	}
	return errs
}

// reader collects every bad variable so that one start reports them all.
type reader struct {
	getenv Getenv
	errs   []error
}

// withFiles returns getenv with each of FileVariables whose _FILE twin is set read from
// that file. Both set is an error naming both; an unreadable file is an error naming the
// variable. The contents, secrets, are never quoted.
func (r *reader) withFiles(getenv Getenv) Getenv {
	fromFile := map[string]string{}
	for _, name := range FileVariables {
		path := strings.TrimSpace(getenv(name + "_FILE"))
		if path == "" {
			continue
		}
		if strings.TrimSpace(getenv(name)) != "" {
			r.fail(name+"_FILE", fmt.Sprintf("%s and %s are both set; set one of them", name, name+"_FILE"))
			continue
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) && slices.Contains(optionalFiles, name) {
			continue
		}
		if err != nil {
			// A *PathError names the path and the cause, never the contents.
			r.fail(name+"_FILE", fmt.Sprintf("cannot read the file with %s: %v", name, err))
			continue
		}
		fromFile[name] = string(b)
	}
	return func(name string) string {
		if v, ok := fromFile[name]; ok {
			return v
		}
		return getenv(name)
	}
}

func (r *reader) fail(name, why string) {
	r.errs = append(r.errs, fmt.Errorf("config: %s: %s", name, why))
}

func (r *reader) str(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	return def
}

// brokers reads the broker URLs, at least one.
func (r *reader) brokers(name, def string) []broker.Endpoint {
	eps, err := broker.ParseEndpoints(r.str(name, def))
	if err != nil {
		r.fail(name, err.Error())
	} else if len(eps) == 0 {
		r.fail(name, "no broker configured")
	}
	return eps
}

func (r *reader) queueType(name string, def broker.QueueType) broker.QueueType {
	qt, err := broker.ParseQueueType(r.str(name, string(def)))
	if err != nil {
		r.fail(name, err.Error())
	}
	return qt
}

// temporal reads the Temporal client options with the SDK's envconfig, the conventions
// Temporal's own tools use, and fills in brokerswitch's defaults.
func (r *reader) temporal(getenv Getenv) client.Options {
	opts, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{EnvLookup: envLookup(getenv)})
	if err != nil {
		// envconfig's errors name the setting and quote no secret.
		r.fail("TEMPORAL_* (Temporal client settings)", err.Error())
		return opts
	}
	if strings.TrimSpace(opts.HostPort) == "" {
		opts.HostPort = "127.0.0.1:7233"
	}
	if strings.TrimSpace(opts.Namespace) == "" {
		opts.Namespace = "default"
	}
	return opts
}

// envLookup lets envconfig read through Getenv: an empty variable counts as unset.
// TEMPORAL_GRPC_META_* headers, which envconfig finds by listing the environment, are
// read from the profile file only.
type envLookup Getenv

func (e envLookup) LookupEnv(key string) (string, bool) {
	v := strings.TrimSpace(e(key))
	return v, v != ""
}

func (e envLookup) Environ() []string { return nil }

// token reads a secret: surrounding whitespace and newlines (a token read from a file or
// a Kubernetes Secret often ends in one) are trimmed, as the API trims the presented one.
func (r *reader) token(name string) string {
	return strings.TrimSpace(r.getenv(name))
}

func (r *reader) list(name, def string) []string {
	var out []string
	for _, part := range strings.FieldsFunc(r.str(name, def), func(c rune) bool { return c == ',' || c == '\n' }) {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Upper bounds of numeric settings: past them a value is a mistake, and the sums and
// products the process makes of it could overflow.
const (
	// MaxDuration is the longest duration any variable accepts, about 11 years.
	MaxDuration = 100000 * time.Hour
	// MaxBodyBytes bounds MAX_MESSAGE_BYTES and MAX_BATCH_BYTES: 512 MiB, RabbitMQ's
	// largest max_message_size.
	MaxBodyBytes = 512 << 20
	// maxPostgresTimeout is the longest statement_timeout, lock_timeout or
	// idle_in_transaction_session_timeout Postgres takes, INT_MAX milliseconds.
	maxPostgresTimeout = math.MaxInt32 * time.Millisecond
)

func (r *reader) duration(name string, def time.Duration) time.Duration {
	return r.durationAtMost(name, def, MaxDuration)
}

func (r *reader) durationAtMost(name string, def, most time.Duration) time.Duration {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(name, fmt.Sprintf("%q is not a positive duration such as 30s or 5m", v))
		return 0
	}
	if d > most {
		r.fail(name, fmt.Sprintf("%q is longer than %s, the most it may be", v, most))
		return 0
	}
	return d
}

func (r *reader) positiveInt(name string, def int) int {
	return r.intAtMost(name, def, math.MaxInt)
}

func (r *reader) intAtMost(name string, def, most int) int {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		r.fail(name, fmt.Sprintf("%q is not a positive whole number", v))
		return 0
	}
	if n > most {
		r.fail(name, fmt.Sprintf("%q is more than %d, the most it may be", v, most))
		return 0
	}
	return n
}

func (r *reader) positiveFloat(name string, def float64) float64 {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		r.fail(name, fmt.Sprintf("%q is not a positive number such as 1 or 0.5", v))
		return 0
	}
	return f
}

func (r *reader) boolean(name string) bool {
	v := r.str(name, "false")
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, fmt.Sprintf("%q is not true or false", v))
	}
	return b
}
