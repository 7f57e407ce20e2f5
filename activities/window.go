// Package activities holds the side effects the workflows drive: reading brokers,
// applying events to Postgres, and changing the broker state.
package activities

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/models"
)

// consumerPool is what the window activities need from the brokers.
type consumerPool interface {
	Endpoints() []broker.Endpoint
	DeclareTopology(ctx context.Context, index int, t broker.Topology) error
	Consume(ctx context.Context, index int, queue string, opts broker.ConsumeOptions, h broker.BatchHandler) error
	DrainWith(ctx context.Context, index int, queue string, opts broker.DrainOptions, h broker.BatchHandler) (broker.DrainResult, error)
	ReadyCounts(ctx context.Context, index int, queues []string) (map[string]int, error)
	QueueCounts(ctx context.Context, index int, queues []string) (map[string]broker.QueueCount, error)
	// NegotiatedHeartbeat is the AMQP heartbeat timeout of the connections to broker index.
	NegotiatedHeartbeat(index int) time.Duration
}

// handlers gives the batch handler that applies a broker's deliveries (ingest.Ingester).
// Each batch's transaction ends with checks: a refusal gives it back unsettled.
type handlers interface {
	// ForBroker applies a spare's deliveries, for a Leftover Drain.
	ForBroker(index int, checks ...models.Check) broker.BatchHandler
	// ForActive applies the active broker's deliveries, each batch only while index is
	// still active: otherwise it fails with brokerstate.ErrNotActive, nothing settled.
	ForActive(index int, checks ...models.Check) broker.BatchHandler
}

// stateLoader reads the broker state.
type stateLoader interface {
	Load(ctx context.Context) (brokerstate.State, error)
	// SpareCheck is the check that a Leftover Drain batch of broker index runs in its
	// transaction: it fails, wrapping brokerstate.ErrNotSpare, once index is active or on
	// the Pending Switch's route.
	SpareCheck(index int) models.Check
}

// spareMarks keeps what the Leftover Drain learned of each spare (brokerstate.Store).
type spareMarks interface {
	SpareMarks(ctx context.Context, queue string) (marks, reached map[int]brokerstate.SpareMark, err error)
	MarkSpare(ctx context.Context, index int, queue string, m brokerstate.SpareMark) error
	// HoldSpare writes m's held-since date alone, unless the mark has one (see
	// brokerstate.Store.HoldSpare), and returns the date it has.
	HoldSpare(ctx context.Context, index int, queue string, read time.Time, m brokerstate.SpareMark) (time.Time, error)
	// Now is Postgres' clock, the one marks and the producer's trail are dated by.
	Now(ctx context.Context) (time.Time, error)
}

// stateWatcher hands out the process's latest reading of the broker state as it changes
// (brokerstate.StateWatcher), so that a window learns of a committed switch from Postgres, not
// from a Temporal round trip.
type stateWatcher interface {
	Next(ctx context.Context, after uint64) (brokerstate.State, uint64, bool)
}

// attemptHolder registers an activity attempt under the worker's lease (liveness.Keeper):
// the held context ends when the attempt must stop.
type attemptHolder interface {
	Hold(ctx context.Context, what liveness.What) (context.Context, *liveness.Held, error)
}

// Window holds the two activities of a queue's consumer window, both fenced (liveness.Keeper.Hold):
// PrepareWindow plans it and runs its Leftover Drain on the spares (prepare.go,
// leftover.go), then Consume reads the active broker (consume.go).
type Window struct {
	Pool consumerPool
	// WindowLength and LeftoverDrainCap come from the worker's configuration, so that a
	// change takes effect at the next window.
	WindowLength     time.Duration
	LeftoverDrainCap int
	Handlers         handlers
	State            stateLoader
	// Marks keeps what the Leftover Drain saw on each spare.
	Marks   spareMarks
	Watcher stateWatcher
	// UnnotifiedGrace is how long messages the producer never announced wait for its
	// notification (UNNOTIFIED_BROKER_GRACE); 0 means none: they are read at once.
	UnnotifiedGrace time.Duration
	Topology        broker.Topology
	Prefetch        int
	// Leases registers each attempt under the worker's lease (liveness.Keeper): a worker that
	// dies has its attempts failed by a peer and retried at once, without heartbeats.
	Leases attemptHolder
	// SpareCheck is how often a consumer window counts the spares it watches
	// (SPARE_CHECK_INTERVAL); a window with spares to watch fails without it.
	SpareCheck time.Duration
	// StatementTimeout is DB_STATEMENT_TIMEOUT: with Prefetch it bounds how long the batch
	// in hand at a window's end may take to settle.
	StatementTimeout time.Duration
	Logger           *slog.Logger
	// Metrics counts Leftover Drain messages and window lengths; nil counts nothing.
	Metrics *metrics.Metrics
	// Pings reports each consumer window to HealthChecks; nil pings nothing.
	Pings *healthchecks.Pinger
}

// settle is the worst time the batch in hand takes to be applied: one message at a time,
// each up to the statement timeout, and a minute for the rest.
func (a *Window) settle() time.Duration {
	return time.Duration(max(a.Prefetch, 1))*a.StatementTimeout + time.Minute
}

// indexes are the brokers of eps, by index.
func indexes(eps []broker.Endpoint) []int {
	out := make([]int, 0, len(eps))
	for _, ep := range eps {
		out = append(out, ep.Index)
	}
	return out
}

// endpoint names broker index for logs and errors.
func (a *Window) endpoint(index int) string {
	for _, ep := range a.Pool.Endpoints() {
		if ep.Index == index {
			return ep.String()
		}
	}
	return fmt.Sprintf("#%d", index)
}
