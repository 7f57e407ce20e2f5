//go:build integration

package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/healthchecks"
)

// A failed window pings /fail with the failure's kind only: the check lives at a third
// party, and the error's text names the broker's host and vhost.
func TestAFailedWindowPingsOnlyTheKind(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.URL.Path+" "+string(b))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)

	// A port nothing listens on: the broker is unreachable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	eps, err := broker.ParseEndpoints("amqp://user:pw@" + addr + "/secret-vhost")
	require.NoError(t, err)
	pool := broker.NewPool(eps, nil, broker.PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })

	store := &brokerstate.Store{DB: migratedDB(t), Brokers: []brokerstate.Ref{{Host: eps[0].Host, Vhost: eps[0].Vhost}}}

	pings := &healthchecks.Pinger{URL: srv.URL + "/check"}
	w := &Window{Pool: pool, Prefetch: 10, State: store, Topology: broker.Topology{Queues: []string{"issues"}, RetryTTL: time.Minute}, Pings: pings}
	err = w.Consume(t.Context(), ConsumeInput{Queue: "issues", BrokerIndex: 0, Window: time.Minute})
	require.ErrorIs(t, err, broker.ErrUnreachable)
	require.Contains(t, err.Error(), "secret-vhost", "the error itself keeps the detail for the logs")
	pings.Wait()

	mu.Lock()
	defer mu.Unlock()
	// Pings go out in the background, in any order.
	require.ElementsMatch(t, []string{"/check/start ", "/check/fail broker unreachable"}, bodies)
}

func TestFailureKinds(t *testing.T) {
	pgErr := fmt.Errorf("apply delivery 1234-abcd on db.example.com: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement"})
	require.Equal(t, healthchecks.Kind("database error 57014"), failureKind(pgErr))
	require.Equal(t, healthchecks.Kind("timeout"), failureKind(fmt.Errorf("x: %w", context.DeadlineExceeded)))
	require.Equal(t, healthchecks.Kind("window failed"), failureKind(errors.New("consume issues on #0 rabbit:5672/vh: boom")))
}
