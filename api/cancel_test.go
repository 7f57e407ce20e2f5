//go:build integration

package api

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// A cancel that reaches the workflow after the switch it names was committed is refused
// with the reason: the broker moved, and "committed" would tell the operator the
// opposite.
func TestACancelThatComesAfterItsSwitchIsRefused(t *testing.T) {
	e := newWorkerEnv(t)
	// The first order starts the workflow by signal; from then on orders are updates.
	require.Equal(t, http.StatusOK, e.do(http.MethodPost, "/api/v1/broker/switch/0", bearer(operatorToken), nil).Status)
	e.publish(0) // broker 0 is not drained: the switch waits
	host1, vhost1 := e.endpoint(1)
	require.Equal(t, http.StatusAccepted, e.notify(host1, vhost1, time.Now()).Status)
	read := e.eventually("the pending switch to 1", func(st brokerstate.State) bool { return target(st) == 1 })
	named := read.Pending.Target() // what the API read for the cancel

	e.purge(0) // broker 0 drains before the workflow gets to the cancel
	e.eventually("the switch to 1", func(st brokerstate.State) bool { return st.ActiveIndex == 1 && st.Pending == nil })
	handle, err := e.client.UpdateWorkflow(t.Context(), client.UpdateWorkflowOptions{
		WorkflowID: workflows.BrokerSwitchWorkflowID, UpdateName: workflows.UpdateCancelPendingSwitch,
		Args:         []any{activities.CancelPendingSwitchInput{SwitchedAt: named.SwitchedAt, Index: &named.Index}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	var answer workflows.OrderResult
	require.NoError(t, handle.Get(t.Context(), &answer))
	require.Equal(t, workflows.OrderRefused, answer.Outcome, "reason %q", answer.Reason)
	require.Contains(t, answer.Reason, "too late to cancel: the switch from broker 0 to broker 1 was committed")
	require.Equal(t, 1, answer.State.ActiveIndex)
}

// The same over HTTP when the cancel goes as a signal (no workflow runs yet): the API
// sees the switch committed instead of canceled and answers 409.
func TestACancelSignalThatComesAfterItsSwitchIsRefused(t *testing.T) {
	e, _ := newStoppedWorkerEnv(t)
	at := time.Now().UTC().Truncate(time.Second)
	e.seed(func(st brokerstate.State) brokerstate.State {
		st, _ = st.ApplyNotification(brokerstate.Notification{Index: 1, Host: e.cfg.Brokers[1].Host, Vhost: e.cfg.Brokers[1].Vhost, SwitchedAt: at}, at)
		return st
	})
	answered := make(chan response, 1)
	go func() {
		answered <- e.do(http.MethodDelete, "/api/v1/broker/pending-switch", bearer(operatorToken), nil)
	}()
	// The cancel is with the workflow (started by the signal, no worker yet)...
	e.waitForTheWorkflow()
	// ...when the switch it names is committed.
	e.seed(func(st brokerstate.State) brokerstate.State {
		st, _ = st.CompleteHop(0, st.Pending.Next(), 1, time.Now())
		return st
	})
	res := <-answered
	require.Equal(t, http.StatusConflict, res.Status, res.Body)
	m := res.JSON(t)
	require.Equal(t, false, m["committed"])
	require.Contains(t, m["reason"], "too late to cancel")
	require.EqualValues(t, 1, m["activeIndex"])
}

// waitForTheWorkflow waits until the BrokerSwitch workflow exists: an order sent as a
// signal started it.
func (e *env) waitForTheWorkflow() {
	e.t.Helper()
	require.NoError(e.t, testenv.WaitUntil(e.t.Context(), waitFor, "the BrokerSwitch workflow", func() (bool, error) {
		_, err := e.client.DescribeWorkflowExecution(e.t.Context(), workflows.BrokerSwitchWorkflowID, "")
		var notFound *serviceerror.NotFound
		return !errors.As(err, &notFound), err
	}))
}
