package dashboard

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/temporalmetrics"
)

// prometheusOwn are the series Prometheus writes itself for every target it scrapes.
var prometheusOwn = []string{"up"}

// servedNames are the series names a brokerswitch process serves on /metrics, histogram
// suffixes included: gathered from a registry wired as cmd/brokerswitch wires it
// (RegisterRuntime, metrics.New with StartAtZero, NewErrorQueues, WatchState, the Temporal
// SDK's handler),
// with every SDK metric recorded once through that handler; plus Prometheus' own series.
func servedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	// A pool dials on first use: this one never does.
	db, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.NoError(t, metrics.RegisterRuntime(reg, metrics.BuildInfo{Version: "v", Revision: "r", GoVersion: "go"}, db))
	m := metrics.New(reg)
	m.StartAtZero([]string{"q"}, 2)
	_, err = metrics.NewErrorQueues(reg, []string{"q"}, []string{"other"})
	require.NoError(t, err)
	// The series StartAtZero leaves to their first event: the event label is GitHub's, and
	// a quorum queue's risks and returns exist only where the producer declared one.
	m.Event("q", "push", metrics.OutcomeApplied)
	m.QuorumQueueRisk(0, "q", "delivery_limit", true)
	m.DeliveryLimited("q")
	require.NoError(t, m.WatchState(func(context.Context) (metrics.StateReading, error) {
		return metrics.StateReading{PendingSince: time.Now(), PendingHops: 1,
			LastCheck: &metrics.DrainCheckReading{Counts: map[string]int{"q": 1}, Reachable: true, At: time.Now()}, Consuming: map[string]int{"q": 1}}, nil
	}))

	h, err := temporalmetrics.NewHandler(reg, func(err error) { t.Errorf("the meter refused an SDK metric: %v", err) })
	require.NoError(t, err)
	for _, sm := range sdkMetrics(t) {
		switch sm.kind {
		case "Counter":
			h.Counter(sm.name).Inc(1)
		case "Gauge":
			h.Gauge(sm.name).Update(1)
		case "Timer":
			h.Timer(sm.name).Record(time.Millisecond)
		}
	}

	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, n := range prometheusOwn {
		names[n] = true
	}
	for _, f := range families {
		n := f.GetName()
		names[n] = true
		switch f.GetType().String() {
		case "HISTOGRAM":
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		case "SUMMARY":
			names[n+"_sum"], names[n+"_count"] = true, true
		}
	}
	return names
}

// sdkMetric is a metric the Temporal SDK records: its name before our handler exports it,
// and the MetricsHandler method it is recorded with.
type sdkMetric struct{ name, kind string }

// sdkMetrics reads the SDK's metric names from the SDK version this module builds with
// (internal/common/metrics/constants.go, not importable), so that a name the SDK drops or
// renames in an upgrade fails the dashboard's check. Each is recorded with the handler
// method the SDK's code calls for it: Gauge where it calls Gauge, Timer for its latencies,
// Counter for the rest. A run of `brokerswitch serve` against a dev server served no
// temporal_* name outside this set.
func sdkMetrics(t *testing.T) []sdkMetric {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "mod", "download", "-json", "go.temporal.io/sdk").Output()
	require.NoError(t, err, "locate the Temporal SDK's module")
	var mod struct{ Dir string }
	require.NoError(t, json.Unmarshal(out, &mod))
	require.NotEmpty(t, mod.Dir)

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(mod.Dir, "internal", "common", "metrics", "constants.go"), nil, 0)
	require.NoError(t, err)
	values := map[string]string{} // constant name -> metric name
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					if v, ok := stringConst(vs.Values[i], values); ok {
						values[n.Name] = v
					}
				}
			}
		}
	}
	require.Contains(t, values, "TemporalMetricsPrefix", "the SDK's constants moved")

	gauges := map[string]bool{}
	gauge := regexp.MustCompile(`\.Gauge\(\s*(?:metrics\.)?([A-Z]\w*)`)
	require.NoError(t, filepath.WalkDir(filepath.Join(mod.Dir, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range gauge.FindAllSubmatch(b, -1) {
			gauges[string(m[1])] = true
		}
		return err
	}))
	require.NotEmpty(t, gauges, "the SDK records no gauge any more?")

	// The gRPC interceptor records the request metrics twice: per call, and per attempt
	// with this suffix (retries included).
	b, err := os.ReadFile(filepath.Join(mod.Dir, "internal", "grpc_dialer.go"))
	require.NoError(t, err)
	attempt := regexp.MustCompile(`attemptSuffix\s*=\s*"(\w+)"`).FindSubmatch(b)
	require.NotNil(t, attempt, "the SDK's attemptSuffix moved")

	var ms []sdkMetric
	for ident, name := range values {
		if !strings.HasPrefix(name, values["TemporalMetricsPrefix"]) || name == values["TemporalMetricsPrefix"] {
			continue // a tag name or value
		}
		kind := "Counter"
		switch {
		case gauges[ident]:
			kind = "Gauge"
		case strings.HasSuffix(ident, "Latency"):
			kind = "Timer"
		}
		ms = append(ms, sdkMetric{name, kind})
		if strings.HasPrefix(ident, "TemporalRequest") || strings.HasPrefix(ident, "TemporalLongRequest") {
			ms = append(ms, sdkMetric{name + string(attempt[1]), kind})
		}
	}
	require.Greater(t, len(ms), 20, "the SDK's metric names were not found")
	return ms
}

// stringConst evaluates a constant string expression of literals and constants seen so far.
func stringConst(e ast.Expr, seen map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		v := constant.MakeFromLiteral(e.Value, e.Kind, 0)
		return constant.StringVal(v), true
	case *ast.Ident:
		v, ok := seen[e.Name]
		return v, ok
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		l, ok1 := stringConst(e.X, seen)
		r, ok2 := stringConst(e.Y, seen)
		return l + r, ok1 && ok2
	case *ast.ParenExpr:
		return stringConst(e.X, seen)
	}
	return "", false
}
