//go:build integration

package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/config"
)

func TestServeRefusesUnsafeConfig(t *testing.T) {
	e := newEnv(t)
	noAuth := e.deps
	noAuth.Settings.OperatorToken, noAuth.Settings.ProducerToken = "", ""
	require.ErrorContains(t, Serve(t.Context(), noAuth), "OPERATOR_TOKEN and PRODUCER_TOKEN are both empty")

	noTemporal := e.deps
	noTemporal.Temporal = nil
	require.ErrorContains(t, Serve(t.Context(), noTemporal), "no Temporal client")

	badAddr := e.deps
	badAddr.Settings.HTTPAddr = "256.0.0.1:http"
	require.ErrorContains(t, Serve(t.Context(), badAddr), "listen on 256.0.0.1:http")
}

func TestServeShutsDownWhenContextEnds(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.InsecureNoAuth, c.OperatorToken, c.ProducerToken = true, "", "" })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, e.deps, ln) }()

	res, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.JSONEq(t, `{"status":"ok"}`, string(body))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
	res, err = http.Get("http://" + ln.Addr().String() + "/healthz")
	if err == nil {
		require.NoError(t, res.Body.Close())
	}
	require.Error(t, err, "the listener is closed")
}
