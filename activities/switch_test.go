//go:build integration

package activities

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

// oneReading hands out one reading, then ends the watch as its deadline would; it counts
// how often it is asked.
type oneReading struct {
	reading brokerstate.State
	asked   int
}

func (w *oneReading) Next(_ context.Context, after uint64) (brokerstate.State, uint64, bool) {
	w.asked++
	if after == 0 {
		return w.reading, 1, true
	}
	return brokerstate.State{}, after, false
}

// migratedDB is a database of the test's own with the schema in place.
func migratedDB(t *testing.T) *gorm.DB {
	t.Helper()
	db, _ := modelstest.NewDB(t)
	return db
}

// switchStore is a brokerstate.Store on a database of its own, its state set by fn.
func switchStore(t *testing.T, fn func(brokerstate.State) brokerstate.State) *brokerstate.Store {
	t.Helper()
	store := &brokerstate.Store{DB: migratedDB(t), Brokers: []brokerstate.Ref{{Host: "a", Vhost: "/"}, {Host: "b", Vhost: "/"}}}
	_, err := store.Update(t.Context(), func(st brokerstate.State) (brokerstate.State, error) { return fn(st), nil })
	require.NoError(t, err)
	return store
}

// waitForChange runs the watch and returns its answer.
func waitForChange(t *testing.T, a *Switch, in WaitForChangeInput) bool {
	t.Helper()
	a.Leases = runKeeper(t, migratedDB(t))
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	v, err := env.ExecuteActivity(a.WaitForChange, in)
	require.NoError(t, err)
	var changed bool
	require.NoError(t, v.Get(&changed))
	return changed
}

// A watcher whose reading predates a force the workflow already applied does not send the
// idle workflow back at once: Postgres is read, shows nothing new, and the watch goes on
// to the next reading. Answering on the stale reading made the idle
// loop spin, an Action a turn, until the watcher caught up.
func TestAStaleReadingDoesNotEndTheWatch(t *testing.T) {
	forced := switchStore(t, func(st brokerstate.State) brokerstate.State { return st.Force(1, time.Time{}, time.Now()) })
	w := &oneReading{reading: brokerstate.State{ActiveIndex: 0}} // from before the force
	a := &Switch{Store: forced, Watcher: w, Logger: slog.New(slog.DiscardHandler)}
	require.False(t, waitForChange(t, a, WaitForChangeInput{ActiveIndex: 1}), "Postgres shows no change")
	require.Equal(t, 2, w.asked, "it waited for the watcher's next reading")

	// A reading that Postgres confirms is a change, answered at once.
	w = &oneReading{reading: brokerstate.State{ActiveIndex: 1}}
	a.Watcher = w
	require.True(t, waitForChange(t, a, WaitForChangeInput{ActiveIndex: 0}))
	require.Equal(t, 1, w.asked)
}

// runKeeper runs a worker lease on db, with Temporal always answering, until the test ends.
func runKeeper(t *testing.T, db *gorm.DB) *liveness.Keeper {
	t.Helper()
	k := &liveness.Keeper{DB: db, Temporal: &testenv.TemporalReach{}, Identity: t.Name(), TTL: 8 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	testenv.RunInBackground(t, k.Run)
	return k
}

// failingPool is a broker list whose counts fail with an error text that quotes a
// broker's URL and password, as a careless client library might.
type failingPool struct{ eps []broker.Endpoint }

func (p failingPool) Endpoints() []broker.Endpoint { return p.eps }

func (p failingPool) ReadyCounts(context.Context, int, []string) (map[string]int, error) {
	return nil, errors.New("dial " + p.eps[0].URL + ": refused (" + brokerPassword + ")")
}

func (p failingPool) QueueCounts(ctx context.Context, index int, queues []string) (map[string]broker.QueueCount, error) {
	_, err := p.ReadyCounts(ctx, index, queues)
	return nil, err
}

const brokerPassword = "Sup3r-S3cret-pw/x"

// The drain check's error goes to Postgres (the API shows it), to the workflow's history
// (the Web UI shows it) and to the log: it is scrubbed once, where it is made, with the
// worker's own broker list, which holds the credentials.
func TestADrainCheckErrorCarriesNoBrokerPassword(t *testing.T) {
	eps, err := broker.ParseEndpoints("amqp://user:" + url.QueryEscape(brokerPassword) + "@a/, amqp://user:pw2-secret-x@b/")
	require.NoError(t, err)
	store := switchStore(t, func(st brokerstate.State) brokerstate.State { return st })
	var logs bytes.Buffer
	a := &Switch{Pool: failingPool{eps: eps}, Store: store, Queues: []string{"issues"}, Now: time.Now,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	v, err := env.ExecuteActivity(a.DrainCheck, DrainCheckInput{BrokerIndex: 0})
	require.NoError(t, err)
	var check brokerstate.DrainCheck
	require.NoError(t, v.Get(&check))
	st, err := store.LoadAllowingRemoved(t.Context())
	require.NoError(t, err)
	require.NotNil(t, st.LastDrainCheck)
	require.False(t, check.Reachable)
	require.Contains(t, check.Error, "refused")
	for where, text := range map[string]string{"the activity's result": check.Error, "Postgres": st.LastDrainCheck.Error, "the log": logs.String()} {
		for _, secret := range []string{brokerPassword, url.QueryEscape(brokerPassword), "user:"} {
			require.NotContains(t, text, secret, where)
		}
	}
}
