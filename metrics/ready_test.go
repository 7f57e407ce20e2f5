package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ now atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func TestReadinessNamesTheFailingCheckAndCachesTheRound(t *testing.T) {
	t.Parallel()
	var brokerErr atomic.Pointer[error]
	var runs atomic.Int32
	clock := &fakeClock{}
	r := &Readiness{
		Checks: []Check{
			{Name: "postgres", Run: func(context.Context) error { runs.Add(1); return nil }},
			{Name: "broker", Run: func(context.Context) error {
				if p := brokerErr.Load(); p != nil {
					return *p
				}
				return nil
			}},
		},
		MaxAge: 5 * time.Second,
		Now:    clock.Now,
	}
	require.Equal(t, ReadinessAnswer{Status: "ok", Checks: map[string]string{"postgres": "ok", "broker": "ok"}}, r.Ready(t.Context()))

	down := errors.New("dial tcp: connection refused (amqp://user:secret@host)")
	brokerErr.Store(&down)
	// Within MaxAge the cached answer is served and nothing runs again.
	require.Equal(t, "ok", r.Ready(t.Context()).Status)
	require.EqualValues(t, 1, runs.Load())

	clock.Advance(5 * time.Second)
	answer := r.Ready(t.Context())
	require.Equal(t, ReadinessAnswer{Status: "unavailable", Checks: map[string]string{"postgres": "ok", "broker": "unavailable"}}, answer)
	require.EqualValues(t, 2, runs.Load())
}

func TestReadinessTimesOutAHungCheck(t *testing.T) {
	t.Parallel()
	r := &Readiness{
		Checks:  []Check{{Name: "temporal", Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}},
		timeout: 50 * time.Millisecond,
	}
	start := time.Now()
	require.Equal(t, "unavailable", r.Ready(t.Context()).Status)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestServeAnswersReadyzFromItsChecks(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	ready := &Readiness{Checks: []Check{{Name: "temporal", Run: func(context.Context) error {
		if fail.Load() {
			return errors.New("unavailable")
		}
		return nil
	}}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = New(prometheus.NewRegistry()).serve(ctx, ln, nil, ready) }()

	probe := func() (int, ReadinessAnswer) {
		res, err := http.Get("http://" + ln.Addr().String() + "/readyz")
		require.NoError(t, err)
		defer res.Body.Close()
		var a ReadinessAnswer
		require.NoError(t, json.NewDecoder(res.Body).Decode(&a))
		return res.StatusCode, a
	}
	code, a := probe()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", a.Checks["temporal"])
	fail.Store(true)
	code, a = probe()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, ReadinessAnswer{Status: "unavailable", Checks: map[string]string{"temporal": "unavailable"}}, a)
}
