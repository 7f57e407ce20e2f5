// Package metrics holds the service's Prometheus collectors. One *prometheus.Registry is
// built at start and handed to New; the packages that do the work get the *Metrics and
// call its methods. A nil *Metrics is a valid no-op, so tests that do not care pass nil.
//
// Labels stay low-cardinality: a logical queue, a GitHub event type from a bounded set,
// a broker index, an outcome. Never a delivery id, a host or a workflow id.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every metric of the service (Temporal's own are temporal_*).
const namespace = "brokerswitch"

// Event outcomes, the outcome label of brokerswitch_events_total.
const (
	OutcomeApplied   = "applied"   // written to the typed tables
	OutcomeIgnored   = "ignored"   // an event type with no table, recorded in the ledger only
	OutcomeDuplicate = "duplicate" // already applied or ignored: acknowledged, no second effect
	OutcomeRetried   = "retried"   // failed on its own, sent through {q}-retry
	OutcomeRejected  = "rejected"  // malformed, or out of retry cycles: sent to {q}-error
)

// Routes of a message that was not acknowledged as handled, the route label of
// brokerswitch_routed_messages_total.
const (
	RouteRetry = "retry" // rejected without requeue: dead-lettered to {q}-retry
	RouteError = "error" // copied to {q}-error with its reason, then acknowledged
)

// What became of a message whose headers the AMQP client cannot read, the outcome label
// of brokerswitch_unreadable_messages_total.
const (
	UnreadableMoved    = "moved"     // copied to {q}-error without decoding its headers
	UnreadableNotFound = "not_found" // a connection was cut by an unreadable frame, but no such message was found at the head
)

// What became of a message whose body is larger than MAX_MESSAGE_BYTES, the outcome label
// of brokerswitch_oversize_messages_total.
const (
	OversizeMoved    = "moved"     // streamed to {q}-error unread and acknowledged
	OversizeNotMoved = "not_moved" // not at the head any more, or the move failed: the next window tries again
)

// Why an event's entity clock could not be used, the reason label of
// brokerswitch_clock_fallbacks_total.
const (
	ClockMissing     = "missing"     // the payload has no clock field, or it is null
	ClockUnparseable = "unparseable" // the field holds something that is not a timestamp
	ClockFuture      = "future"      // the timestamp is past now + the allowed skew: not a real clock
)

// clockTables are the typed tables whose rows follow GitHub's clock (ingest's clockOf),
// the table label of brokerswitch_clock_fallbacks_total.
func clockTables() []string {
	return []string{"github_pull_requests", "github_issues", "github_comments", "github_installations", "github_repositories"}
}

// Window ends, the end label of brokerswitch_consumer_window_seconds.
const (
	WindowElapsed   = "elapsed"   // the window ran its CONSUMER_WINDOW
	WindowCancelled = "cancelled" // a committed switch (or the worker stopping) ended it early
	WindowFailed    = "failed"    // the broker or the database failed; the activity retries
)

// Drain check results, the result label of brokerswitch_drain_checks_total.
const (
	DrainDrained     = "drained"
	DrainNotDrained  = "not_drained"
	DrainUnreachable = "unreachable"
)

// Metrics are the service's collectors. Build it with New; the zero value is not usable,
// but a nil *Metrics is: every method is then a no-op.
type Metrics struct {
	gatherer prometheus.Gatherer

	events        *prometheus.CounterVec
	routed        *prometheus.CounterVec
	leftover      *prometheus.CounterVec
	leftoverDown  *prometheus.CounterVec
	leftoverFail  *prometheus.CounterVec
	unannHeld     *prometheus.CounterVec
	unannRead     *prometheus.CounterVec
	drainChecks   *prometheus.CounterVec
	switches      *prometheus.CounterVec
	commitLag     prometheus.Histogram
	pendingFor    prometheus.Histogram
	windows       *prometheus.HistogramVec
	reconnects    *prometheus.CounterVec
	leaseLost     prometheus.Counter
	leaseReaped   *prometheus.CounterVec
	dialFailures  *prometheus.CounterVec
	connsLost     *prometheus.CounterVec
	blocked       *prometheus.GaugeVec
	pingFailures  prometheus.Counter
	idReused      *prometheus.CounterVec
	clockFallback *prometheus.CounterVec
	quorumRisk    *prometheus.GaugeVec
	delivLimited  *prometheus.CounterVec
	unreadable    *prometheus.CounterVec
	oversize      *prometheus.CounterVec
	ledger        ledgerGauges
	registerer    prometheus.Registerer
	stateWatching bool
}

// New builds the collectors and registers them with reg, which also serves them (Handler).
// It panics if they are registered already, like prometheus.MustRegister.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{gatherer: reg, registerer: reg, ledger: newLedgerGauges()}
	reg.MustRegister(m.ledger.collectors()...)
	reg.MustRegister(m.messageCollectors()...)
	reg.MustRegister(m.leftoverCollectors()...)
	reg.MustRegister(m.switchCollectors()...)
	reg.MustRegister(m.brokerCollectors()...)
	reg.MustRegister(m.workerCollectors()...)
	return m
}

// counterVec is a counter of the service's namespace, by labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

// gaugeVec is a gauge of the service's namespace, by labels.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

// messageCollectors builds the collectors of what became of the deliveries: their outcome,
// their route, and what about them needs an eye. Each is also set in m.
func (m *Metrics) messageCollectors() []prometheus.Collector {
	m.events = counterVec("events_total",
		"Deliveries handled, by logical queue, GitHub event type (\"other\" outside the known set) and outcome: applied, ignored, duplicate, retried or rejected.",
		"queue", "event", "outcome")
	m.routed = counterVec("routed_messages_total",
		"Messages routed away from a logical queue: route=retry (dead-lettered to {q}-retry) or route=error (copied to {q}-error).",
		"queue", "route")
	m.idReused = counterVec("delivery_id_reused_total",
		"Deliveries whose id the ledger holds with a different payload hash: rejected to {q}-error, not acknowledged as duplicates.",
		"queue")
	m.clockFallback = counterVec("clock_fallbacks_total",
		"Applied events whose entity clock was missing, unparseable or in the future (past now + NOTIFICATION_MAX_CLOCK_SKEW), by typed table and reason: their row followed queue order.",
		"table", "reason")
	m.delivLimited = counterVec("delivery_limit_returns_total",
		"Deliveries handled that a quorum queue had dead-lettered for its x-delivery-limit: they came back through {q}-retry behind messages published after them.",
		"queue")
	m.unreadable = counterVec("unreadable_messages_total",
		"Consumer connections cut by a message whose headers the AMQP client refuses, by queue and outcome: moved (the message was copied to {q}-error unread) or not_found (no such message was found at the head; the queue may be stuck).",
		"queue", "outcome")
	m.oversize = counterVec("oversize_messages_total",
		"Messages whose body is larger than MAX_MESSAGE_BYTES, which no consumer holds, by queue and outcome: moved (streamed to {q}-error unread) or not_moved (not at the head any more, or the move failed; the next window tries again).",
		"queue", "outcome")
	return []prometheus.Collector{m.events, m.routed, m.idReused, m.clockFallback, m.delivLimited, m.unreadable, m.oversize}
}

// leftoverCollectors builds the collectors of the Leftover Drain and of the brokers the
// producer never announced. Each is also set in m.
func (m *Metrics) leftoverCollectors() []prometheus.Collector {
	m.leftover = counterVec("leftover_drain_messages_total",
		"Messages the Leftover Drain took from a broker that is not the active one, by queue and broker index.",
		"queue", "broker")
	m.leftoverDown = counterVec("leftover_drain_unreachable_total",
		"Leftover Drain visits that skipped a broker because it could not be reached (a warning, never a failed window).",
		"queue", "broker")
	m.leftoverFail = counterVec("leftover_drain_failures_total",
		"Leftover Drain visits that failed on a broker that could be reached (a refused declaration, a closed channel, another consumer on the queue): the window does not read the active broker past it while it holds messages.",
		"queue", "broker")
	m.unannHeld = counterVec("unannounced_held_total",
		"Leftover Drain visits that found messages the producer never announced on a broker and left them there for its notification.",
		"queue", "broker")
	m.unannRead = counterVec("unannounced_messages_total",
		"Messages taken from a broker the producer never announced, once UNNOTIFIED_BROKER_GRACE passed without its notification.",
		"queue", "broker")
	return []prometheus.Collector{m.leftover, m.leftoverDown, m.leftoverFail, m.unannHeld, m.unannRead}
}

// switchCollectors builds the collectors of switches and consumer windows. Each is also set in m.
func (m *Metrics) switchCollectors() []prometheus.Collector {
	m.drainChecks = counterVec("drain_checks_total",
		"Drain checks of the active broker while a switch is pending, by broker index and result: drained, not_drained or unreachable.",
		"broker", "result")
	m.switches = counterVec("switches_total",
		"Switches committed: forced=\"false\" after a drain check found the old broker empty, forced=\"true\" by an operator.",
		"forced")
	m.commitLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Name: "switch_commit_lag_seconds",
		Help:    "From the drain check that found the old broker empty to the commit of the hop.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5ms to 41s
	})
	m.pendingFor = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Name: "switch_pending_seconds",
		Help:    "How long a Pending Switch waited, from its recording to the commit of a hop: the time the producer's new broker went unread.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200},
	})
	m.windows = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "consumer_window_seconds",
		Help:    "Length of consumer windows on the active broker, by queue and how they ended: elapsed, cancelled (a committed switch or a stop) or failed.",
		Buckets: []float64{0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600},
	}, []string{"queue", "end"})
	return []prometheus.Collector{m.drainChecks, m.switches, m.commitLag, m.pendingFor, m.windows}
}

// brokerCollectors builds the collectors of the AMQP connections and the producers' queues. Each is also set in m.
func (m *Metrics) brokerCollectors() []prometheus.Collector {
	m.reconnects = counterVec("amqp_reconnects_total",
		"AMQP connections opened to a broker after its first one: a redial after the connection was lost.",
		"broker")
	m.dialFailures = counterVec("amqp_dial_failures_total",
		"Failed attempts to connect to a broker.",
		"broker")
	m.connsLost = counterVec("amqp_connections_lost_total",
		"AMQP connections that the broker or the network closed.",
		"broker")
	m.blocked = gaugeVec("amqp_blocked",
		"1 while a broker has blocked this process's connection (connection.blocked: a memory or disk alarm), so publishes wait; else 0.",
		"broker")
	m.quorumRisk = gaugeVec("quorum_queue_risk",
		"1 while the last declaration of a producer's quorum queue found it can lose order (risk=delivery_limit: it dead-letters a message redelivered too often, behind the ones after it) or messages (risk=at_most_once: at-most-once dead-lettering); else 0.",
		"broker", "queue", "risk")
	return []prometheus.Collector{m.reconnects, m.dialFailures, m.connsLost, m.blocked, m.quorumRisk}
}

// workerCollectors builds the collectors of this worker's lease and its HealthChecks pings. Each is also set in m.
func (m *Metrics) workerCollectors() []prometheus.Collector {
	m.pingFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "healthchecks_ping_failures_total",
		Help: "HealthChecks pings that could not be delivered (the check then reports late, not failed).",
	})
	m.leaseLost = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "worker_lease_lost_total",
		Help: "Times this worker could not renew its lease in time (Postgres or Temporal out of reach) and stopped its windows.",
	})
	m.leaseReaped = counterVec("worker_lease_reaped_total",
		"Activity attempts this worker failed so that Temporal retried them at once, by activity: those of a worker whose lease expired, and its own strays (started on it as Temporal shows, never received).",
		"activity")
	return []prometheus.Collector{m.pingFailures, m.leaseLost, m.leaseReaped}
}

// LeaseLost counts a lease this worker gave up because it could not renew it in time.
func (m *Metrics) LeaseLost() {
	if m == nil {
		return
	}
	m.leaseLost.Inc()
}

// LeaseReaped counts an attempt failed so that Temporal retries it: a dead worker's, or a
// stray of this worker's (see liveness.Running).
func (m *Metrics) LeaseReaped(activity string) {
	if m == nil {
		return
	}
	m.leaseReaped.WithLabelValues(activity).Inc()
}

// StartAtZero creates, at 0, every series whose label values are known at start: per
// queue its routes and window ends, per broker its connection counters and drain check
// results, per queue and broker the Leftover Drain's. A series born at its first event has
// no earlier sample, so increase() and rate() would miss that event and an alert on it
// would never fire after a restart. brokerswitch_events_total is left out: its event label
// is whatever GitHub sends, so the alerts count brokerswitch_routed_messages_total instead.
func (m *Metrics) StartAtZero(queues []string, brokers int) {
	if m == nil {
		return
	}
	for _, a := range []string{"PrepareWindow", "Consume", "WaitForChange"} {
		m.leaseReaped.WithLabelValues(a)
	}
	for _, q := range queues {
		for _, r := range []string{RouteRetry, RouteError} {
			m.routed.WithLabelValues(q, r)
		}
		for _, e := range []string{WindowElapsed, WindowCancelled, WindowFailed} {
			m.windows.WithLabelValues(q, e)
		}
		m.idReused.WithLabelValues(q)
		m.unreadable.WithLabelValues(q, UnreadableMoved)
		m.unreadable.WithLabelValues(q, UnreadableNotFound)
		m.oversize.WithLabelValues(q, OversizeMoved)
		m.oversize.WithLabelValues(q, OversizeNotMoved)
	}
	for _, f := range []string{"false", "true"} {
		m.switches.WithLabelValues(f)
	}
	for _, t := range clockTables() {
		m.clockFallback.WithLabelValues(t, ClockMissing)
		m.clockFallback.WithLabelValues(t, ClockUnparseable)
		m.clockFallback.WithLabelValues(t, ClockFuture)
	}
	for b := range brokers {
		idx := strconv.Itoa(b)
		m.reconnects.WithLabelValues(idx)
		m.dialFailures.WithLabelValues(idx)
		m.connsLost.WithLabelValues(idx)
		m.blocked.WithLabelValues(idx).Set(0)
		for _, r := range []string{DrainDrained, DrainNotDrained, DrainUnreachable} {
			m.drainChecks.WithLabelValues(idx, r)
		}
		for _, q := range queues {
			m.leftover.WithLabelValues(q, idx)
			m.leftoverDown.WithLabelValues(q, idx)
			m.leftoverFail.WithLabelValues(q, idx)
			m.unannHeld.WithLabelValues(q, idx)
			m.unannRead.WithLabelValues(q, idx)
		}
	}
}

// Handler serves the registry in the Prometheus text format; a nil *Metrics serves an
// empty page.
func (m *Metrics) Handler() http.Handler {
	g := prometheus.Gatherer(prometheus.NewRegistry())
	if m != nil {
		g = m.gatherer
	}
	// Prometheus scrapes a target one at a time; a burst beyond this is answered 503 at
	// once instead of queueing on the process.
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{MaxRequestsInFlight: maxScrapesInFlight})
}

// maxScrapesInFlight bounds the /metrics requests served at once.
const maxScrapesInFlight = 8

// Event counts one delivery's outcome. event should come from a bounded set: the caller
// maps unknown event types to "other".
func (m *Metrics) Event(queue, event, outcome string) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(queue, event, outcome).Inc()
}

// Routed counts a message sent to {q}-retry or {q}-error once the broker took it.
func (m *Metrics) Routed(queue, route string) {
	if m == nil {
		return
	}
	m.routed.WithLabelValues(queue, route).Inc()
}

// LeftoverDrained counts the messages one Leftover Drain took from broker.
func (m *Metrics) LeftoverDrained(queue string, broker, n int) {
	if m == nil {
		return
	}
	m.leftover.WithLabelValues(queue, strconv.Itoa(broker)).Add(float64(n))
}

// LeftoverUnreachable counts a Leftover Drain visit that skipped an unreachable broker.
func (m *Metrics) LeftoverUnreachable(queue string, broker int) {
	if m == nil {
		return
	}
	m.leftoverDown.WithLabelValues(queue, strconv.Itoa(broker)).Inc()
}

// LeftoverFailed counts a Leftover Drain visit that failed on a broker it could reach.
func (m *Metrics) LeftoverFailed(queue string, broker int) {
	if m == nil {
		return
	}
	m.leftoverFail.WithLabelValues(queue, strconv.Itoa(broker)).Inc()
}

// UnannouncedHeld counts a Leftover Drain visit that left messages the producer never
// announced on broker for its notification.
func (m *Metrics) UnannouncedHeld(queue string, broker int) {
	if m == nil {
		return
	}
	m.unannHeld.WithLabelValues(queue, strconv.Itoa(broker)).Inc()
}

// UnannouncedRead counts the messages taken from broker after the grace for its
// notification passed.
func (m *Metrics) UnannouncedRead(queue string, broker, n int) {
	if m == nil {
		return
	}
	m.unannRead.WithLabelValues(queue, strconv.Itoa(broker)).Add(float64(n))
}

// DrainCheck counts one drain check of broker with its result (DrainDrained, ...).
func (m *Metrics) DrainCheck(broker int, result string) {
	if m == nil {
		return
	}
	m.drainChecks.WithLabelValues(strconv.Itoa(broker), result).Inc()
}

// SwitchCommitted counts a committed hop and observes its lags: commitLag from the drain
// check that found the old broker empty, pendingFor from the Pending Switch's recording.
// A negative duration (unknown) is not observed.
func (m *Metrics) SwitchCommitted(commitLag, pendingFor time.Duration) {
	if m == nil {
		return
	}
	m.switches.WithLabelValues("false").Inc()
	if commitLag >= 0 {
		m.commitLag.Observe(commitLag.Seconds())
	}
	if pendingFor >= 0 {
		m.pendingFor.Observe(pendingFor.Seconds())
	}
}

// SwitchForced counts an operator's forced switch.
func (m *Metrics) SwitchForced() {
	if m == nil {
		return
	}
	m.switches.WithLabelValues("true").Inc()
}

// Window observes one consumer window's length and how it ended (WindowElapsed, ...).
func (m *Metrics) Window(queue, end string, d time.Duration) {
	if m == nil {
		return
	}
	m.windows.WithLabelValues(queue, end).Observe(d.Seconds())
}

// Reconnected counts a connection opened to broker after an earlier one.
func (m *Metrics) Reconnected(broker int) {
	if m == nil {
		return
	}
	m.reconnects.WithLabelValues(strconv.Itoa(broker)).Inc()
}

// DialFailed counts a failed attempt to connect to broker.
func (m *Metrics) DialFailed(broker int) {
	if m == nil {
		return
	}
	m.dialFailures.WithLabelValues(strconv.Itoa(broker)).Inc()
}

// ConnectionLost counts a connection to broker that was closed under us.
func (m *Metrics) ConnectionLost(broker int) {
	if m == nil {
		return
	}
	m.connsLost.WithLabelValues(strconv.Itoa(broker)).Inc()
}

// Blocked records whether broker has blocked our connection (connection.blocked) or
// unblocked it again.
func (m *Metrics) Blocked(broker int, blocked bool) {
	if m == nil {
		return
	}
	v := 0.0
	if blocked {
		v = 1
	}
	m.blocked.WithLabelValues(strconv.Itoa(broker)).Set(v)
}

// DeliveryIDReused counts a delivery of queue whose id the ledger holds with a different
// payload: a producer that reuses ids, or a forged delivery.
func (m *Metrics) DeliveryIDReused(queue string) {
	if m == nil {
		return
	}
	m.idReused.WithLabelValues(queue).Inc()
}

// ClockFallback counts an applied event for table whose entity clock could not be used
// (reason ClockMissing, ClockUnparseable or ClockFuture), so its row followed queue order.
func (m *Metrics) ClockFallback(table, reason string) {
	if m == nil {
		return
	}
	m.clockFallback.WithLabelValues(table, reason).Inc()
}

// Unreadable counts a consumer connection of queue cut by a message whose headers the AMQP
// client refuses, and what became of the message (UnreadableMoved or UnreadableNotFound).
func (m *Metrics) Unreadable(queue, outcome string) {
	if m == nil {
		return
	}
	m.unreadable.WithLabelValues(queue, outcome).Inc()
}

// Oversize counts a message of queue whose body is larger than MAX_MESSAGE_BYTES, and
// what became of it (OversizeMoved or OversizeNotMoved).
func (m *Metrics) Oversize(queue, outcome string) {
	if m == nil {
		return
	}
	m.oversize.WithLabelValues(queue, outcome).Inc()
}

// PingFailed counts a HealthChecks ping that could not be delivered.
func (m *Metrics) PingFailed() {
	if m == nil {
		return
	}
	m.pingFailures.Inc()
}

// QuorumQueueRisk records whether the last declaration of queue on broker found a
// producer's quorum queue that can lose order or messages for risk (broker.RiskDeliveryLimit,
// broker.RiskAtMostOnce).
func (m *Metrics) QuorumQueueRisk(broker int, queue, risk string, risky bool) {
	if m == nil {
		return
	}
	v := 0.0
	if risky {
		v = 1
	}
	m.quorumRisk.WithLabelValues(strconv.Itoa(broker), queue, risk).Set(v)
}

// DeliveryLimited counts a delivery of queue that its quorum queue had dead-lettered for
// its delivery limit.
func (m *Metrics) DeliveryLimited(queue string) {
	if m == nil {
		return
	}
	m.delivLimited.WithLabelValues(queue).Inc()
}
