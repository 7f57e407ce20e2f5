package workflows_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/worker"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// These tests drive the BrokerSwitch workflow's logic in Temporal's test environment with
// virtual time, under the worker's own options (worker.Options); the activities are
// replaced by an in-memory broker state built on the same pure rules (brokerstate.State)
// the real activities use.

type brokerSwitchSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env *testsuite.TestWorkflowEnvironment

	// mu guards what the mocked activities touch: the test environment runs them on
	// goroutines of their own.
	mu        sync.Mutex
	state     brokerstate.State
	backlog   map[int][]int // per broker: ready counts returned by successive drain checks
	reachable map[int]bool
	checks    []int // broker of each drain check, in order
	commits   []activities.CommitHopInput
	interval  time.Duration // the worker's DRAIN_CHECK_INTERVAL
	loads     int
	watches   int
	records   int // RecordNotification activities run
	// heldBy, when set, says which spares hold a drained broker's hop, from the state.
	heldBy func(brokerstate.State) []brokerstate.Held
	// changeSeenByWatch answers the nth watch of an idle workflow; nil answers "no change".
	changeSeenByWatch func(nth int) bool
	// test counts the tests run so far: each test's mocks serve only their own environment.
	test int
}

func TestBrokerSwitchWorkflow(t *testing.T) { suite.Run(t, new(brokerSwitchSuite)) }

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func (s *brokerSwitchSuite) SetupTest() {
	s.SetLogger(quietLogger())
	s.env = s.NewTestWorkflowEnvironment()
	s.env.SetWorkerOptions(worker.Options(config.Config{}))
	// The test environment does not wait for an activity still in flight when the workflow
	// ends: its mock may run during the next test. Under s.mu, and with each test's mocks
	// answering only their own environment, a mock of an earlier test changes nothing here.
	s.mu.Lock()
	s.test++
	test := s.test
	s.state = brokerstate.State{}
	s.backlog = map[int][]int{}
	s.reachable = map[int]bool{0: true, 1: true, 2: true}
	s.checks, s.commits, s.interval = nil, nil, 3*time.Second
	s.loads, s.watches, s.changeSeenByWatch, s.records, s.heldBy = 0, 0, nil, 0, nil
	s.mu.Unlock()
	fromEarlierTest := func() bool { return s.test != test } // called with s.mu held

	var a *activities.Switch
	s.env.RegisterActivity(a)
	s.env.OnActivity(a.LoadState, mock.Anything).Return(func(context.Context) (brokerstate.State, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if fromEarlierTest() {
			return brokerstate.State{}, nil
		}
		s.loads++
		return s.state, nil
	})
	// In virtual time a watch that blocks would stop the clock: this one answers "no
	// change" at once, and the workflow's fallback timer takes over.
	s.env.OnActivity(a.WaitForChange, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.WaitForChangeInput) (bool, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if fromEarlierTest() {
				return false, nil
			}
			s.watches++
			if s.changeSeenByWatch != nil {
				return s.changeSeenByWatch(s.watches), nil
			}
			return false, nil
		})
	s.env.OnActivity(a.Settings, mock.Anything).Return(func(context.Context) (activities.SwitchSettings, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return activities.SwitchSettings{DrainCheckInterval: s.interval}, nil
	})
	s.env.OnActivity(a.RecordNotification, mock.Anything, mock.Anything).Return(
		func(_ context.Context, n brokerstate.Notification) (activities.NotificationResult, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if fromEarlierTest() {
				return activities.NotificationResult{}, nil
			}
			s.records++
			if n.Host == "too-far-ahead" { // as the real activity refuses a switchedAt beyond the skew
				return activities.NotificationResult{}, temporal.NewNonRetryableApplicationError("switchedAt is ahead", "SwitchedAtAhead", nil)
			}
			next, outcome := s.state.ApplyNotification(n, t0)
			s.state = next
			return activities.NotificationResult{State: next, Outcome: outcome}, nil
		})
	s.env.OnActivity(a.DrainCheck, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.DrainCheckInput) (brokerstate.DrainCheck, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if fromEarlierTest() {
				return brokerstate.DrainCheck{}, nil
			}
			s.checks = append(s.checks, in.BrokerIndex)
			check := brokerstate.DrainCheck{BrokerIndex: in.BrokerIndex, Reachable: s.reachable[in.BrokerIndex], Counts: map[string]int{"issues": 0}}
			if q := s.backlog[in.BrokerIndex]; len(q) > 0 {
				check.Counts["issues"] = q[0]
				s.backlog[in.BrokerIndex] = q[1:]
			}
			if check.Drained() && s.heldBy != nil {
				check.HeldBy = s.heldBy(s.state)
			}
			return check, nil
		})
	s.env.OnActivity(a.CommitHop, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CommitHopInput) (brokerstate.State, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if fromEarlierTest() {
				return brokerstate.State{}, nil
			}
			s.commits = append(s.commits, in)
			s.state, _ = s.state.CompleteHop(in.From, in.Hop, in.Checks, t0)
			return s.state, nil
		})
	s.env.OnActivity(a.ForceSwitch, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ForceSwitchInput) (brokerstate.State, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if fromEarlierTest() {
				return brokerstate.State{}, nil
			}
			if in.Index > 2 {
				return brokerstate.State{}, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("force switch: broker %d is not configured (3 brokers)", in.Index), "UnknownBroker", nil)
			}
			s.state = s.state.Force(in.Index, in.AskedAt, t0)
			return s.state, nil
		})
	s.env.OnActivity(a.CancelPendingSwitch, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CancelPendingSwitchInput) (brokerstate.State, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if fromEarlierTest() {
				return brokerstate.State{}, nil
			}
			s.state = s.state.CancelPending(in.SwitchedAt, t0)
			return s.state, nil
		})
}

func (s *brokerSwitchSuite) notify(at time.Duration, index int, switchedAt time.Time) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.SignalPendingSwitch, brokerstate.Notification{Index: index, Host: "h", Vhost: "/", SwitchedAt: switchedAt})
	}, at)
}

// run executes the workflow until the callback at `end` cancels it, and returns its status then.
func (s *brokerSwitchSuite) run(end time.Duration) workflows.Status {
	return s.runWith(end, workflows.BrokerSwitchInput{})
}

// runUntil executes the workflow until done says so, checked every 30 s of virtual time
// with the activities' lock held, or until limit; it returns the status then. Virtual
// time jumps to the next timer whenever no activity runs, so a test that waits for an
// effect ends on the effect, not at a fixed time that a jump could reach first.
func (s *brokerSwitchSuite) runUntil(done func() bool, limit time.Duration) workflows.Status {
	var status workflows.Status
	start := s.env.Now()
	var check func()
	check = func() {
		s.mu.Lock()
		finished := done()
		s.mu.Unlock()
		if !finished && s.env.Now().Sub(start) < limit {
			s.env.RegisterDelayedCallback(check, 30*time.Second)
			return
		}
		v, err := s.env.QueryWorkflow(workflows.QueryStatus)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(&status))
		s.env.CancelWorkflow()
	}
	s.env.RegisterDelayedCallback(check, 30*time.Second)
	s.env.ExecuteWorkflow(workflows.BrokerSwitch, workflows.BrokerSwitchInput{})
	s.Require().True(s.env.IsWorkflowCompleted())
	s.mu.Lock()
	defer s.mu.Unlock()
	return status
}

// runWith is run with the given input.
func (s *brokerSwitchSuite) runWith(end time.Duration, in workflows.BrokerSwitchInput) workflows.Status {
	var status workflows.Status
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(workflows.QueryStatus)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(&status))
		s.env.CancelWorkflow()
	}, end)
	s.env.ExecuteWorkflow(workflows.BrokerSwitch, in)
	s.Require().True(s.env.IsWorkflowCompleted())
	s.mu.Lock() // pairs with the activities' unlocks, so the assertions read what they wrote
	defer s.mu.Unlock()
	return status
}

func (s *brokerSwitchSuite) TestWaitsForTheDrainThenCommits() {
	s.backlog[0] = []int{5, 2, 1} // three checks see messages, the fourth sees none
	s.notify(time.Second, 1, t0)
	status := s.run(time.Minute)

	s.Equal([]int{0, 0, 0, 0}, s.checks, "one check per interval until broker 0 is empty, none after")
	s.Require().Len(s.commits, 1)
	s.Equal(activities.CommitHopInput{From: 0, Hop: brokerstate.Hop{Index: 1, Host: "h", Vhost: "/", SwitchedAt: t0}, Checks: 4}, s.commits[0])
	s.Equal(1, status.State.ActiveIndex)
	s.Nil(status.State.Pending)
}

// A → B → C, and C's word comes first: A is drained, but B holds messages whose place
// nothing tells yet. The hop waits (and says why) until B's late word puts B first.
func (s *brokerSwitchSuite) TestASpareOfUnknownPlaceHoldsTheCommitUntilItsWordComes() {
	s.heldBy = func(st brokerstate.State) []brokerstate.Held {
		if st.ActiveIndex != 0 || st.Pending == nil || st.Pending.Next().Index == 1 {
			return nil
		}
		return []brokerstate.Held{{Broker: 1, Queue: "issues", Since: t0, Until: t0.Add(time.Hour)}}
	}
	s.notify(time.Second, 2, t0.Add(time.Minute))
	var waiting string
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(workflows.QueryStatus)
		s.Require().NoError(err)
		var status workflows.Status
		s.Require().NoError(v.Get(&status))
		waiting = status.Waiting
	}, 30*time.Second)
	s.notify(40*time.Second, 1, t0)
	status := s.run(2 * time.Minute)

	s.Contains(waiting, "Switch 0 → 2 waits: broker 0 is drained, but broker 1 holds messages on issues")
	s.Require().Len(s.commits, 2)
	s.Equal(1, s.commits[0].Hop.Index, "B first, once its word placed it")
	s.Equal(2, s.commits[1].Hop.Index)
	s.Equal(2, status.State.ActiveIndex)
}

func (s *brokerSwitchSuite) TestDoubleRotationIsFollowedHopByHop() {
	s.backlog[0] = []int{3, 3}
	s.backlog[1] = []int{7}
	s.notify(time.Second, 1, t0)
	s.notify(2*time.Second, 2, t0.Add(time.Minute))
	status := s.run(time.Minute)

	s.Require().Len(s.commits, 2)
	s.Equal(0, s.commits[0].From)
	s.Equal(1, s.commits[0].Hop.Index, "A to B first, once A is drained")
	s.Equal(1, s.commits[1].From)
	s.Equal(2, s.commits[1].Hop.Index, "then B to C, once B is drained")
	s.Equal(2, status.State.ActiveIndex)
	s.Equal([]int{0, 0, 0, 1, 1}, s.checks)
}

func (s *brokerSwitchSuite) TestALateNotificationIsPlacedByItsTime() {
	s.backlog[0] = busy(1000)
	s.notify(time.Second, 1, t0)
	s.notify(2*time.Second, 2, t0.Add(-time.Minute)) // the producer went to 2 before 1
	s.notify(3*time.Second, 2, t0.Add(-time.Minute)) // a duplicate
	status := s.run(time.Minute)

	s.Empty(s.commits)
	s.Require().NotNil(status.State.Pending)
	s.Equal([]brokerstate.Hop{
		{Index: 2, Host: "h", Vhost: "/", SwitchedAt: t0.Add(-time.Minute)},
		{Index: 1, Host: "h", Vhost: "/", SwitchedAt: t0},
	}, status.State.Pending.Route)
}

// A flood of notifications 1 ns apart costs a bounded number of activities, not one
// each, and the state the workflow ends on is the one the API recorded.
func (s *brokerSwitchSuite) TestANotificationFloodIsHeldToACap() {
	s.backlog[0] = busy(1000)
	const flood = 500
	s.env.RegisterDelayedCallback(func() {
		for i := range flood {
			n := brokerstate.Notification{Index: 1, Host: "h", Vhost: "/", SwitchedAt: t0.Add(time.Duration(i))}
			// As the API does: recorded in Postgres first, then signalled.
			s.mu.Lock()
			s.state, _ = s.state.ApplyNotification(n, t0)
			s.mu.Unlock()
			s.env.SignalWorkflow(workflows.SignalPendingSwitch, n)
		}
	}, time.Second)
	status := s.run(time.Minute)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.LessOrEqual(s.records, 2*workflows.MaxHeldNotifications, "RecordNotification activities for %d signals", flood)
	s.Require().NotNil(status.State.Pending)
	s.Equal(s.state.Pending, status.State.Pending, "the workflow holds the state the API recorded")
	s.Equal(t0.Add(flood-1), status.State.Pending.Target().SwitchedAt)
}

func (s *brokerSwitchSuite) TestForceSwitchMovesAtOnceAndDropsThePendingSwitch() {
	s.backlog[0] = busy(1000)
	s.notify(time.Second, 1, t0)
	checksBeforeForce := -1
	s.env.RegisterDelayedCallback(func() {
		s.mu.Lock()
		checksBeforeForce = len(s.checks)
		s.mu.Unlock()
		s.env.SignalWorkflow(workflows.SignalForceSwitch, map[string]int{"index": 2})
	}, 10*time.Second)
	status := s.run(time.Minute)

	s.Empty(s.commits)
	s.Equal(2, status.State.ActiveIndex)
	s.Nil(status.State.Pending)
	s.True(status.State.LastSwitch.Forced)
	s.Positive(checksBeforeForce)
	s.Len(s.checks, checksBeforeForce, "no drain check after the force: nothing is pending")
}

func (s *brokerSwitchSuite) TestCancelDropsThePendingSwitchWithoutMoving() {
	s.backlog[0] = busy(1000)
	s.notify(time.Second, 1, t0)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(workflows.SignalCancelPendingSwitch, nil) }, 7*time.Second)
	status := s.run(time.Minute)

	s.Empty(s.commits)
	s.Equal(0, status.State.ActiveIndex)
	s.Nil(status.State.Pending)
	s.Contains(status.Waiting, "Nothing pending")
}

func (s *brokerSwitchSuite) TestUnreachableActiveBrokerHoldsTheSwitch() {
	s.reachable[0] = false
	s.notify(time.Second, 1, t0)
	status := s.run(30 * time.Second)

	s.Empty(s.commits)
	s.GreaterOrEqual(len(s.checks), 5, "it keeps checking")
	s.Contains(status.Waiting, "unreachable")
	s.Require().NotNil(status.LastCheck)
	s.False(status.LastCheck.Reachable)
}

// TestASwitchWhoseSignalWasLostIsFoundThroughPostgres: the API recorded a notification
// but its signal never arrived. The watch hears Postgres announce it, and the switch
// follows well before the hourly fallback.
func (s *brokerSwitchSuite) TestASwitchWhoseSignalWasLostIsFoundThroughPostgres() {
	s.changeSeenByWatch = func(nth int) bool {
		if nth > 1 {
			return false
		}
		s.state, _ = s.state.ApplyNotification(brokerstate.Notification{Index: 1, Host: "h", Vhost: "/", SwitchedAt: t0}, t0)
		return true
	}
	start := s.env.Now()
	var committedAt time.Time
	status := s.runUntil(func() bool {
		if len(s.commits) > 0 && committedAt.IsZero() {
			committedAt = s.env.Now()
		}
		return len(s.commits) > 0
	}, workflows.IdleFallback-time.Minute)

	s.Require().Len(s.commits, 1, "the lost notification is followed")
	s.Less(committedAt.Sub(start), workflows.IdleFallback, "by the watch, not by the hourly fallback")
	s.Equal(1, status.State.ActiveIndex)
}

// TestAnIdleWorkflowReadsThePostgresStateOnlyAsAFallback: idle, it runs no timer per
// minute any more, only one watch and one read per IdleFallback.
func (s *brokerSwitchSuite) TestAnIdleWorkflowReadsThePostgresStateOnlyAsAFallback() {
	s.run(10*workflows.IdleFallback - time.Minute)

	// The first read, then one per IdleFallback; the test environment may fire a timer
	// a moment before it hands over a watch's answer, which can add one read.
	s.InDelta(10, s.loads, 1, "reads in 10 hours (a read a minute used to make 600)")
	s.InDelta(10, s.watches, 1)
}

func (s *brokerSwitchSuite) TestMalformedSignalInputIsSkipped() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.SignalForceSwitch, map[string]string{"index": "one"})
	}, time.Second)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.SignalForceSwitch, map[string]int{"index": 1})
	}, 2*time.Second)
	status := s.run(time.Minute)

	s.Equal(1, status.State.ActiveIndex, "the valid signal after the malformed one is handled")
}

// A refused notification leaves the cached state as it was.
func (s *brokerSwitchSuite) TestARefusedSignalKeepsTheCachedState() {
	s.state.ActiveIndex = 2
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.SignalPendingSwitch, brokerstate.Notification{Index: 1, Host: "too-far-ahead", Vhost: "/", SwitchedAt: t0})
	}, time.Second)
	status := s.run(time.Minute)
	s.Equal(2, status.State.ActiveIndex, "the refusal did not zero the state")
}

// The drain-check interval is the worker's now, not the first run's input carried
// through every continue-as-new: 100 ms checks a busy broker some
// 600 times a minute, 3 s some 20 times.
func (s *brokerSwitchSuite) TestTheDrainCheckIntervalComesFromTheWorker() {
	s.interval = 100 * time.Millisecond
	s.backlog[0] = busy(1000)
	s.notify(time.Second, 1, t0)
	s.run(time.Minute)
	s.Greater(len(s.checks), 300)
}

// Force and cancel sent as Workflow Updates are answered with what happened.
func (s *brokerSwitchSuite) TestOrdersByUpdateAreAnswered() {
	answers := map[string]workflows.OrderResult{}
	update := func(at time.Duration, key, name string, arg any) {
		s.env.RegisterDelayedCallback(func() {
			s.env.UpdateWorkflow(name, key, &testsuite.TestUpdateCallback{
				OnAccept: func() {},
				OnReject: func(err error) { s.Fail("rejected", "%s: %v", key, err) },
				OnComplete: func(v any, err error) {
					s.NoError(err, key)
					answers[key] = v.(workflows.OrderResult)
				},
			}, arg)
		}, at)
	}
	s.backlog[0] = busy(1000)
	s.notify(time.Second, 1, t0)
	update(2*time.Second, "cancel", workflows.UpdateCancelPendingSwitch, activities.CancelPendingSwitchInput{})
	update(3*time.Second, "cancel again", workflows.UpdateCancelPendingSwitch, activities.CancelPendingSwitchInput{})
	update(4*time.Second, "force", workflows.UpdateForceSwitch, activities.ForceSwitchInput{Index: 2})
	update(5*time.Second, "force again", workflows.UpdateForceSwitch, activities.ForceSwitchInput{Index: 2})
	update(6*time.Second, "force unknown", workflows.UpdateForceSwitch, activities.ForceSwitchInput{Index: 7})
	s.run(time.Minute)

	s.Equal(workflows.OrderCommitted, answers["cancel"].Outcome)
	s.Nil(answers["cancel"].State.Pending)
	s.Equal(workflows.OrderAlreadyThere, answers["cancel again"].Outcome)
	s.Equal(workflows.OrderCommitted, answers["force"].Outcome)
	s.Equal(2, answers["force"].State.ActiveIndex)
	s.Equal(workflows.OrderAlreadyThere, answers["force again"].Outcome)
	s.Equal(workflows.OrderRefused, answers["force unknown"].Outcome)
	s.Contains(answers["force unknown"].Reason, "broker 7 is not configured")
	s.Equal(2, answers["force unknown"].State.ActiveIndex)
}

// A cancel that names the switch the API read in Postgres is committed, even when the
// notification's signal has not reached the workflow yet: its answer is not "already there".
func (s *brokerSwitchSuite) TestANamedCancelIsCommittedBeforeTheWorkflowHeardOfTheSwitch() {
	var answer workflows.OrderResult
	s.env.RegisterDelayedCallback(func() {
		s.mu.Lock()
		s.state, _ = s.state.ApplyNotification(brokerstate.Notification{Index: 1, Host: "h", Vhost: "/", SwitchedAt: t0}, t0)
		s.mu.Unlock()
		s.env.UpdateWorkflow(workflows.UpdateCancelPendingSwitch, "cancel", &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { s.Fail("rejected", "%v", err) },
			OnComplete: func(v any, err error) { s.NoError(err); answer = v.(workflows.OrderResult) },
		}, activities.CancelPendingSwitchInput{SwitchedAt: t0})
	}, time.Second)
	s.run(time.Minute)

	s.Equal(workflows.OrderCommitted, answer.Outcome)
	s.Nil(answer.State.Pending)
	s.Empty(s.commits)
}

// A force sent before a notification, in the same workflow task, is handled before it:
// signals are taken in the order they arrived, not name by name.
func (s *brokerSwitchSuite) TestSignalsAreHandledInArrivalOrder() {
	s.backlog[2] = busy(1000)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.SignalForceSwitch, map[string]int{"index": 2})
		s.env.SignalWorkflow(workflows.SignalPendingSwitch, brokerstate.Notification{Index: 1, Host: "h", Vhost: "/", SwitchedAt: t0})
	}, 0)
	status := s.run(time.Minute)

	s.Equal(2, status.State.ActiveIndex)
	s.Require().NotNil(status.State.Pending, "the notification that came after the force is not dropped by it")
	s.Equal(1, status.State.Pending.Target().Index)
}

// quietLogger keeps the test environment's debug lines out of the test output.
func quietLogger() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

// busy is a broker that is never drained within a test: n checks that see messages.
func busy(n int) []int {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = 9
	}
	return counts
}

// An order sent as an update when the run is about to continue as new is applied and
// answered first: an update cannot travel to the next run, and nothing is carried.
func (s *brokerSwitchSuite) TestUpdatesAreAnsweredBeforeContinueAsNew() {
	s.backlog[0] = busy(1000)
	s.notify(time.Second, 1, t0)
	var answer workflows.OrderResult
	s.env.RegisterDelayedCallback(func() {
		s.env.SetContinueAsNewSuggested(true)
		s.env.UpdateWorkflow(workflows.UpdateForceSwitch, "force", &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { s.Fail("rejected", "%v", err) },
			OnComplete: func(v any, err error) { s.NoError(err); answer = v.(workflows.OrderResult) },
		}, activities.ForceSwitchInput{Index: 2})
	}, 5*time.Second)
	s.env.ExecuteWorkflow(workflows.BrokerSwitch, workflows.BrokerSwitchInput{})

	s.Require().True(s.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &can)
	s.Equal(workflows.OrderCommitted, answer.Outcome)
	s.Equal(2, answer.State.ActiveIndex)
	var next workflows.BrokerSwitchInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Empty(next.Orders, "every order was applied in this run")
}

// A worker built without worker.Options would leave order signals in channels nobody
// reads: the workflow refuses to run instead.
func TestBrokerSwitchNeedsTheOrderIntake(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger())
	env := ts.NewTestWorkflowEnvironment()
	env.ExecuteWorkflow(workflows.BrokerSwitch, workflows.BrokerSwitchInput{})
	require.ErrorContains(t, env.GetWorkflowError(), "OrderIntake")
}
