//go:build integration

package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// A notification dated far ahead is refused with the reason; one within the allowed skew
// that raised the mark ahead of the clock is cleared by an operator's cancel, so that the
// real notifications that follow are taken.
func TestAFutureSwitchedAtCannotHideTheRealNotifications(t *testing.T) {
	e := newWorkerEnv(t)
	e.publish(0) // broker 0 is not drained: a Pending Switch stays pending
	host1, vhost1 := e.endpoint(1)
	before := e.settings()

	res := e.notify(host1, vhost1, time.Now().Add(59*time.Minute))
	res.requireError(t, http.StatusUnprocessableEntity, "ahead of this server's clock")
	require.Contains(t, res.Body, "NOTIFICATION_MAX_CLOCK_SKEW")
	require.Equal(t, before, e.settings(), "a refused notification changes nothing")

	real := time.Now().UTC().Truncate(time.Millisecond)
	res = e.notify(host1, vhost1, real)
	require.Equal(t, http.StatusAccepted, res.Status, "the real notification is taken: %s", res.Body)
	e.eventually("the real pending switch", func(st brokerstate.State) bool { return target(st) == 1 })

	// Within the skew a producer's clock can still run ahead: the mark is ahead of ours,
	// and the cancel that an operator sends brings it back.
	ahead := time.Now().Add(4 * time.Minute).UTC()
	host0, vhost0 := e.endpoint(0)
	require.Equal(t, http.StatusAccepted, e.notify(host0, vhost0, ahead).Status)
	e.eventually("the route cancelled by the notification ahead", func(st brokerstate.State) bool { return st.Pending == nil && st.SeenUntil.Equal(ahead) })
	res = e.notify(host1, vhost1, time.Now())
	require.Equal(t, "stale", res.JSON(t)["outcome"], "the mark ahead hides a real notification: %s", res.Body)
	require.Equal(t, http.StatusOK, e.do(http.MethodDelete, "/api/v1/broker/pending-switch", bearer(operatorToken), nil).Status)
	// With nothing pending the API answers at once: the mark is cleared by a force.
	require.Equal(t, http.StatusOK, e.do(http.MethodPost, "/api/v1/broker/switch/0", bearer(operatorToken), nil).Status)
	st := e.state()
	require.False(t, st.SeenUntil.After(time.Now()), "the force brought the mark back: %s", st.SeenUntil)
	res = e.notify(host1, vhost1, time.Now())
	require.Equal(t, http.StatusAccepted, res.Status, res.Body)
}

// Two rotations within one second: the second broker is a new hop, the same broker
// again a duplicate that changes nothing.
func TestTwoRotationsInOneSecond(t *testing.T) {
	e := newEnv(t)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	res := e.notify("rabbit-b.example.com", "prod/one", at)
	require.Equal(t, http.StatusAccepted, res.Status, res.Body)
	require.Equal(t, 1, target(e.state()))

	before := e.settings()
	res = e.notify("RABBIT-B.example.com", "prod%2Fone", at)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.Equal(t, "stale", res.JSON(t)["ignored"], "the same broker at the same time is a duplicate")
	require.Equal(t, before, e.settings())

	res = e.notify("rabbit-a.example.com", "vh-a", at)
	require.Equal(t, http.StatusAccepted, res.Status, "another broker at the same time is a new hop: %s", res.Body)
	require.Equal(t, "route-canceled", res.JSON(t)["outcome"], "back to the active broker within the same second")
	require.Nil(t, e.state().Pending)
}

// A force asked while the workflow cannot run yet keeps a notification recorded after it.
func TestAForceKeepsANotificationRecordedAfterIt(t *testing.T) {
	e, startWorker := newStoppedWorkerEnv(t)
	e.publish(0) // broker 0 stays undrained, so the surviving switch stays pending

	forced := make(chan response, 1)
	go func() { forced <- e.do(http.MethodPost, "/api/v1/broker/switch/0", bearer(operatorToken), nil) }()
	// The force is with the workflow (started by the signal, no worker yet)...
	e.waitForTheWorkflow()
	// ...when the producer moves to broker 1.
	host1, vhost1 := e.endpoint(1)
	res := e.notify(host1, vhost1, time.Now())
	require.Equal(t, http.StatusAccepted, res.Status, res.Body)

	startWorker()
	res = <-forced
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	st := e.state()
	require.NotNil(t, st.LastSwitch)
	require.True(t, st.LastSwitch.Forced)
	require.Equal(t, 0, st.ActiveIndex)
	require.Equal(t, 1, target(st), "the notification recorded after the force was asked survives it")
}

// The runbook's repair of an active broker removed from the configuration (docs/operations.md,
// "Adding or removing a broker") works over HTTP
// and over the Temporal CLI's signal.
func TestAnActiveBrokerRemovedFromTheConfigurationCanBeLeft(t *testing.T) {
	e := newWorkerEnv(t)
	removed := func() {
		t.Helper()
		e.seed(func(st brokerstate.State) brokerstate.State { return st }) // the settings rows exist
		gone, err := json.Marshal(brokerstate.Ref{Host: "gone.example.com", Vhost: "old"})
		require.NoError(t, err)
		require.NoError(t, e.db.WithContext(t.Context()).Model(&models.Setting{}).
			Where("key = ?", brokerstate.KeyActiveEndpoint).Update("value", string(gone)).Error)
		_, err = e.store.Load(t.Context())
		require.ErrorContains(t, err, "force a switch")
	}

	// Over HTTP.
	removed()
	res := e.do(http.MethodGet, "/api/v1/broker", bearer(operatorToken), nil)
	require.Equal(t, http.StatusOK, res.Status, "the state is shown, with no active broker: %s", res.Body)
	require.EqualValues(t, -1, res.JSON(t)["activeIndex"])
	res = e.do(http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.Equal(t, 1, e.state().ActiveIndex)

	// Over the signal the Temporal CLI and tctl send (the workflow is running by now).
	removed()
	require.NoError(t, e.client.SignalWorkflow(t.Context(), workflows.BrokerSwitchWorkflowID, "",
		workflows.SignalForceSwitch, activities.ForceSwitchInput{Index: 0}))
	e.eventually("the forced switch to 0", func(st brokerstate.State) bool { return st.ActiveIndex == 0 })
}

// Force and cancel over HTTP wait for the workflow's own answer through Workflow Update:
// committed, already there, or refused with a reason.
func TestOrdersWaitForTheWorkflowsAnswer(t *testing.T) {
	e := newWorkerEnv(t)
	e.publish(0)
	// The first order starts the workflow by signal; from then on orders are updates.
	require.Equal(t, http.StatusOK, e.do(http.MethodPost, "/api/v1/broker/switch/0", bearer(operatorToken), nil).Status)

	res := e.do(http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	m := res.JSON(t)
	require.Equal(t, "committed", m["outcome"])
	require.EqualValues(t, 1, m["activeIndex"])

	res = e.do(http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.Equal(t, "already-there", res.JSON(t)["outcome"])

	// Broker 1, now active, holds a message, so that the switch back to 0 stays pending
	// until it is cancelled.
	e.publish(1)
	host0, vhost0 := e.endpoint(0)
	require.Equal(t, http.StatusAccepted, e.notify(host0, vhost0, time.Now()).Status)
	e.eventually("the pending switch to 0", func(st brokerstate.State) bool { return target(st) == 0 })
	res = e.do(http.MethodDelete, "/api/v1/broker/pending-switch", bearer(operatorToken), nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	m = res.JSON(t)
	require.Equal(t, "committed", m["outcome"])
	require.Nil(t, m["pendingSwitch"])

	// A broker this API knows but the worker does not (a rollout half done) is refused
	// by the workflow, with the reason.
	handle, err := e.client.UpdateWorkflow(t.Context(), client.UpdateWorkflowOptions{
		WorkflowID: workflows.BrokerSwitchWorkflowID, UpdateName: workflows.UpdateForceSwitch,
		Args: []any{activities.ForceSwitchInput{Index: 7}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	var answer workflows.OrderResult
	require.NoError(t, handle.Get(t.Context(), &answer))
	require.Equal(t, workflows.OrderRefused, answer.Outcome)
	require.Contains(t, answer.Reason, "broker 7 is not configured")
	require.Equal(t, 1, answer.State.ActiveIndex, "a refused order leaves the state as it was")
}
