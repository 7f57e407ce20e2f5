//go:build integration

package api

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/models"
)

// unknownPair is a valid notification for a broker nobody configured: it passes auth and
// validation and then changes nothing.
const unknownPair = `{"host": "elsewhere.example.com", "vhost": "x", "switchedAt": "2026-01-02T03:04:05Z"}`

func TestAuth(t *testing.T) {
	e := newEnv(t)
	before := e.settings()

	type route struct {
		method, path string
		body         string
		producerOK   bool
	}
	routes := []route{
		{http.MethodGet, "/api/v1/broker", "", false},
		{http.MethodPost, "/api/v1/broker/pending-switch", unknownPair, true},
		{http.MethodDelete, "/api/v1/broker/pending-switch", "", false},
		{http.MethodPost, "/api/v1/broker/switch/99", "", false},
	}
	send := func(r route, auth string) response {
		var body io.Reader
		if r.body != "" {
			body = jsonBody(r.body)
		}
		return e.do(r.method, r.path, auth, body)
	}
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			for _, auth := range []string{
				"",
				"Bearer",
				"Bearer ",
				"Bearer wrong-token",
				"Bearer " + operatorToken + "x",
				"Bearer " + operatorToken[:len(operatorToken)-1],
				"Basic " + operatorToken,
				operatorToken,
				"Bearer" + operatorToken,
			} {
				res := send(r, auth)
				res.requireError(t, http.StatusUnauthorized, "missing or invalid token")
				require.Equal(t, `Bearer realm="brokerswitch"`, res.Header.Get("WWW-Authenticate"))
				require.NotContains(t, res.Body, operatorToken)
			}
			for _, auth := range []string{bearer(producerToken), "token " + producerToken} {
				res := send(r, auth)
				if r.producerOK {
					res.requireError(t, http.StatusNotFound, "no configured broker")
				} else {
					res.requireError(t, http.StatusForbidden, "may only post pending-switch notifications")
				}
				require.NotContains(t, res.Body, producerToken)
			}
			for _, auth := range []string{bearer(operatorToken), "token " + operatorToken, "bearer  " + operatorToken, "TOKEN " + operatorToken} {
				res := send(r, auth)
				require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, res.Status, "auth %q: %s", auth, res.Body)
				require.NotContains(t, res.Body, operatorToken)
			}
		})
	}
	// The requests that passed auth were a GET, an unknown broker, an index out of range
	// and a cancel with nothing pending: none of them changes the settings.
	require.Equal(t, before, e.settings())
}

func TestAuthInsecureMode(t *testing.T) {
	t.Run("no tokens: everything allowed", func(t *testing.T) {
		e := newEnv(t, func(c *config.Config) {
			c.InsecureNoAuth, c.OperatorToken, c.ProducerToken = true, "", ""
		})
		res := e.do(http.MethodGet, "/api/v1/broker", "", nil)
		require.Equal(t, http.StatusOK, res.Status, res.Body)
		e.do(http.MethodPost, "/api/v1/broker/switch/7", "", nil).requireError(t, http.StatusNotFound, "no broker 7")
	})
	t.Run("tokens set: they are required", func(t *testing.T) {
		e := newEnv(t, func(c *config.Config) { c.InsecureNoAuth = true })
		e.do(http.MethodGet, "/api/v1/broker", "", nil).requireError(t, http.StatusUnauthorized, "token")
	})
	t.Run("producer token only: operator routes are closed", func(t *testing.T) {
		e := newEnv(t, func(c *config.Config) { c.OperatorToken = "" })
		e.do(http.MethodGet, "/api/v1/broker", bearer(producerToken), nil).requireError(t, http.StatusForbidden, "")
		e.do(http.MethodGet, "/api/v1/broker", "Bearer ", nil).requireError(t, http.StatusUnauthorized, "")
	})
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	// A state to keep unchanged: a pending switch is on record.
	e.seed(func(st brokerstate.State) brokerstate.State {
		st, _ = st.ApplyNotification(brokerstate.Notification{Index: 1, Host: "rabbit-b.example.com", Vhost: "prod/one",
			SwitchedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, time.Now())
		return st
	})
	before := e.settings()
	require.NotEmpty(t, before[brokerstate.KeyPendingSwitch])

	huge := `{"host": "rabbit-a.example.com", "vhost": "` + strings.Repeat("a", 70<<10) + `", "switchedAt": "2026-02-01T00:00:00Z"}`
	future := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name, body string
		status     int
		msg        string
		// streamed hides the length, so that the cap is met while reading
		streamed bool
	}{
		{"empty body", "", 400, "request body is empty", false},
		{"malformed JSON", `{"host": "rabbit-a.example.com",`, 400, "not valid JSON", false},
		{"not JSON", `host=rabbit-a`, 400, "not valid JSON", false},
		{"array", `[1, 2]`, 400, "must be a JSON object", false},
		{"null", `null`, 400, "host is required", false},
		{"two objects", `{"host":"a"} {"host":"b"}`, 400, "exactly one JSON object", false},
		{"trailing garbage", `{"host": "rabbit-a.example.com", "switchedAt": "2026-02-01T00:00:00Z"} x`, 400, "exactly one JSON object", false},
		{"unknown field", `{"host": "rabbit-a.example.com", "switchedAt": "2026-02-01T00:00:00Z", "index": 0}`, 400, `unknown field "index"`, false},
		// openapi.yaml promises exact names and no additional properties; encoding/json
		// alone matches names regardless of case and keeps the last of duplicate keys.
		{"name in capitals", `{"HOST": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z"}`, 400, `unknown field "HOST": names are case-sensitive`, false},
		{"name in other case", `{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedat": "2026-02-01T00:00:00Z"}`, 400, `unknown field "switchedat"`, false},
		{"duplicate host", `{"host": "rabbit-c.example.com", "host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z"}`, 400, `the field "host" twice`, false},
		{"duplicate in other case", `{"host": "rabbit-a.example.com", "Host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z"}`, 400, `unknown field "Host"`, false},
		{"duplicate switchedAt", `{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z", "switchedAt": "2026-02-02T00:00:00Z"}`, 400, `the field "switchedAt" twice`, false},
		{"duplicate null vhost", `{"host": "rabbit-a.example.com", "vhost": null, "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z"}`, 400, `the field "vhost" twice`, false},
		{"missing host", `{"vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z"}`, 400, "host is required", false},
		{"empty host", `{"host": "", "switchedAt": "2026-02-01T00:00:00Z"}`, 400, "host is required", false},
		{"host not a string", `{"host": 5, "switchedAt": "2026-02-01T00:00:00Z"}`, 400, "field host must be a string", false},
		{"missing switchedAt", `{"host": "rabbit-a.example.com", "vhost": "vh-a"}`, 400, "switchedAt is required", false},
		{"unparsable switchedAt", `{"host": "rabbit-a.example.com", "switchedAt": "yesterday"}`, 400, "not an RFC 3339 time", false},
		{"switchedAt without zone", `{"host": "rabbit-a.example.com", "switchedAt": "2026-02-01T00:00:00"}`, 400, "not an RFC 3339 time", false},
		{"switchedAt as number", `{"host": "rabbit-a.example.com", "switchedAt": 1767225600}`, 400, "field switchedAt must be a string", false},
		{"switchedAt far in the future", `{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "` + future + `"}`, 422, "ahead of this server's clock", false},
		{"unknown host", `{"host": "rabbit-c.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z"}`, 404, "no configured broker", false},
		{"known host, other vhost", `{"host": "rabbit-a.example.com", "vhost": "vh-b", "switchedAt": "2026-02-01T00:00:00Z"}`, 404, "no configured broker", false},
		{"known host, default vhost not configured", `{"host": "rabbit-a.example.com", "switchedAt": "2026-02-01T00:00:00Z"}`, 404, "no configured broker", false},
		{"from without host", `{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z", "from": {"vhost": "vh-a"}}`, 400, "from.host is required", false},
		{"from as string", `{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z", "from": "rabbit-b"}`, 400, "field from must be", false},
		{"from with unknown field", `{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-02-01T00:00:00Z", "from": {"host": "x", "port": 1}}`, 400, "port", false},
		{"oversized body", huge, 413, "larger than 65536 bytes", false},
		{"oversized body, streamed", huge, 413, "larger than 65536 bytes", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = jsonBody(tc.body)
			if tc.streamed {
				body = io.MultiReader(body) // hides the length from httptest
			}
			res := e.do(http.MethodPost, "/api/v1/broker/pending-switch", bearer(producerToken), body)
			res.requireError(t, tc.status, tc.msg)
			require.Equal(t, before, e.settings())
		})
	}

	indexCases := []struct {
		path   string
		status int
		msg    string
	}{
		{"/api/v1/broker/switch/abc", 400, `broker index "abc" is not an integer`},
		{"/api/v1/broker/switch/1.5", 400, "not an integer"},
		{"/api/v1/broker/switch/99999999999999999999", 400, "not an integer"},
		{"/api/v1/broker/switch/-1", 404, "no broker -1"},
		{"/api/v1/broker/switch/2", 404, "no broker 2: 2 brokers are configured (0 to 1)"},
	}
	for _, tc := range indexCases {
		t.Run(tc.path, func(t *testing.T) {
			e.do(http.MethodPost, tc.path, bearer(operatorToken), nil).requireError(t, tc.status, tc.msg)
			require.Equal(t, before, e.settings())
		})
	}

	routeCases := []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/api/v1/nothing", 404, ""},
		{http.MethodGet, "/", 404, ""},
		{http.MethodGet, "/api/v1/broker/", 404, ""},
		{http.MethodPost, "/api/v1/broker/switch/", 404, ""},
		{http.MethodPost, "/api/v1/broker/switch", 404, ""},
		{http.MethodPut, "/api/v1/broker", 405, "GET"},
		{http.MethodGet, "/api/v1/broker/pending-switch", 405, "POST, DELETE"},
		{http.MethodPatch, "/api/v1/broker/pending-switch", 405, "POST, DELETE"},
		{http.MethodDelete, "/api/v1/broker/switch/1", 405, "POST"},
		{http.MethodPost, "/healthz", 405, "GET"},
	}
	for _, tc := range routeCases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			res := e.do(tc.method, tc.path, bearer(operatorToken), nil)
			if tc.status == 404 {
				res.requireError(t, 404, "no such endpoint")
			} else {
				res.requireError(t, 405, "method not allowed")
				require.Equal(t, tc.allow, res.Header.Get("Allow"))
			}
			require.Equal(t, before, e.settings())
		})
	}
	e.requireNoWorkflow()
}

func TestStaleNotificationsChangeNothing(t *testing.T) {
	e := newEnv(t)
	seen := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e.seed(func(st brokerstate.State) brokerstate.State {
		st, _ = st.ApplyNotification(brokerstate.Notification{Index: 1, Host: "rabbit-b.example.com", Vhost: "prod/one", SwitchedAt: seen}, time.Now())
		return st
	})
	before := e.settings()

	for name, at := range map[string]time.Time{
		"duplicate":             seen,
		"same instant, offset":  seen.In(time.FixedZone("CET", 3600)),
		"older (out of order)":  seen.Add(-time.Minute),
		"much older, to broker": seen.Add(-24 * time.Hour),
	} {
		t.Run(name, func(t *testing.T) {
			for _, target := range [][2]string{{"RABBIT-A.example.com", "vh-a"}, {"rabbit-b.example.com", "prod%2Fone"}} {
				if at.Equal(seen) && target[1] == "vh-a" {
					continue // another broker at the mark is a new hop (TestTwoRotationsInOneSecond)
				}
				res := e.notify(target[0], target[1], at)
				require.Equal(t, http.StatusOK, res.Status, res.Body)
				m := res.JSON(t)
				require.Equal(t, "stale", m["ignored"])
				require.Equal(t, "stale", m["outcome"])
				requireProducerAnswer(t, m)
				// An out-of-order notification may stay on the producer's trail, where it places
				// later ones; the state the service acts on does not change.
				after := e.settings()
				delete(after, brokerstate.KeyProducerTrail)
				require.Equal(t, withoutTrail(before), after)
			}
		})
	}
	e.requireNoWorkflow()
}

// withoutTrail is a copy of settings without the producer's trail.
func withoutTrail(settings map[string]string) map[string]string {
	out := maps.Clone(settings)
	delete(out, brokerstate.KeyProducerTrail)
	return out
}

func TestForceSwitchNotCommittedInTime(t *testing.T) {
	e := newEnv(t)
	// No worker runs: the order is sent and the workflow started, but nothing commits.
	e.deps.CommitWait = 500 * time.Millisecond
	e.router = Router(e.deps)
	before := e.settings()
	res := e.do(http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil)
	res.requireError(t, http.StatusGatewayTimeout, "the switch to broker 1 was sent to the workflow but is not committed yet")
	require.Equal(t, before, e.settings())

	desc, err := e.client.DescribeWorkflowExecution(t.Context(), "broker-switch", "")
	require.NoError(t, err, "the order starts the workflow")
	require.Equal(t, "api-test", desc.GetExecutionConfig().GetTaskQueue().GetName())
}

func TestCancelWithNothingPending(t *testing.T) {
	e := newEnv(t)
	before := e.settings()
	for range 2 {
		res := e.do(http.MethodDelete, "/api/v1/broker/pending-switch", bearer(operatorToken), nil)
		require.Equal(t, http.StatusOK, res.Status, res.Body)
		m := res.JSON(t)
		require.Equal(t, true, m["committed"])
		require.Nil(t, m["pendingSwitch"])
	}
	require.Equal(t, before, e.settings())
}

func TestGetBrokerWithoutWorkflow(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.store.RecordDrainCheck(t.Context(), brokerstate.DrainCheck{
		BrokerIndex: 0, Reachable: false, CheckedAt: time.Now().UTC(),
		// The drain check activity scrubbed it (activities' TestADrainCheckErrorCarriesNoBrokerPassword).
		Error: "dial tcp rabbit-a.example.com:5672: connection refused",
	}))
	res := e.do(http.MethodGet, "/api/v1/broker", "token "+operatorToken, nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.NotContains(t, res.Body, brokerPass)
	require.NotContains(t, res.Body, "user:")
	require.NotContains(t, res.Body, "amqps://", "no broker URL is shown")

	m := res.JSON(t)
	require.Equal(t, []any{
		map[string]any{"index": 0.0, "host": "rabbit-a.example.com", "port": 5672.0, "vhost": "vh-a", "active": true, "onRoute": false},
		map[string]any{"index": 1.0, "host": "rabbit-b.example.com", "port": 5671.0, "vhost": "prod/one", "active": false, "onRoute": false, "leftoverOrder": 1.0},
	}, m["brokers"], "a spare shows its place in the Leftover Drain")
	require.EqualValues(t, 0, m["activeIndex"])
	require.Nil(t, m["pendingSwitch"])
	require.Nil(t, m["lastSwitch"])
	check := m["lastDrainCheck"].(map[string]any)
	require.Equal(t, false, check["reachable"])
	require.Equal(t, "dial tcp rabbit-a.example.com:5672: connection refused", check["error"])
	require.Equal(t, map[string]any{
		"id": "broker-switch", "found": false, "status": "NotFound",
		"error": "no BrokerSwitch workflow yet: a worker or the next notification or order starts it",
	}, m["workflow"])
}

// After a cancel, the producer's broker is shown as ahead of the active broker: the
// Leftover Drain reads it only once the active broker's queue is empty.
func TestGetBrokerShowsASpareAheadOfTheActiveBroker(t *testing.T) {
	e := newEnv(t)
	e.seed(func(st brokerstate.State) brokerstate.State {
		at := time.Now().UTC().Add(-time.Minute)
		st, _ = st.ApplyNotification(brokerstate.Notification{Index: 1, Host: "rabbit-b.example.com", Vhost: "prod/one", SwitchedAt: at}, at)
		return st.CancelPending(time.Time{}, time.Now())
	})
	res := e.do(http.MethodGet, "/api/v1/broker", "token "+operatorToken, nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	b := res.JSON(t)["brokers"].([]any)[1].(map[string]any)
	require.Equal(t, true, b["aheadOfActive"], res.Body)
	require.Equal(t, 1.0, b["leftoverOrder"])
	require.Equal(t, false, b["onRoute"])
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	res := e.do(http.MethodGet, "/healthz", "", nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.JSONEq(t, `{"status":"ok"}`, res.Body)

	res = e.do(http.MethodGet, "/readyz", "", nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.JSONEq(t, `{"status":"ok","checks":{"postgres":"ok","temporal":"ok"}}`, res.Body)

	t.Run("postgres down", func(t *testing.T) {
		deps := e.deps
		sqlDB, err := closedDB(t, e).DB()
		require.NoError(t, err)
		deps.Ping = sqlDB.PingContext
		d := &env{t: t, router: Router(deps)}
		res := d.do(http.MethodGet, "/readyz", "", nil)
		require.Equal(t, http.StatusServiceUnavailable, res.Status)
		require.JSONEq(t, `{"status":"unavailable","checks":{"postgres":"unavailable","temporal":"ok"}}`, res.Body)
	})
	t.Run("temporal down", func(t *testing.T) {
		deps := e.deps
		deps.Temporal = deadTemporal(t)
		d := &env{t: t, router: Router(deps)}
		res := d.do(http.MethodGet, "/readyz", "", nil)
		require.Equal(t, http.StatusServiceUnavailable, res.Status)
		require.JSONEq(t, `{"status":"unavailable","checks":{"postgres":"ok","temporal":"unavailable"}}`, res.Body)
		require.Equal(t, http.StatusOK, d.do(http.MethodGet, "/healthz", "", nil).Status)
	})
}

// closedDB is a connection pool to the env's database that is closed already, as a
// database that went away fails every query.
func closedDB(t *testing.T, e *env) *gorm.DB {
	t.Helper()
	db, err := models.Open(t.Context(), e.dsn)
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	require.NoError(t, sqlDB.Close())
	return db
}

// deadTemporal is a client of a Temporal that is not there.
func deadTemporal(t *testing.T) client.Client {
	t.Helper()
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Namespace: "nowhere"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestBackendsDown(t *testing.T) {
	e := newEnv(t)
	before := e.settings()

	t.Run("temporal", func(t *testing.T) {
		deps := e.deps
		deps.Temporal = deadTemporal(t)
		deps.CommitWait = time.Second
		d := &env{t: t, router: Router(deps)}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		d.doCtx(ctx, http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil).
			requireError(t, http.StatusBadGateway, "could not be handed to the workflow engine")
		ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		res := d.doCtx(ctx, http.MethodGet, "/api/v1/broker", bearer(operatorToken), nil)
		require.Equal(t, http.StatusOK, res.Status, "the state in Postgres is shown without Temporal: %s", res.Body)
		wf := res.JSON(t)["workflow"].(map[string]any)
		require.Equal(t, "Unknown", wf["status"])
		require.Equal(t, "Temporal did not answer", wf["error"])
		require.Equal(t, before, e.settings(), "orders that only the workflow carries out change nothing")

		// A notification is recorded in Postgres first: the workflow finds it on its own
		// once Temporal is back, so the producer is told so rather than asked to resend.
		ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		res = d.doCtx(ctx, http.MethodPost, "/api/v1/broker/pending-switch", bearer(producerToken),
			jsonBody(`{"host": "rabbit-b.example.com", "vhost": "prod/one", "switchedAt": "2026-02-01T00:00:00Z"}`))
		res.requireError(t, http.StatusBadGateway, "was recorded")
		require.NotContains(t, res.Body, "127.0.0.1")
		st, err := e.deps.Store.LoadAllowingRemoved(t.Context())
		require.NoError(t, err)
		require.NotNil(t, st.Pending, "the Pending Switch is in Postgres")
		require.Equal(t, 1, st.Pending.Target().Index)

		// Cancelling it is the workflow's job: without Temporal, nothing changes.
		ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		d.doCtx(ctx, http.MethodDelete, "/api/v1/broker/pending-switch", bearer(operatorToken), nil).
			requireError(t, http.StatusBadGateway, "could not be handed to the workflow engine")
		after, err := e.deps.Store.LoadAllowingRemoved(t.Context())
		require.NoError(t, err)
		require.Equal(t, st, after)
		e.restoreSettings(before)
	})
	t.Run("postgres", func(t *testing.T) {
		deps := e.deps
		deps.Store = brokerstate.NewStore(closedDB(t, e), e.cfg.Brokers)
		d := &env{t: t, router: Router(deps)}
		res := d.do(http.MethodGet, "/api/v1/broker", bearer(operatorToken), nil)
		res.requireError(t, http.StatusServiceUnavailable, "the broker state cannot be read")
		require.NotContains(t, res.Body, "sql")
		d.notify("rabbit-b.example.com", "prod/one", time.Now()).
			requireError(t, http.StatusServiceUnavailable, "the notification could not be recorded")
		d.do(http.MethodPost, "/api/v1/broker/switch/1", bearer(operatorToken), nil).
			requireError(t, http.StatusServiceUnavailable, "the broker state cannot be read")
		require.Equal(t, before, e.settings())
		e.requireNoWorkflow()
	})
}

// requireProducerAnswer checks that a notification's answer holds only what the producer
// needs: no route, drain counts or errors, which are the operator's.
func requireProducerAnswer(t *testing.T, m map[string]any) {
	t.Helper()
	for k := range m {
		require.Contains(t, []string{"outcome", "ignored", "target"}, k, "the producer's answer carries %s", k)
	}
}

// countingTemporal counts the health calls that reach the real Temporal client.
type countingTemporal struct {
	TemporalClient
	health *atomic.Int64
}

func (c countingTemporal) CheckHealth(ctx context.Context, req *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	c.health.Add(1)
	return c.TemporalClient.CheckHealth(ctx, req)
}

// /readyz needs no token, and in `serve` its ping shares the pool with ingestion: a burst
// of probes costs one round of checks per metrics.DefaultReadyMaxAge (5 s), not one each.
func TestReadyzIsCached(t *testing.T) {
	e := newEnv(t)
	sqlDB, err := e.db.DB()
	require.NoError(t, err)
	var pings, health atomic.Int64
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	deps := e.deps
	deps.Ping = func(ctx context.Context) error { pings.Add(1); return sqlDB.PingContext(ctx) }
	deps.Temporal = countingTemporal{TemporalClient: e.client, health: &health}
	deps.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	router := Router(deps)

	const probes = 100
	burst := func() []int {
		statuses := make([]int, probes)
		var wg sync.WaitGroup
		for i := range probes {
			wg.Go(func() {
				rec := httptest.NewRecorder()
				router.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/readyz", nil))
				statuses[i] = rec.Code
			})
		}
		wg.Wait()
		return statuses
	}
	for _, status := range burst() {
		require.Equal(t, http.StatusOK, status)
	}
	require.EqualValues(t, 1, pings.Load(), "database pings for %d probes within the max age", probes)
	require.EqualValues(t, 1, health.Load(), "Temporal health calls for %d probes within the max age", probes)

	clock.Add(int64(4 * time.Second))
	burst()
	require.EqualValues(t, 1, pings.Load(), "an answer younger than the max age is reused")
	clock.Add(int64(2 * time.Second))
	burst()
	require.EqualValues(t, 2, pings.Load(), "an answer older than the max age is checked again, once")
	require.EqualValues(t, 2, health.Load())
}

// The producer-facing port serves only the API: /metrics, with the version, namespace,
// task queue and pool statistics, is served on METRICS_ADDR.
func TestMetricsAreNotOnTheAPIPort(t *testing.T) {
	e := newEnv(t)
	for _, auth := range []string{"", bearer(operatorToken)} {
		e.do(http.MethodGet, "/metrics", auth, nil).requireError(t, http.StatusNotFound, "no such endpoint")
	}
}

// A flood of notifications is refused past the burst with 429 and Retry-After, per token,
// before it costs a transaction or a signal.
func TestNotificationsAreRateLimitedPerToken(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	e := newEnv(t, func(c *config.Config) { c.NotificationRate, c.NotificationBurst = 0.5, 3 })
	e.deps.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	e.router = Router(e.deps)
	before := e.settings()
	post := func(token string) response {
		return e.do(http.MethodPost, "/api/v1/broker/pending-switch", bearer(token), jsonBody(unknownPair))
	}
	for range 3 {
		post(producerToken).requireError(t, http.StatusNotFound, "no configured broker")
	}
	res := post(producerToken)
	res.requireError(t, http.StatusTooManyRequests, "too many notifications")
	require.Equal(t, "2", res.Header.Get("Retry-After"), "one notification every 2 s")
	// Refusals do not push the producer further back.
	post(producerToken).requireError(t, http.StatusTooManyRequests, "send it again after 2 s")
	// Another token has a bucket of its own.
	post(operatorToken).requireError(t, http.StatusNotFound, "no configured broker")

	clock.Add(int64(2 * time.Second))
	post(producerToken).requireError(t, http.StatusNotFound, "no configured broker")
	post(producerToken).requireError(t, http.StatusTooManyRequests, "too many notifications")
	require.Equal(t, before, e.settings())
	e.requireNoWorkflow()
}

// A notification that says where the producer came from chains the trail: C's word from
// B, with the producer last known on A, puts B on the route before C at once; a from the
// service does not know is passed over.
func TestANotificationFromPutsTheHopBeforeItOnTheRoute(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		eps, err := broker.ParseEndpoints(fakeBrokers + ",amqp://user:" + brokerPass + "@rabbit-c.example.com/vh-c")
		require.NoError(t, err)
		c.Brokers = eps
	})
	at := time.Now().UTC().Truncate(time.Second)
	post := func(host, vhost, fromHost, fromVhost string) response {
		body := fmt.Sprintf(`{"host": %q, "vhost": %q, "switchedAt": %q, "from": {"host": %q, "vhost": %q}}`,
			host, vhost, at.Format(time.RFC3339), fromHost, fromVhost)
		return e.do(http.MethodPost, "/api/v1/broker/pending-switch", bearer(producerToken), strings.NewReader(body))
	}
	res := post("rabbit-c.example.com", "vh-c", "RABBIT-B.example.com", "prod%2Fone")
	require.Equal(t, http.StatusAccepted, res.Status, res.Body)
	st := e.state()
	require.NotNil(t, st.Pending)
	require.Len(t, st.Pending.Route, 2)
	require.Equal(t, 1, st.Pending.Route[0].Index, "B, implied by C's from")
	require.True(t, st.Pending.Route[0].Implied)
	require.Equal(t, 2, st.Pending.Route[1].Index)

	unknown := newEnv(t)
	res = func() response {
		body := fmt.Sprintf(`{"host": "rabbit-b.example.com", "vhost": "prod/one", "switchedAt": %q, "from": {"host": "rabbit-z.example.com"}}`,
			at.Format(time.RFC3339))
		return unknown.do(http.MethodPost, "/api/v1/broker/pending-switch", bearer(producerToken), strings.NewReader(body))
	}()
	require.Equal(t, http.StatusAccepted, res.Status, res.Body)
	require.Len(t, unknown.state().Pending.Route, 1, "taken as if from were missing")
}
