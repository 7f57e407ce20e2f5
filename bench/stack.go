package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// stack is one deployment, built by stacktest as e2e builds its own, with what the
// figures count on it: the AMQP frames through its brokers' proxies and the batches it
// consumed.
type stack struct {
	*stacktest.Stack
	s *figure
	// traffic counts the frames through every broker's proxy; zero when not counted.
	traffic testenv.FrameCounts
	// processes numbers the worker processes started, for their log files.
	processes atomic.Int32
	// batches are the traces of the in-process worker's consumed batches; pgCounted says
	// whether their Postgres round trips were counted (an injected RTT).
	batches   batchLog
	pgCounted bool
}

// stackOptions shape a stack: counting proxies in front of the brokers, or an injected
// round trip time to the brokers and Postgres; configuration variables.
type stackOptions struct {
	count bool
	rtt   time.Duration
	env   map[string]string
}

func (s *figure) newStack(brokers int, o stackOptions) *stack {
	st := &stack{s: s}
	opts := stacktest.Options{
		Brokers: brokers, Env: o.env, Direct: true, ServicePool: true, Trace: st.batches.add, Server: s.temporal,
		Copies: map[int]testenv.Copy{},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	for i := range brokers {
		switch {
		case o.count:
			opts.Copies[i] = st.traffic.Copy
		case o.rtt > 0:
			opts.Copies[i] = testenv.NewDelay(o.rtt).Copy
		}
	}
	if o.rtt > 0 {
		d := testenv.NewDelay(o.rtt)
		opts.PGCopy, opts.PGTracer, st.pgCounted = d.Copy, &pgTracer{turnsOf: d.TurnsOf, open: map[*pgx.Conn]pgSpan{}}, true
	}
	st.Stack = stacktest.New(s, opts)
	// Runs before the namespace's client closes: cleanups run last first.
	s.Cleanup(st.terminateWorkflows)
	return st
}

// producer publishes to the stack's brokers without proxy, starting on broker 0.
func (st *stack) producer() *simulate.Producer { return st.s.newProducer(st.ProducerConfig()) }

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
	for _, q := range st.Config.Queues {
		ids = append(ids, workflows.QueueWindowWorkflowID(q))
	}
	for _, id := range ids {
		_ = st.Temporal.TerminateWorkflow(context.Background(), id, "", "benchmark done")
	}
}

// startWorkerProcess runs the built binary with the stack's configuration, and env over
// it, as its environment, its memory sampled, its log in the run's log folder.
func (st *stack) startWorkerProcess(env map[string]string) *testenv.Process {
	logPath := filepath.Join(st.s.logDir, fmt.Sprintf("worker-%s-%d.log", st.Config.TemporalNamespace, st.processes.Add(1)))
	return st.StartWorkerProcess(st.s.workerBinary(), logPath, env)
}

// waitApplied waits until n deliveries are applied.
func (st *stack) waitApplied(n int64, within time.Duration) error {
	return testenv.WaitUntil(context.Background(), within, fmt.Sprintf("%d deliveries applied", n), func() (bool, error) {
		return st.Applied() >= n, nil
	})
}

// appliedTimes loads every ledger row's applied_at by delivery id.
func (st *stack) appliedTimes() map[string]time.Time {
	var rows []struct {
		DeliveryID string
		AppliedAt  *time.Time
	}
	st.s.check(st.DB.Raw("SELECT delivery_id, applied_at FROM github_deliveries").Scan(&rows).Error, "ledger")
	out := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		if r.AppliedAt != nil {
			out[r.DeliveryID] = *r.AppliedAt
		}
	}
	return out
}
