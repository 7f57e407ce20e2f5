//go:build integration

package metrics_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
)

func TestRuntimeCollectorsShowTheBuildAndThePool(t *testing.T) {
	t.Parallel()
	db, err := pgxpool.New(t.Context(), testenv.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, db.Ping(t.Context())) // one connection, now idle in the pool

	reg := prometheus.NewRegistry()
	info := metrics.BuildInfo{Version: "v1.2.3", Revision: "abc123-dirty", GoVersion: "go1.26.8"}
	require.NoError(t, metrics.RegisterRuntime(reg, info, db))

	require.InDelta(t, 1, metricstest.Value(t, reg, "brokerswitch_build_info",
		"version", "v1.2.3", "revision", "abc123-dirty", "goversion", "go1.26.8"), 0)
	require.InDelta(t, 1, metricstest.Value(t, reg, "go_sql_open_connections", "db_name", "brokerswitch"), 0)
	require.InDelta(t, 1, metricstest.Value(t, reg, "go_sql_idle_connections", "db_name", "brokerswitch"), 0)
	require.InDelta(t, 0, metricstest.Value(t, reg, "go_sql_in_use_connections", "db_name", "brokerswitch"), 0)
	require.InDelta(t, float64(db.Config().MaxConns), metricstest.Value(t, reg, "go_sql_max_open_connections", "db_name", "brokerswitch"), 0)
	require.Positive(t, metricstest.Value(t, reg, "go_goroutines"))

	// A second registration in the same registry is an error, not a panic.
	require.Error(t, metrics.RegisterRuntime(reg, info, db))
}
