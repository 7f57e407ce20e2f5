// Package metricstest reads values back from a Prometheus registry in tests. Production
// code never imports it.
package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// New returns metrics on a fresh registry, and the registry to read them back from.
func New() (*metrics.Metrics, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return metrics.New(reg), reg
}

// Value sums the series of the family name whose labels include the given pairs
// (key, value, key, value...): a counter's or gauge's value, a histogram's sample count.
// A family or series that does not exist yet is 0.
func Value(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	if len(labels)%2 != 0 {
		tb.Fatalf("metricstest: labels must come in pairs, got %q", labels)
	}
	families, err := g.Gather()
	if err != nil {
		tb.Fatalf("metricstest: gather: %v", err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				sum += value(m)
			}
		}
	}
	return sum
}

func matches(m *dto.Metric, labels []string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i < len(labels); i += 2 {
		if have[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
