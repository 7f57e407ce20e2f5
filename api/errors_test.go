//go:build integration

package api

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/errorqueue"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/operator"
)

// newErrorsEnv is the API with the -error queues of a real broker behind it: one queue,
// issues, whose -error holds a message per id given.
func newErrorsEnv(t *testing.T, ids ...string) *env {
	t.Helper()
	amqpURL := testenv.NewVhost(t)
	eps, err := broker.ParseEndpoints(amqpURL)
	require.NoError(t, err)
	e := newEnv(t, func(c *config.Config) { c.Brokers, c.Queues = eps, []string{"issues"} })
	pool := broker.NewPool(eps, slog.New(slog.DiscardHandler), broker.PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })
	topo := broker.Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: broker.QueueType(testenv.QueueType())}
	require.NoError(t, pool.DeclareTopology(t.Context(), 0, topo))
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	for _, id := range ids {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "issues-error", true, false, amqp.Publishing{
			Headers: amqp.Table{"x-github-event": "issues", "x-github-delivery": id,
				broker.HeaderErrorReason: "malformed delivery: body is not valid JSON", broker.HeaderErrorAt: time.Now().UTC().Format(time.RFC3339)},
			MessageId: id, Body: []byte(`{"action":"opened"`),
		})
		require.NoError(t, err)
		require.True(t, dc.Wait())
	}
	e.deps.Errors = &errorqueue.Service{Brokers: pool, DB: e.db, Queues: []string{"issues"}, Logger: e.deps.Logger}
	e.router = Router(e.deps)
	return e
}

// Every -error route answers as openapi.yaml says (the helper checks each exchange), for
// the operator only; a bad filter is 400, an unknown id or a filter that matches nothing
// 404, a purge without confirm 400, and the message stays until purged.
func TestTheErrorRoutesListShowRequeueAndPurge(t *testing.T) {
	e := newErrorsEnv(t, "d1", "d2")
	op := bearer(operatorToken)

	res := e.do(http.MethodGet, "/api/v1/errors?queue=issues&limit=1", op, nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	l := res.JSON(t)
	require.Equal(t, 2.0, l["matched"])
	require.Equal(t, true, l["truncated"])

	e.do(http.MethodGet, "/api/v1/errors?queue=nope", op, nil).requireError(t, http.StatusBadRequest, "not one of QUEUES")
	e.do(http.MethodGet, "/api/v1/errors?since=yesterday", op, nil).requireError(t, http.StatusBadRequest, "RFC 3339")
	e.do(http.MethodGet, "/api/v1/errors", bearer(producerToken), nil).requireError(t, http.StatusForbidden, "")

	res = e.do(http.MethodGet, "/api/v1/errors/d2?bodyBytes=5", op, nil)
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	e.do(http.MethodGet, "/api/v1/errors/"+url.PathEscape("no such"), op, nil).requireError(t, http.StatusNotFound, "no such message")

	res = e.do(http.MethodPost, "/api/v1/errors/requeue", op, jsonBody(`{"id": "d1", "dryRun": true}`))
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	require.Equal(t, true, res.JSON(t)["dryRun"])
	e.do(http.MethodPost, "/api/v1/errors/requeue", op, jsonBody(`{"ids": "d1"}`)).requireError(t, http.StatusBadRequest, "unknown field")

	e.do(http.MethodPost, "/api/v1/errors/purge", op, jsonBody(`{"id": "d1"}`)).requireError(t, http.StatusBadRequest, "confirm")
	res = e.do(http.MethodPost, "/api/v1/errors/purge", op, jsonBody(`{"id": "d1", "confirm": true}`))
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	e.do(http.MethodPost, "/api/v1/errors/purge", op, jsonBody(`{"id": "d1", "confirm": true}`)).requireError(t, http.StatusNotFound, "matched no message")

	res = e.do(http.MethodPost, "/api/v1/errors/requeue", op, jsonBody(`{"reason": "malformed"}`))
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	e.do(http.MethodGet, "/api/v1/errors/d2", op, nil).requireError(t, http.StatusNotFound, "no such message")
}

// Without the -error queues' service, the routes say so rather than fail.
func TestTheErrorRoutesWithoutTheServiceAnswer503(t *testing.T) {
	e := newEnv(t)
	e.do(http.MethodGet, "/api/v1/errors", bearer(operatorToken), nil).requireError(t, http.StatusServiceUnavailable, "does not serve")
}

// The binary's commands against this API: list and status print what the broker holds,
// a requeue moves it, and show then says it is gone.
func TestTheOperatorCommandsReadThisAPI(t *testing.T) {
	e := newErrorsEnv(t, "d1")
	srv := httptest.NewServer(e.router)
	t.Cleanup(srv.Close)
	env := map[string]string{"BROKERSWITCH_API": srv.URL, "OPERATOR_TOKEN": operatorToken}
	getenv := func(k string) string { return env[k] }
	var out bytes.Buffer
	require.NoError(t, operator.Errors(t.Context(), []string{"list"}, getenv, &out, io.Discard))
	require.Regexp(t, `0\s+issues-error\s+1\s+1\s+`, out.String())
	require.Regexp(t, `d1\s+0\s+issues\s+issues\s+18\s+.*malformed delivery`, out.String())

	out.Reset()
	require.NoError(t, operator.Status(t.Context(), nil, getenv, &out, io.Discard))
	require.Contains(t, out.String(), "pending switch: none")
	require.Regexp(t, `0\s+issues-error\s+1\s+`, out.String())

	out.Reset()
	require.NoError(t, operator.Errors(t.Context(), []string{"requeue", "-id", "d1"}, getenv, &out, io.Discard))
	require.Regexp(t, `0\s+issues\s+malformed\s+1\s+0\s+0\s+0`, out.String())
	err := operator.Errors(t.Context(), []string{"show", "d1"}, getenv, &out, io.Discard)
	require.ErrorContains(t, err, "the API answered 404: no such message")
}
