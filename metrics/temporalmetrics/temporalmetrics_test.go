package temporalmetrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// The SDK's counters, gauges and timers land in our registry with Prometheus names, and a
// metric whose tags differ between calls (the SDK adds some per call site) is still one family.
func TestSDKMetricsLandInTheRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h, err := NewHandler(reg, func(err error) { t.Errorf("meter refused a metric: %v", err) })
	require.NoError(t, err)

	tagged := h.WithTags(map[string]string{"namespace": "default", "operation": "StartWorkflowExecution"})
	tagged.Counter("temporal_request").Inc(1)
	tagged.Counter("temporal_request").Inc(2)
	h.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(1)
	h.Gauge("temporal_num_pollers").Update(2)
	tagged.Timer("temporal_request_latency").Record(30 * time.Millisecond)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP temporal_request_total 
# TYPE temporal_request_total counter
temporal_request_total{namespace="default"} 1
temporal_request_total{namespace="default",operation="StartWorkflowExecution"} 3
`), "temporal_request_total"))

	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	require.True(t, names["temporal_num_pollers"], "gauges keep their name: %v", names)
	require.True(t, names["temporal_request_latency_seconds"], "timers are histograms in seconds: %v", names)
	require.Equal(t, 1, testutil.CollectAndCount(reg, "temporal_request_latency_seconds"))
}
