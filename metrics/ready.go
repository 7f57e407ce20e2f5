package metrics

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// DefaultReadyMaxAge is how long a /readyz answer is reused by default: probes from the
// kubelet and Compose cost one round of checks per period, not one each.
const DefaultReadyMaxAge = 5 * time.Second

// readyTimeout bounds a round of checks, so that a hung dependency answers 503 before the
// orchestrator's probe gives up.
const readyTimeout = 3 * time.Second

// Check is one dependency of readiness: Run returns nil when the dependency answers.
type Check struct {
	Name string
	Run  func(ctx context.Context) error
}

// Readiness answers /readyz from its checks, run concurrently at most once per MaxAge, so
// that probes from several places cost one round of checks, and bounded by Timeout, so a
// hung dependency answers 503 before the probe gives up.
type Readiness struct {
	Checks  []Check
	MaxAge  time.Duration // how long a result is served again; 0 checks every time
	Timeout time.Duration // bounds each round, for the tests; 0 means readyTimeout
	Logger  *slog.Logger  // logs why a check failed; the answer names only which
	Now     func() time.Time

	mu      sync.Mutex
	checked time.Time
	last    ReadinessAnswer
}

// ReadinessAnswer is the body of /readyz: each check is "ok" or "unavailable".
type ReadinessAnswer struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// Ready returns the latest answer, running the checks when it is older than MaxAge.
// Concurrent callers wait for one round instead of starting their own.
func (r *Readiness) Ready(ctx context.Context) ReadinessAnswer {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.checked.IsZero() && now().Sub(r.checked) < r.MaxAge {
		return r.last
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = readyTimeout
	}
	// A probe that disconnects must not cut the round short for the callers waiting on it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	errs := make([]error, len(r.Checks))
	var wg sync.WaitGroup
	for i, c := range r.Checks {
		wg.Go(func() { errs[i] = c.Run(ctx) })
	}
	wg.Wait()

	answer := ReadinessAnswer{Status: "ok", Checks: make(map[string]string, len(r.Checks))}
	for i, c := range r.Checks {
		answer.Checks[c.Name] = "ok"
		if errs[i] != nil {
			answer.Status, answer.Checks[c.Name] = "unavailable", "unavailable"
			if r.Logger != nil {
				r.Logger.WarnContext(ctx, "readiness check failed", "dependency", c.Name, "error", errs[i])
			}
		}
	}
	r.checked, r.last = now(), answer
	return answer
}

// ServeHTTP answers 200 with the checks when all pass, else 503.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	answer := r.Ready(req.Context())
	w.Header().Set("Content-Type", "application/json")
	if answer.Status != "ok" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(answer)
}
