//go:build integration

package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// temporal is the dev server of this test binary, started by TestMain.
var temporal *testenv.Temporal

func TestMain(m *testing.M) { testenv.MainWithTemporal(m, &temporal) }

// env is one test's API on its own Postgres database and Temporal namespace.
type env struct {
	t      *testing.T
	dsn    string
	cfg    config.Config
	db     *gorm.DB
	store  *brokerstate.Store
	client client.Client
	deps   Deps
	router http.Handler
}

// newEnv builds the API on a fresh database, with fake brokers unless urls are given.
func newEnv(t *testing.T, modify ...func(*config.Config)) *env {
	t.Helper()
	eps, err := broker.ParseEndpoints(fakeBrokers)
	require.NoError(t, err)
	// The service's defaults, as a worker started by a test needs them all.
	cfg, err := config.FromEnv(func(string) string { return "" })
	require.NoError(t, err)
	cfg.Brokers, cfg.TaskQueue, cfg.Queues = eps, "api-test", []string{"pull_requests"}
	cfg.DrainCheckInterval, cfg.ConsumerWindow, cfg.Prefetch = 200*time.Millisecond, time.Minute, 10
	cfg.MaxRetryCycles, cfg.LeftoverDrainCap = 3, 10
	cfg.OperatorToken, cfg.ProducerToken = operatorToken, producerToken
	// No rate limit: the tests that want one set it.
	cfg.NotificationRate = 0
	for _, m := range modify {
		m(&cfg)
	}
	db, dsn := modelstest.NewDB(t)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	_, c := temporal.Namespace(t)

	e := &env{
		t:      t,
		dsn:    dsn,
		cfg:    cfg,
		db:     db,
		store:  brokerstate.NewStore(db, cfg.Brokers),
		client: c,
	}
	e.deps = Deps{
		Settings:   settingsOf(cfg),
		Temporal:   c,
		Store:      e.store,
		Ping:       sqlDB.PingContext,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		CommitWait: waitFor, // a forced switch answers 200 once committed, however slow the machine
	}
	e.router = Router(e.deps)
	return e
}

// testWriter sends the API's log to the test's log, shown only when it fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// response is one answer of the API.
type response struct {
	Status int
	Header http.Header
	Body   string
}

// JSON decodes the body into a map.
func (r response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Body), &m), "body %q", r.Body)
	return m
}

// requireError checks a JSON error answer.
func (r response) requireError(t *testing.T, status int, contains string) {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	require.Equal(t, "application/json; charset=utf-8", r.Header.Get("Content-Type"))
	m := r.JSON(t)
	require.Len(t, m, 1, "an error answer holds only error: %s", r.Body)
	msg, ok := m["error"].(string)
	require.True(t, ok, "body: %s", r.Body)
	require.Contains(t, msg, contains)
}

// do sends a request; auth is the whole Authorization header, "" for none.
func (e *env) do(method, path, auth string, body io.Reader) response {
	e.t.Helper()
	return e.doCtx(e.t.Context(), method, path, auth, body)
}

func (e *env) doCtx(ctx context.Context, method, path, auth string, body io.Reader) response {
	e.t.Helper()
	var reqBody []byte
	if body != nil {
		var err error
		reqBody, err = io.ReadAll(body)
		require.NoError(e.t, err)
		body = bytes.NewReader(reqBody)
	}
	req := httptest.NewRequestWithContext(ctx, method, path, body)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	e.router.ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	requireMatchesOpenAPI(e.t, req, reqBody, res, b)
	return response{Status: res.StatusCode, Header: res.Header, Body: string(b)}
}

func bearer(token string) string { return "Bearer " + token }

// notify posts a notification as the producer.
func (e *env) notify(host, vhost string, at time.Time) response {
	e.t.Helper()
	body := fmt.Sprintf(`{"host": %q, "vhost": %q, "switchedAt": %q}`, host, vhost, at.Format(time.RFC3339Nano))
	return e.do(http.MethodPost, "/api/v1/broker/pending-switch", bearer(producerToken), strings.NewReader(body))
}

// settings reads the settings table, the whole broker state as stored.
func (e *env) settings() map[string]string {
	e.t.Helper()
	var rows []models.Setting
	require.NoError(e.t, e.db.WithContext(e.t.Context()).Order("key").Find(&rows).Error)
	out := map[string]string{}
	for _, r := range rows {
		out[r.Key] = r.Value
	}
	return out
}

// restoreSettings puts the settings table back as settings() read it.
func (e *env) restoreSettings(saved map[string]string) {
	e.t.Helper()
	require.NoError(e.t, e.db.WithContext(e.t.Context()).Exec("DELETE FROM settings").Error)
	for k, v := range saved {
		require.NoError(e.t, e.db.WithContext(e.t.Context()).Create(&models.Setting{Key: k, Value: v, UpdatedAt: time.Now()}).Error)
	}
}

// requireNoWorkflow checks that nothing was signalled: the BrokerSwitch workflow was
// never started in this test's namespace.
func (e *env) requireNoWorkflow() {
	e.t.Helper()
	_, err := e.client.DescribeWorkflowExecution(e.t.Context(), workflows.BrokerSwitchWorkflowID, "")
	var notFound *serviceerror.NotFound
	require.True(e.t, errors.As(err, &notFound), "the BrokerSwitch workflow was started: %v", err)
}

// state reads the broker state from Postgres.
func (e *env) state() brokerstate.State {
	e.t.Helper()
	st, err := e.store.Load(e.t.Context())
	require.NoError(e.t, err)
	return st
}

// seed writes a broker state directly, as an earlier run of the workflow would have.
func (e *env) seed(fn func(brokerstate.State) brokerstate.State) {
	e.t.Helper()
	_, err := e.store.Update(e.t.Context(), func(st brokerstate.State) (brokerstate.State, error) {
		return fn(st), nil
	})
	require.NoError(e.t, err)
}

// jsonBody is a request body from a string.
func jsonBody(s string) io.Reader { return bytes.NewBufferString(s) }

// settingsOf are the API's part of cfg, as the service hands them over.
func settingsOf(cfg config.Config) Settings {
	return Settings{
		Brokers: cfg.Brokers, TaskQueue: cfg.TaskQueue, HTTPAddr: cfg.HTTPAddr,
		OperatorToken: cfg.OperatorToken, ProducerToken: cfg.ProducerToken, InsecureNoAuth: cfg.InsecureNoAuth,
		NotificationMaxClockSkew: cfg.NotificationMaxClockSkew,
		NotificationRate:         cfg.NotificationRate, NotificationBurst: cfg.NotificationBurst,
	}
}
