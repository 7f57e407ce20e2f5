package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// Serve runs the API on Settings.HTTPAddr until ctx ends, then shuts down gracefully. It
// refuses to start without tokens unless development mode was asked for.
func Serve(ctx context.Context, deps Deps) error {
	if err := checkDeps(deps); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", deps.Settings.HTTPAddr)
	if err != nil {
		return fmt.Errorf("api: listen on %s: %w", deps.Settings.HTTPAddr, err)
	}
	return serve(ctx, deps, ln)
}

// checkDeps refuses a configuration the API cannot run safely with.
func checkDeps(deps Deps) error {
	switch {
	case deps.Settings.OperatorToken == "" && deps.Settings.ProducerToken == "" && !deps.Settings.InsecureNoAuth:
		return errors.New("api: OPERATOR_TOKEN and PRODUCER_TOKEN are both empty; set them, or API_INSECURE_NO_AUTH=true for local development")
	case deps.Temporal == nil:
		return errors.New("api: no Temporal client")
	case deps.Store == nil:
		return errors.New("api: no broker state store")
	case deps.Ping == nil:
		return errors.New("api: no database ping")
	}
	return nil
}

// serve runs the API on ln until ctx ends; ln is closed when it returns.
func serve(ctx context.Context, deps Deps, ln net.Listener) error {
	deps = deps.withDefaults()
	if newAuthenticator(deps.Settings).open {
		deps.Logger.WarnContext(ctx, "API runs WITHOUT authentication (API_INSECURE_NO_AUTH): anyone who reaches it may switch brokers; local development only")
	}
	// Writes must outlast a forced switch's commit wait.
	srv := metrics.NewHTTPServer(Router(deps), deps.CommitWait+15*time.Second)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	deps.Logger.InfoContext(ctx, "API listening", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	// ctx is done: shutdown needs a context of its own.
	// Requests in flight, a forced switch's wait included, may finish.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deps.CommitWait+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("api: serve: %w", err)
	}
	deps.Logger.InfoContext(ctx, "API stopped")
	return nil
}
