//go:build integration

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/api"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
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
	code := 1
	err := testenv.WithTemporal(func(srv *testenv.Temporal) error {
		temporalServer = srv
		workerBinaryErr = <-built
		code = testenv.Run(m)
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if workerBinaryDir != "" {
		_ = os.RemoveAll(workerBinaryDir)
	}
	printSummaries(os.Stdout)
	testenv.Exit(code)
}

// stack is one deployment under test (stacktest's) with the test that owns it.
type stack struct {
	*stacktest.Stack
	t *testing.T
}

// testDefaults are the configuration of every stack unless its test says otherwise:
// windows, retries and drain checks short enough for a test to watch them.
var testDefaults = map[string]string{
	"CONSUMER_WINDOW":      "1m",
	"RETRY_TTL":            "1s",
	"MAX_RETRY_CYCLES":     "3",
	"DRAIN_CHECK_INTERVAL": "250ms",
}

// newStack builds a deployment with n brokers; env overrides configuration variables.
func newStack(t *testing.T, n int, env map[string]string) *stack {
	t.Helper()
	return newStackWith(t, stacktest.Options{Brokers: n, Env: env})
}

// newStackWith builds a deployment as opts say, on the tests' dev server and defaults,
// its ledger audited, its histories replayed once its workers stopped.
func newStackWith(t *testing.T, opts stacktest.Options) *stack {
	t.Helper()
	env := maps.Clone(testDefaults)
	maps.Copy(env, opts.Env)
	opts.Env, opts.Server = env, temporalServer
	// A forced switch answers once committed; a loaded machine may take longer than the
	// default allows, and the scenarios test the commit, not its speed.
	opts.CommitWait = patience * api.DefaultCommitWait
	s := &stack{Stack: stacktest.New(t, opts), t: t}
	installAudit(t, s.DB)
	t.Cleanup(s.replayHistories) // runs after the workers stop: cleanups run last-in first-out
	return s
}

// declareProducersQuorumQueues declares cfg's queues on broker index as a producer
// would that follows the least topology for quorum queues in docs/design.md ("The
// topology, for producers"): no single active consumer, which only brokerswitch adds.
func declareProducersQuorumQueues(t testenv.T, pool *broker.Pool, index int, cfg config.Config) {
	t.Helper()
	ch, err := pool.Channel(context.Background(), index)
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	defer ch.Close()
	for _, q := range cfg.Queues {
		for name, args := range map[string]amqp.Table{
			q:                    {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": broker.RetryQueue(q)},
			broker.RetryQueue(q): {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q, "x-message-ttl": cfg.RetryTTL.Milliseconds()},
			broker.ErrorQueue(q): {},
		} {
			args["x-queue-type"] = "quorum"
			if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
				t.Fatalf("declare %s: %v", name, err)
			}
		}
	}
}

// workerBackends counts the Postgres backends serving the workers through PGProxy.
func (s *stack) workerBackends() int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.DB.Raw("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = ?",
		stacktest.WorkerAppName).Scan(&n).Error)
	return n
}

// deliveries counts the ledger rows.
func (s *stack) deliveries() int64 {
	var n int64
	require.NoError(s.t, s.DB.Model(&models.Delivery{}).Count(&n).Error)
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
	err := testenv.WaitUntil(context.Background(), within*patience, what, func() (bool, error) {
		ok, last := cond()
		if last != "" {
			return ok, errors.New(last)
		}
		return ok, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// holdLedger locks the ledger until release: every batch then waits in hand, unsettled,
// as it does behind a slow or locked database.
func (s *stack) holdLedger() (release func()) {
	s.t.Helper()
	tx := s.DB.Begin()
	require.NoError(s.t, tx.Error)
	require.NoError(s.t, tx.Exec("LOCK TABLE github_deliveries IN ACCESS EXCLUSIVE MODE").Error)
	return func() { require.NoError(s.t, tx.Commit().Error) }
}

// ledgerWaitedOn tells whether a transaction waits for the ledger held by holdLedger.
func (s *stack) ledgerWaitedOn() bool {
	var n int64
	err := s.DB.Raw("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'github_deliveries'::regclass").Scan(&n).Error
	return err == nil && n > 0
}

// requireBrokerOrder checks, queue by queue, that every delivery consumed from broker
// before was applied no later than the first one consumed from broker after.
func (s *stack) requireBrokerOrder(before, after int) {
	s.t.Helper()
	for _, q := range s.Config.Queues {
		var span struct{ BeforeLast, AfterFirst *time.Time }
		require.NoError(s.t, s.DB.Model(&models.Delivery{}).Select(
			"max(applied_at) FILTER (WHERE broker_index = ?) AS before_last, min(applied_at) FILTER (WHERE broker_index = ?) AS after_first",
			before, after).Where("queue = ? AND outcome = 'applied'", q).Scan(&span).Error)
		if span.BeforeLast == nil || span.AfterFirst == nil || !span.AfterFirst.Before(*span.BeforeLast) {
			continue
		}
		// Out of order: show the queue's ledger in applied order, then fail.
		var rows []models.Delivery
		s.DB.Where("queue = ?", q).Order("applied_at").Find(&rows)
		for _, r := range rows {
			s.t.Logf("%s applied %s from broker %d: %s %s", q, r.AppliedAt.Format("15:04:05.000000"), r.BrokerIndex, r.Event, r.Action)
		}
		s.t.Fatalf("queue %s: an event from broker %d was applied at %s, before the last from broker %d at %s",
			q, after, span.AfterFirst, before, span.BeforeLast)
	}
}
