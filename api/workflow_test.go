//go:build integration

package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/worker"
)

// waitFor bounds every wait on the workflow: long, because it only ends a test that hangs,
// and the Temporal dev server can stall for half a minute on a loaded machine.
const waitFor = 45 * time.Second

// workerEnv is an env on two real RabbitMQ vhosts with a real worker running the
// BrokerSwitch workflow.
type workerEnv struct {
	*env
	urls []string
}

func newWorkerEnv(t *testing.T) *workerEnv {
	t.Helper()
	e, start := newStoppedWorkerEnv(t)
	start()
	return e
}

// newStoppedWorkerEnv is newWorkerEnv with the worker started only when start is called,
// so that a test can have orders wait for a busy or absent workflow.
func newStoppedWorkerEnv(t *testing.T) (*workerEnv, func()) {
	t.Helper()
	urls := []string{testenv.NewVhost(t), testenv.NewVhost(t)}
	eps, err := broker.ParseEndpoints(strings.Join(urls, ","))
	require.NoError(t, err)
	e := newEnv(t, func(c *config.Config) {
		c.Brokers = eps
		// Stop waits for the workflow task and local activity in flight, as a stopping
		// worker of the service does: without it they outlive the test.
		c.WorkerStopTimeout = waitFor
	})

	pool := broker.NewPool(eps, e.deps.Logger, broker.PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })
	topology := broker.Topology{Queues: e.cfg.Queues, RetryTTL: e.cfg.RetryTTL}
	for _, ep := range eps {
		require.NoError(t, pool.DeclareTopology(t.Context(), ep.Index, topology))
	}
	start := func() {
		w := sdkworker.New(e.client, e.cfg.TaskQueue, worker.Options(e.cfg))
		deps := worker.Deps{Config: e.cfg, Client: e.client, Pool: pool, DB: e.db, Logger: e.deps.Logger}
		keeper := worker.NewKeeper(deps)
		testenv.RunInBackground(t, keeper.Run)
		worker.Register(w, deps, nil, keeper)
		require.NoError(t, w.Start())
		t.Cleanup(w.Stop)
	}
	return &workerEnv{env: e, urls: urls}, start
}

// endpoint is broker i as the producer names it: host in capitals, vhost percent-encoded.
func (e *workerEnv) endpoint(i int) (host, vhost string) {
	ep := e.cfg.Brokers[i]
	return strings.ToUpper(ep.Host), url.PathEscape(ep.Vhost)
}

// publish puts one message on the first queue of broker i, so that it is not drained.
func (e *workerEnv) publish(i int) {
	e.t.Helper()
	e.withChannel(i, func(ch *amqp.Channel) {
		require.NoError(e.t, ch.PublishWithContext(e.t.Context(), "", e.cfg.Queues[0], false, false,
			amqp.Publishing{Body: []byte(`{}`), DeliveryMode: amqp.Persistent}))
	})
}

// purge empties the first queue of broker i.
func (e *workerEnv) purge(i int) {
	e.t.Helper()
	e.withChannel(i, func(ch *amqp.Channel) {
		_, err := ch.QueuePurge(e.cfg.Queues[0], false)
		require.NoError(e.t, err)
	})
}

func (e *workerEnv) withChannel(i int, fn func(*amqp.Channel)) {
	e.t.Helper()
	conn, err := amqp.Dial(e.urls[i])
	require.NoError(e.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(e.t, err)
	defer ch.Close()
	fn(ch)
}

// eventually waits until the state in Postgres satisfies cond.
func (e *workerEnv) eventually(what string, cond func(brokerstate.State) bool) brokerstate.State {
	e.t.Helper()
	var st brokerstate.State
	require.NoError(e.t, testenv.WaitUntil(e.t.Context(), waitFor, "the state to show "+what, func() (bool, error) {
		var err error
		if st, err = e.store.Load(e.t.Context()); err != nil {
			return false, err
		}
		return cond(st), fmt.Errorf("last: %+v", st)
	}))
	return st
}

// target is the index a pending switch heads to, -1 without one.
func target(st brokerstate.State) int {
	if st.Pending == nil {
		return -1
	}
	return st.Pending.Target().Index
}

func TestNotificationsThroughTheWorkflow(t *testing.T) {
	e := newWorkerEnv(t)
	// Neither broker is drained: a pending switch stays pending until the test purges.
	e.publish(0)
	e.publish(1)
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)

	// A notification is recorded as a Pending Switch by the workflow.
	host1, vhost1 := e.endpoint(1)
	res := e.notify(host1, vhost1, t0)
	require.Equal(t, http.StatusAccepted, res.Status, res.Body)
	m := res.JSON(t)
	require.Equal(t, "recorded", m["outcome"])
	require.Nil(t, m["ignored"])
	requireProducerAnswer(t, m)
	require.EqualValues(t, 1, m["target"].(map[string]any)["index"])
	st := e.eventually("the pending switch to 1", func(st brokerstate.State) bool { return target(st) == 1 })
	require.Equal(t, e.cfg.Brokers[1].Host, st.Pending.Target().Host, "the canonical host is stored")
	require.Equal(t, e.cfg.Brokers[1].Vhost, st.Pending.Target().Vhost, "the decoded vhost is stored")
	require.Equal(t, 0, st.ActiveIndex)
	require.True(t, st.SeenUntil.Equal(t0))

	// Duplicates and older deliveries move nothing.
	for _, n := range []struct {
		broker int
		at     time.Time
	}{{1, t0}, {0, t0.Add(-time.Second)}, {1, t0.Add(-time.Minute)}} {
		host, vhost := e.endpoint(n.broker)
		res := e.notify(host, vhost, n.at)
		require.Equal(t, http.StatusOK, res.Status, res.Body)
		require.Equal(t, "stale", res.JSON(t)["ignored"])
	}

	// GET shows the state, the running workflow and no credentials.
	e.eventually("a drain check", func(st brokerstate.State) bool { return st.LastDrainCheck != nil })
	// The activity records the check in Postgres before the workflow has its result: ask
	// until the workflow says why it waits (the assertions below fail on a timeout).
	_ = testenv.WaitUntil(t.Context(), waitFor, "the reason", func() (bool, error) {
		res = e.do(http.MethodGet, "/api/v1/broker", bearer(operatorToken), nil)
		require.Equal(t, http.StatusOK, res.Status, res.Body)
		return strings.Contains(res.Body, "not drained yet"), nil
	})
	require.NotContains(t, res.Body, "guest:guest")
	require.NotContains(t, res.Body, "amqp://")
	m = res.JSON(t)
	require.EqualValues(t, 0, m["activeIndex"])
	brokers := m["brokers"].([]any)
	require.Equal(t, true, brokers[0].(map[string]any)["active"])
	require.Equal(t, true, brokers[1].(map[string]any)["onRoute"])
	require.NotNil(t, m["pendingSwitch"])
	wf := m["workflow"].(map[string]any)
	require.Equal(t, "Running", wf["status"])
	require.Equal(t, true, wf["found"])
	require.Contains(t, wf["waiting"], "not drained yet")
	require.NotNil(t, m["lastDrainCheck"])

	// The producer comes back to the broker we read: the route is dropped.
	host0, vhost0 := e.endpoint(0)
	t1 := t0.Add(time.Minute)
	res = e.notify(host0, vhost0, t1)
	require.Equal(t, http.StatusAccepted, res.Status, res.Body)
	require.Equal(t, "route-canceled", res.JSON(t)["outcome"])
	e.eventually("the route dropped", func(st brokerstate.State) bool { return st.Pending == nil && st.SeenUntil.Equal(t1) })

	// An operator cancels a pending switch; cancelling again changes nothing.
	t2 := t1.Add(time.Minute)
	require.Equal(t, http.StatusAccepted, e.notify(host1, vhost1, t2).Status)
	e.eventually("the pending switch to 1 again", func(st brokerstate.State) bool { return target(st) == 1 })
	for range 2 {
		res = e.do(http.MethodDelete, "/api/v1/broker/pending-switch", bearer(operatorToken), nil)
		require.Equal(t, http.StatusOK, res.Status, res.Body)
		m = res.JSON(t)
		require.Equal(t, true, m["committed"])
		require.Nil(t, m["pendingSwitch"])
		require.EqualValues(t, 0, m["activeIndex"])
	}
	st = e.state()
	require.Nil(t, st.Pending)
	require.Equal(t, 0, st.ActiveIndex)

	// A forced switch moves at once and drops the pending switch.
	t3 := t2.Add(time.Minute)
	require.Equal(t, http.StatusAccepted, e.notify(host1, vhost1, t3).Status)
	e.eventually("the pending switch to 1 once more", func(st brokerstate.State) bool { return target(st) == 1 })
	res = e.do(http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	m = res.JSON(t)
	require.Equal(t, true, m["committed"])
	require.EqualValues(t, 1, m["activeIndex"])
	require.Nil(t, m["pendingSwitch"])
	last := m["lastSwitch"].(map[string]any)
	require.Equal(t, true, last["forced"])
	require.EqualValues(t, 0, last["from"])
	require.EqualValues(t, 1, last["to"])
	st = e.state()
	require.Equal(t, 1, st.ActiveIndex)
	require.Nil(t, st.Pending)

	// Forcing the broker already active is committed too (a new forced switch is recorded).
	res = e.do(http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.EqualValues(t, 1, res.JSON(t)["activeIndex"])

	// The producer says it is where we read: nothing moves, but the mark rises, so that
	// an older notification delivered later cannot move us backwards.
	host1, vhost1 = e.endpoint(1)
	t5 := t3.Add(2 * time.Minute)
	res = e.notify(host1, vhost1, t5)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.Equal(t, "already-active", res.JSON(t)["ignored"])
	e.eventually("the seen-until mark at t5", func(st brokerstate.State) bool { return st.SeenUntil.Equal(t5) })
	res = e.notify(host0, vhost0, t5.Add(-time.Minute))
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.Equal(t, "stale", res.JSON(t)["ignored"])
	st = e.state()
	require.Equal(t, 1, st.ActiveIndex)
	require.Nil(t, st.Pending)

	// A pending switch completes once the broker we read is drained.
	t6 := t5.Add(time.Minute)
	require.Equal(t, http.StatusAccepted, e.notify(host0, vhost0, t6).Status)
	e.eventually("the pending switch to 0", func(st brokerstate.State) bool { return target(st) == 0 })
	e.purge(1)
	st = e.eventually("the switch to 0 committed", func(st brokerstate.State) bool { return st.ActiveIndex == 0 && st.Pending == nil })
	require.NotNil(t, st.LastSwitch)
	require.False(t, st.LastSwitch.Forced)
	require.Equal(t, 1, st.LastSwitch.From)
	require.Equal(t, 0, st.LastSwitch.To)
	require.True(t, st.LastSwitch.SwitchedAt.Equal(t6))
}

// Many notifications at once, in any order, end in the state the newest one asks for.
func TestConcurrentNotifications(t *testing.T) {
	e := newWorkerEnv(t)
	e.publish(0)
	e.publish(1)
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			// Even i name broker 1, odd i broker 0 (the active one); the newest, n-1, is odd
			// unless n is odd.
			host, vhost := e.endpoint(1 - i%2)
			body := `{"host": "` + host + `", "vhost": "` + vhost + `", "switchedAt": "` +
				base.Add(time.Duration(i)*time.Second).Format(time.RFC3339) + `"}`
			ctx, cancel := context.WithTimeout(t.Context(), waitFor)
			defer cancel()
			res := e.doCtx(ctx, http.MethodPost, "/api/v1/broker/pending-switch", bearer(producerToken), jsonBody(body))
			if res.Status != http.StatusOK && res.Status != http.StatusAccepted {
				errs <- &statusError{res}
				return
			}
			errs <- nil
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	newest := base.Add((n - 1) * time.Second)
	// The newest (index n-1, odd) names broker 0, which is active: no pending switch.
	st := e.eventually("the newest notification taken", func(st brokerstate.State) bool { return st.SeenUntil.Equal(newest) })
	require.Equal(t, 0, st.ActiveIndex)
	require.Nil(t, st.Pending)
}

type statusError struct{ res response }

func (e *statusError) Error() string { return http.StatusText(e.res.Status) + ": " + e.res.Body }
