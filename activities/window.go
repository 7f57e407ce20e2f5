// Package activities holds the side effects the workflows drive: reading brokers,
// applying events to Postgres, and changing the broker state.
package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/healthchecks"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/models"
)

// consumerPool is what the window activities need from the brokers.
type consumerPool interface {
	Endpoints() []broker.Endpoint
	DeclareTopology(ctx context.Context, index int, t broker.Topology) error
	Consume(ctx context.Context, index int, queue string, opts broker.ConsumeOptions, h broker.BatchHandler) error
	Drain(ctx context.Context, index int, queue string, max, batch int, h broker.BatchHandler) (int, error)
}

// handlers gives the batch handler that applies a broker's deliveries.
type handlers interface {
	ForBroker(index int) broker.BatchHandler
}

// stateLoader reads the broker state.
type stateLoader interface {
	Load(ctx context.Context) (models.BrokerState, error)
}

// Window holds the activities of a queue's consumer window.
type Window struct {
	Pool consumerPool
	// WindowLength and LeftoverDrainCap come from the worker's configuration, so that a
	// change takes effect at the next window.
	WindowLength     time.Duration
	LeftoverDrainCap int
	Handlers         handlers
	State            stateLoader
	Topology         broker.Topology
	Prefetch         int
	Heartbeat        time.Duration
	Logger           *slog.Logger
	// Metrics counts Leftover Drain messages and window lengths; nil counts nothing.
	Metrics *metrics.Metrics
	// Pings reports each consumer window to HealthChecks; nil pings nothing.
	Pings *healthchecks.Pinger
}

// WindowPlan says which broker a window reads and which others its Leftover Drain visits.
type WindowPlan struct {
	ActiveIndex      int
	ActiveName       string
	Window           time.Duration
	LeftoverDrainCap int
	// Leftover are the other brokers, less those on a pending route: the producer is
	// filling those and they must not be read early.
	Leftover []int
}

// PlanWindow resolves the active broker from Postgres for one window.
func (a *Window) PlanWindow(ctx context.Context) (WindowPlan, error) {
	st, err := a.State.Load(ctx)
	if err != nil {
		return WindowPlan{}, fmt.Errorf("plan window: %w", err)
	}
	onRoute := map[int]bool{}
	if st.Pending != nil {
		for _, h := range st.Pending.Route {
			onRoute[h.Index] = true
		}
	}
	plan := WindowPlan{
		ActiveIndex:      st.ActiveIndex,
		ActiveName:       a.endpoint(st.ActiveIndex),
		Window:           a.WindowLength,
		LeftoverDrainCap: a.LeftoverDrainCap,
	}
	for _, ep := range a.Pool.Endpoints() {
		if ep.Index != st.ActiveIndex && !onRoute[ep.Index] {
			plan.Leftover = append(plan.Leftover, ep.Index)
		}
	}
	return plan, nil
}

// LeftoverDrainInput names the queue, the brokers to visit and the cap for this cycle.
type LeftoverDrainInput struct {
	Queue   string
	Brokers []int
	Cap     int
}

// LeftoverDrainResult says how many messages each broker gave and which could not be reached.
type LeftoverDrainResult struct {
	Taken       map[int]int
	Unreachable []int
}

// LeftoverDrain takes what waits on the queue on the other brokers, with basic.get, and
// applies it before the window starts: those messages are older than anything on the
// active broker. A broker that cannot be reached is a warning, never a failed window.
func (a *Window) LeftoverDrain(ctx context.Context, in LeftoverDrainInput) (LeftoverDrainResult, error) {
	stopHeartbeat := heartbeatUntilDone(ctx, a.Heartbeat)
	defer stopHeartbeat()
	res := LeftoverDrainResult{Taken: map[int]int{}}
	budget := in.Cap
	for _, idx := range in.Brokers {
		if budget <= 0 {
			break
		}
		// The plan may be older than a notification or a switch recorded since: a broker
		// now on a pending route is being filled by the producer, and one that became
		// active is read after the broker it replaced; neither may be read early.
		if skip, err := a.noLongerLeftover(ctx, idx); err != nil {
			return res, fmt.Errorf("leftover drain %s: %w", in.Queue, err)
		} else if skip {
			continue
		}
		n, err := a.Pool.Drain(ctx, idx, in.Queue, budget, a.Prefetch, a.Handlers.ForBroker(idx))
		res.Taken[idx] = n
		budget -= n
		a.Metrics.LeftoverDrained(in.Queue, idx, n)
		switch {
		case err == nil:
		case isBrokerUnreachable(err):
			// A spare that is down is a warning: never a failed window, nor a failed ping.
			a.Logger.WarnContext(ctx, "leftover drain: broker unreachable, skipped",
				"queue", in.Queue, "broker", a.endpoint(idx), "error", err)
			a.Metrics.LeftoverUnreachable(in.Queue, idx)
			res.Unreachable = append(res.Unreachable, idx)
		default:
			err = fmt.Errorf("leftover drain %s on %s: %w", in.Queue, a.endpoint(idx), err)
			if ctx.Err() == nil {
				a.Pings.Fail(ctx, err.Error())
			}
			return res, err
		}
	}
	return res, nil
}

// noLongerLeftover tells whether broker index is, as Postgres has it now, the active
// broker or on the route of the Pending Switch.
func (a *Window) noLongerLeftover(ctx context.Context, index int) (bool, error) {
	if a.State == nil {
		return false, nil
	}
	st, err := a.State.Load(ctx)
	if err != nil {
		return false, err
	}
	if st.ActiveIndex == index {
		return true, nil
	}
	if st.Pending != nil {
		for _, h := range st.Pending.Route {
			if h.Index == index {
				return true, nil
			}
		}
	}
	return false, nil
}

// ConsumeInput is one consumer window on one broker.
type ConsumeInput struct {
	Queue       string
	BrokerIndex int
	Window      time.Duration
}

// Consume reads the queue on the active broker for one window. It ends early, with the
// batch in hand settled, when the workflow cancels it (a switch was committed) or the
// worker stops.
func (a *Window) Consume(ctx context.Context, in ConsumeInput) (err error) {
	start := time.Now()
	ping := a.Pings.Start(ctx)
	defer func() {
		end := metrics.WindowElapsed
		switch {
		case err != nil && ctx.Err() == nil:
			end = metrics.WindowFailed
			ping.Fail(ctx, err.Error())
		case ctx.Err() != nil:
			end = metrics.WindowCancelled
			ping.Success(ctx)
		default:
			ping.Success(ctx)
		}
		a.Metrics.Window(in.Queue, end, time.Since(start))
	}()
	if err := a.Pool.DeclareTopology(ctx, in.BrokerIndex, a.Topology); err != nil {
		return fmt.Errorf("consume %s: %w", in.Queue, err)
	}
	windowCtx, cancel := context.WithTimeout(ctx, in.Window)
	defer cancel()
	stopHeartbeat := heartbeatUntilDone(windowCtx, a.Heartbeat)
	defer stopHeartbeat()

	opts := broker.ConsumeOptions{Prefetch: a.Prefetch, ConsumerTag: consumerTag(ctx)}
	if err := a.Pool.Consume(windowCtx, in.BrokerIndex, in.Queue, opts, a.Handlers.ForBroker(in.BrokerIndex)); err != nil {
		return fmt.Errorf("consume %s on %s: %w", in.Queue, a.endpoint(in.BrokerIndex), err)
	}
	// A cancelled activity reports cancellation; a window that ran its length is a success.
	return ctx.Err()
}

func (a *Window) endpoint(index int) string {
	for _, ep := range a.Pool.Endpoints() {
		if ep.Index == index {
			return ep.String()
		}
	}
	return fmt.Sprintf("#%d", index)
}

// consumerTag names the consumer after the activity so that the RabbitMQ management
// page says which workflow run holds a queue.
func consumerTag(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return fmt.Sprintf("%s/%s/%d", info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.Attempt)
}

// heartbeatUntilDone heartbeats in the background: Temporal delivers a cancellation only
// in a heartbeat's answer, so a window must heartbeat often to stop promptly.
func heartbeatUntilDone(ctx context.Context, every time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// isBrokerUnreachable tells a broker that cannot be reached from a failure worth retrying.
func isBrokerUnreachable(err error) bool {
	return errors.Is(err, broker.ErrUnreachable)
}
