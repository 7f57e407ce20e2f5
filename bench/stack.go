package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// stack is one deployment, built by stacktest as e2e builds its own, with what the
// figures count on it: the in-process worker's Temporal RPCs, the AMQP frames through each
// broker's proxy, the batches it consumed.
type stack struct {
	*stacktest.Stack
	s   *figure
	ns  string
	rpc *rpcCounter
	// frames count each broker's proxied traffic; empty when not counted.
	frames []*frameCounts
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
	ns, _ := s.temporal.Namespace(s)
	tc, rpc := s.countingClient(ns)
	st.ns, st.rpc = ns, rpc
	opts := stacktest.Options{
		Brokers: brokers, Env: o.env, Direct: true, ServicePool: true, Trace: st.batches.add,
		Temporal:   &stacktest.Target{Address: s.temporal.Address(), Namespace: ns, Client: tc},
		Copies:     map[int]testenv.Copy{},
		OwnProcess: s.cpu.ownProcess,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	for i := range brokers {
		switch {
		case o.count:
			fc := &frameCounts{}
			st.frames = append(st.frames, fc)
			opts.Copies[i] = fc.copy
		case o.rtt > 0:
			opts.Copies[i] = newDelay(o.rtt).copy
		}
	}
	if o.rtt > 0 {
		d := newDelay(o.rtt)
		opts.PGCopy, opts.PGTracer, st.pgCounted = d.copy, newPGTracer(d.turnsOf), true
	}
	st.Stack = stacktest.New(s, opts)
	s.cpu.ownDatabase(st.DSN)
	// Runs before the namespace's client closes: cleanups run last first.
	s.Cleanup(st.terminateWorkflows)
	return st
}

// producer publishes to the stack's brokers without proxy, starting on broker 0.
func (st *stack) producer() *simulate.Producer {
	return st.s.newProducer(st.Topology(), st.DirectURLs...)
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
	for _, q := range st.Config.Queues {
		ids = append(ids, workflows.QueueWindowWorkflowID(q))
	}
	for _, id := range ids {
		_ = st.Temporal.TerminateWorkflow(context.Background(), id, "", "benchmark done")
	}
}

// startWorkerProcess runs the built binary with the stack's configuration as its
// environment, its memory sampled, and counts its CPU as the service's.
func (st *stack) startWorkerProcess() *testenv.Process {
	logPath := filepath.Join(st.s.logDir, fmt.Sprintf("worker-%s-%d.log", st.ns, st.processes.Add(1)))
	return st.StartWorkerProcess(st.s.workerBinary(), logPath, nil)
}

// applied counts the ledger rows of deliveries applied or ignored.
func (st *stack) applied(ctx context.Context) (int64, error) {
	var n int64
	err := st.DB.WithContext(ctx).Raw("SELECT count(*) FROM github_deliveries WHERE outcome <> 'error'").Scan(&n).Error
	return n, err
}

func (st *stack) errors(ctx context.Context) int64 {
	var n int64
	_ = st.DB.WithContext(ctx).Raw("SELECT count(*) FROM github_deliveries WHERE outcome = 'error'").Scan(&n).Error
	return n
}

// waitApplied waits until n deliveries are applied.
func (st *stack) waitApplied(ctx context.Context, n int64, within time.Duration) error {
	return testenv.WaitUntil(ctx, within, fmt.Sprintf("%d deliveries applied", n), func() (bool, error) {
		got, err := st.applied(ctx)
		return got >= n, err
	})
}

// switched tells whether broker index is active with nothing pending.
func (st *stack) switched(ctx context.Context, index int) (bool, error) {
	s, err := st.Store.Load(ctx)
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
	if err := st.DB.WithContext(ctx).Raw("SELECT delivery_id, applied_at FROM github_deliveries").Scan(&rows).Error; err != nil {
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
	err = st.DB.WithContext(ctx).Raw("SELECT min(applied_at) AS first, max(applied_at) AS last FROM github_deliveries").Scan(&span).Error
	if err == nil && (span.First == nil || span.Last == nil) {
		err = errors.New("ledger is empty")
	}
	if err != nil {
		return first, last, err
	}
	return *span.First, *span.Last, nil
}
