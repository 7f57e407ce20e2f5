package metrics

import (
	"database/sql"
	"fmt"

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
// statistics of db's connection pool (go_sql_*{db_name="brokerswitch"}), which show a pool
// that waits for connections before Postgres runs out of them.
func RegisterRuntime(reg prometheus.Registerer, info BuildInfo, db *sql.DB) error {
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
		collectors.NewDBStatsCollector(db, namespace),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: register the runtime collectors: %w", err)
		}
	}
	return nil
}
