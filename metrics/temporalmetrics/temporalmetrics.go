// Package temporalmetrics exports the Temporal SDK's metrics (temporal_request_total,
// temporal_activity_execution_latency_seconds, temporal_workflow_task_queue_poll_empty_total,
// ...) through the service's one Prometheus registry.
//
// It uses the SDK's own contrib/opentelemetry MetricsHandler over an OpenTelemetry meter
// whose reader is the OpenTelemetry Prometheus exporter, registered with our registry.
// (The SDK's contrib/tally adapter is not served by the module proxy we build from.)
package temporalmetrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
)

// latencyBuckets are in seconds: the SDK's timers measure requests, polls and task
// executions, from milliseconds (a request) to a minute (a long poll).
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

// NewHandler returns a client.MetricsHandler for client.Options.MetricsHandler that
// registers the SDK's metrics with reg. onError receives what the meter refuses (an
// instrument name it cannot take, say); nil ignores it, where the SDK would panic.
func NewHandler(reg prometheus.Registerer, onError func(error)) (client.MetricsHandler, error) {
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithoutTargetInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("temporal metrics: prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(exporter),
		sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: latencyBuckets}},
		)),
	)
	if onError == nil {
		onError = func(error) {}
	}
	return temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter:                provider.Meter("temporal-sdk-go"),
		OnError:              onError,
		UseMonotonicCounters: true,
	}), nil
}
