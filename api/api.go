// Package api is the HTTP API of brokerswitch: the producer posts where it went, the
// operator forces or cancels a switch and reads the broker state. A notification is the
// one change a handler makes itself: it records it in Postgres (Store.Update, under the
// state's lock) before it signals the BrokerSwitch workflow, so that no window plans a
// Leftover Drain that reads the producer's new broker early. Forces and cancels are
// orders the workflow applies, each in one Postgres transaction, so that concurrent
// requests stay consistent.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/metrics"
)

// DefaultCommitWait bounds how long a forced switch or a cancel waits for the workflow to
// commit it before the API answers that the order was sent but is not committed yet.
const DefaultCommitWait = 15 * time.Second

// maxBodyBytes caps request bodies: a notification is a few hundred bytes.
const maxBodyBytes = 64 << 10

// TemporalClient is what the API needs from Temporal; client.Client has it.
type TemporalClient interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	QueryWorkflow(ctx context.Context, workflowID, runID, queryType string, args ...any) (converter.EncodedValue, error)
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
	CheckHealth(ctx context.Context, request *client.CheckHealthRequest) (*client.CheckHealthResponse, error)
}

// StateStore reads the broker state; *brokerstate.Store has it. The API writes one thing
// itself, the producer's notification, so that a window that starts right after the 202
// already sees the Pending Switch's route; moving brokers is left to the workflow.
type StateStore interface {
	// LoadAllowingRemoved reads the state as stored: an active broker removed from the
	// configuration reads as index -1, so that the force that repairs it can be asked for.
	LoadAllowingRemoved(ctx context.Context) (brokerstate.State, error)
	Update(ctx context.Context, fn func(brokerstate.State) (brokerstate.State, error)) (brokerstate.State, error)
	// Now is Postgres' clock, the one a Pending Switch's recording is dated by: a force
	// says when it was asked for on it.
	Now(ctx context.Context) (time.Time, error)
}

// Settings are the API's part of the configuration; they hold the tokens: never log them.
type Settings struct {
	// Brokers are RABBITMQ_CONNECTION_STRINGS, each at its index.
	Brokers []broker.Endpoint
	// TaskQueue is TEMPORAL_TASK_QUEUE, where the BrokerSwitch workflow is started.
	TaskQueue string
	// HTTPAddr is HTTP_ADDR, where Serve listens.
	HTTPAddr string
	// OperatorToken and ProducerToken are OPERATOR_TOKEN and PRODUCER_TOKEN; with both
	// empty, Serve refuses to start unless InsecureNoAuth (API_INSECURE_NO_AUTH) is set.
	OperatorToken, ProducerToken string
	InsecureNoAuth               bool
	// NotificationMaxClockSkew is NOTIFICATION_MAX_CLOCK_SKEW: how far ahead of now a
	// notification's switchedAt may be.
	NotificationMaxClockSkew time.Duration
	// NotificationRate and NotificationBurst are NOTIFICATION_RATE and NOTIFICATION_BURST;
	// a rate of 0 sets no limit.
	NotificationRate  float64
	NotificationBurst int
}

// Deps are what the API is built from.
type Deps struct {
	Settings Settings
	// Temporal signals and describes the BrokerSwitch workflow. Required.
	Temporal TemporalClient
	// Store reads the broker state from Postgres; build it with hops resolved against
	// Settings.Brokers (brokerstate.NewStore). Required.
	Store StateStore
	// Attempts lists what the live workers hold (liveness.Attempts over the database): which
	// broker each queue's window reads, on which worker, since when. Nil shows none.
	Attempts func(ctx context.Context) ([]liveness.Attempt, error)
	// Errors reads and moves the messages of the -error queues; nil answers 503 there.
	Errors ErrorQueues
	// Ping checks that Postgres answers, for /readyz (sql.DB.PingContext fits). Required.
	Ping func(ctx context.Context) error
	// Logger gets the request log and the errors clients are not shown; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// CommitWait bounds the wait for a forced switch or a cancel to commit; 0 means DefaultCommitWait.
	CommitWait time.Duration
}

// withDefaults fills the optional fields.
func (d Deps) withDefaults() Deps {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.CommitWait <= 0 {
		d.CommitWait = DefaultCommitWait
	}
	return d
}

// server holds the handlers; between requests it keeps only the last readiness answer.
type server struct {
	deps  Deps
	auth  authenticator
	log   *slog.Logger
	ready *metrics.Readiness
	// notifyLimit bounds notifications per token; nil when NOTIFICATION_RATE is 0.
	notifyLimit *notificationLimiter
}

// Router builds the HTTP handler. Deps.Temporal, Deps.Store and Deps.Ping must be set;
// Serve checks that, Router trusts its caller.
func Router(deps Deps) *gin.Engine {
	deps = deps.withDefaults()
	s := &server{
		deps:        deps,
		auth:        newAuthenticator(deps.Settings),
		log:         deps.Logger,
		ready:       newReadiness(deps),
		notifyLimit: newNotificationLimiter(deps.Settings.NotificationRate, deps.Settings.NotificationBurst, deps.Now),
	}

	// Debug mode prints every route and a warning to stdout; release mode keeps the log ours.
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// A redirect would answer 307 with an HTML body where clients expect a JSON 404.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	// Nothing here reads the client IP; trusting no proxy keeps X-Forwarded-For from
	// ever being believed, and gin from warning about it.
	_ = r.SetTrustedProxies(nil)
	r.Use(s.requestLog, s.recoverPanic)
	r.NoRoute(func(c *gin.Context) { s.fail(c, http.StatusNotFound, "no such endpoint") })
	r.NoMethod(func(c *gin.Context) { s.fail(c, http.StatusMethodNotAllowed, "method not allowed on this endpoint") })

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	// /metrics is not served here but on METRICS_ADDR (metrics.Serve): the producer-facing
	// port serves only the API, and slow scrapes do not queue behind its requests.

	v1 := r.Group("/api/v1/broker")
	v1.GET("", s.require(roleOperator), s.getBroker)
	v1.POST("/pending-switch", s.require(roleProducer), s.limitNotifications, s.limitBody, s.postPendingSwitch)
	v1.DELETE("/pending-switch", s.require(roleOperator), s.deletePendingSwitch)
	v1.POST("/switch/:index", s.require(roleOperator), s.postSwitch)

	errs := r.Group("/api/v1/errors", s.require(roleOperator), s.requireErrors)
	errs.GET("", s.getErrors)
	errs.GET("/:id", s.getErrorMessage)
	errs.POST("/requeue", s.limitBody, s.postRequeue)
	errs.POST("/purge", s.limitBody, s.postPurge)
	return r
}
