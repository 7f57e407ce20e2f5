package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Timeouts of every HTTP server the process runs (the API's and the metrics'), so that a
// client that dribbles its request, or stops sending it, holds a goroutine and a
// descriptor no longer than this.
const (
	// serverReadHeaderTimeout bounds the reading of a request's headers.
	serverReadHeaderTimeout = 5 * time.Second
	// serverReadTimeout bounds the reading of a whole request, body included.
	serverReadTimeout = 15 * time.Second
	// serverIdleTimeout bounds how long a kept-alive connection waits for its next request.
	serverIdleTimeout = 60 * time.Second
	// serverMaxHeaderBytes bounds a request's headers.
	serverMaxHeaderBytes = 16 << 10
)

// NewHTTPServer is an http.Server for h with the process's read and idle timeouts; each
// server sets its own write timeout, the longest its answers may take.
func NewHTTPServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: serverReadHeaderTimeout,
		ReadTimeout:       serverReadTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes,
	}
}

// Serve runs a small HTTP server on addr with /metrics, /healthz (the process answers:
// for a liveness probe) and, when ready is not nil, /readyz (its checks pass: for a
// readiness probe) until ctx ends. Every long-running command serves its metrics here,
// apart from the API's port.
func (m *Metrics) Serve(ctx context.Context, addr string, logger *slog.Logger, ready *Readiness) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s (METRICS_ADDR): %w", addr, err)
	}
	return m.serve(ctx, ln, logger, ready)
}

func (m *Metrics) serve(ctx context.Context, ln net.Listener, logger *slog.Logger, ready *Readiness) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	if ready != nil {
		mux.Handle("GET /readyz", ready)
	}
	srv := NewHTTPServer(mux, 30*time.Second)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.InfoContext(ctx, "metrics listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("metrics: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", err)
	}
	return nil
}
