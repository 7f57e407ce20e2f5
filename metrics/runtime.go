package metrics

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// BuildInfo says which build a process runs; brokerswitch_build_info carries it as labels.
type BuildInfo struct {
	Version   string // the release, with the build (git describe) as SemVer metadata: 1.1.0+e701bf5
	Revision  string // the commit, "-dirty" when built from a modified tree
	GoVersion string
}

// RegisterRuntime registers with reg the collectors about the process rather than its
// work: brokerswitch_build_info, the Go runtime (go_*), the process (process_*) and the
// statistics of the process's connection pool (go_sql_*{db_name="brokerswitch"}), which
// show a pool that waits for connections before Postgres runs out of them.
func RegisterRuntime(reg prometheus.Registerer, info BuildInfo, db *pgxpool.Pool) error {
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the labels say which build this process runs: version, revision (commit) and goversion.",
		ConstLabels: prometheus.Labels{"version": info.Version, "revision": info.Revision, "goversion": info.GoVersion},
	})
	build.Set(1)
	for _, c := range []prometheus.Collector{
		build,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		poolCollector{pool: db},
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: register the runtime collectors: %w", err)
		}
	}
	return nil
}

// poolCollector serves a pgx pool's statistics under the names and label that
// collectors.NewDBStatsCollector gives a database/sql pool's, the ones Go programs'
// dashboards know.
type poolCollector struct{ pool *pgxpool.Pool }

var poolLabels = prometheus.Labels{"db_name": namespace}

var (
	poolMaxOpen = prometheus.NewDesc("go_sql_max_open_connections", "Maximum number of open connections to the database.", nil, poolLabels)
	poolOpen    = prometheus.NewDesc("go_sql_open_connections", "The number of established connections both in use and idle.", nil, poolLabels)
	poolInUse   = prometheus.NewDesc("go_sql_in_use_connections", "The number of connections currently in use.", nil, poolLabels)
	poolIdle    = prometheus.NewDesc("go_sql_idle_connections", "The number of idle connections.", nil, poolLabels)
	poolWaits   = prometheus.NewDesc("go_sql_wait_count_total", "The total number of connections waited for.", nil, poolLabels)
	poolWaited  = prometheus.NewDesc("go_sql_wait_duration_seconds_total", "The total time blocked waiting for a new connection.", nil, poolLabels)
)

// Describe sends the descriptors of the pool's metrics.
func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolMaxOpen, poolOpen, poolInUse, poolIdle, poolWaits, poolWaited} {
		ch <- d
	}
}

// Collect sends the pool's statistics now.
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolMaxOpen, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(poolOpen, prometheus.GaugeValue, float64(s.TotalConns()))
	ch <- prometheus.MustNewConstMetric(poolInUse, prometheus.GaugeValue, float64(s.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(s.IdleConns()))
	ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaited, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
}
