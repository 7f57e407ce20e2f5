package healthchecks

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// server is a fake healthchecks.io that records every ping.
type server struct {
	*httptest.Server
	mu    sync.Mutex
	pings []ping
}

type ping struct {
	path, rid, body string
}

func newServer(t *testing.T, status int) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.pings = append(s.pings, ping{path: r.URL.Path, rid: r.URL.Query().Get("rid"), body: string(body)})
		s.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) got() []ping {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ping(nil), s.pings...)
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestARunPingsStartThenSuccessWithOneRunID(t *testing.T) {
	t.Parallel()
	s := newServer(t, http.StatusOK)
	p := &Pinger{URL: s.URL + "/check-uuid"}
	run := p.Start(t.Context())
	p.Wait()
	run.Success(t.Context())
	p.Wait()

	got := s.got()
	require.Len(t, got, 2)
	require.Equal(t, "/check-uuid/start", got[0].path)
	require.Equal(t, "/check-uuid", got[1].path)
	require.Regexp(t, uuidV4, got[0].rid)
	require.Equal(t, got[0].rid, got[1].rid)

	other := p.Start(t.Context())
	p.Wait()
	other.Fail(t.Context(), "broker unreachable")
	p.Wait()
	got = s.got()
	require.Len(t, got, 4)
	require.Equal(t, "/check-uuid/fail", got[3].path)
	require.Equal(t, "broker unreachable", got[3].body)
	require.NotEqual(t, got[0].rid, got[3].rid, "each window is its own run")
}

func TestNoURLNoPings(t *testing.T) {
	t.Parallel()
	var nilPinger *Pinger
	run := nilPinger.Start(t.Context())
	run.Success(t.Context())
	run.Fail(t.Context(), "x")
	nilPinger.Fail(t.Context(), "x")
	nilPinger.Wait()

	off := &Pinger{}
	off.Start(t.Context()).Success(t.Context())
	off.Wait()
}

// A ping that cannot be delivered is a warning that never names the check's URL.
func TestAnUndeliveredPingIsAWarningWithoutTheURL(t *testing.T) {
	t.Parallel()
	s := newServer(t, http.StatusInternalServerError)
	var logs bytes.Buffer
	var failures int
	var mu sync.Mutex
	p := &Pinger{
		URL:       s.URL + "/secret-check-uuid",
		Logger:    slog.New(slog.NewJSONHandler(&logs, nil)),
		OnFailure: func() { mu.Lock(); failures++; mu.Unlock() },
	}
	p.Start(t.Context()).Success(t.Context())
	p.Wait()

	down := &Pinger{URL: "http://127.0.0.1:1/secret-check-uuid", Logger: p.Logger, OnFailure: p.OnFailure}
	down.Fail(t.Context(), "boom")
	down.Wait()

	mu.Lock()
	require.Equal(t, 3, failures)
	mu.Unlock()
	require.Contains(t, logs.String(), "healthchecks ping not delivered")
	require.NotContains(t, logs.String(), "secret-check-uuid")
}
