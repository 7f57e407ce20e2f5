package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ledgerGauges describe the ledger as the last retention sweep of this process saw it.
type ledgerGauges struct {
	retention, rows, bytes, oldest, swept prometheus.Gauge
	deleted                               prometheus.Counter
}

func newLedgerGauges() ledgerGauges {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
	}
	return ledgerGauges{
		retention: gauge("ledger_retention_seconds", "LEDGER_RETENTION: ledger rows whose last attempt is older are deleted."),
		rows:      gauge("ledger_rows", "Rows in github_deliveries, Postgres' live-tuple estimate, at the last retention sweep."),
		bytes:     gauge("ledger_bytes", "Bytes of github_deliveries with its indexes and TOAST, at the last retention sweep."),
		oldest: gauge("ledger_oldest_row_timestamp_seconds",
			"Unix time of the oldest ledger row's last attempt (received_at) after the last retention sweep; the sweep's time when the ledger is empty."),
		swept: gauge("ledger_retention_last_sweep_timestamp_seconds", "Unix time of the last retention sweep that finished."),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "ledger_rows_deleted_total",
			Help: "Ledger rows the retention sweeps of this process deleted.",
		}),
	}
}

func (g ledgerGauges) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.retention, g.rows, g.bytes, g.oldest, g.swept, g.deleted}
}

// LedgerReading is the ledger's size after a retention sweep.
type LedgerReading struct {
	Rows  int64
	Bytes int64
	// Oldest is the oldest row's received_at; zero when the ledger is empty.
	Oldest time.Time
}

// LedgerRetention records the configured retention.
func (m *Metrics) LedgerRetention(d time.Duration) {
	if m == nil {
		return
	}
	m.ledger.retention.Set(d.Seconds())
}

// LedgerDeleted counts ledger rows a sweep deleted, batch by batch.
func (m *Metrics) LedgerDeleted(n int64) {
	if m == nil {
		return
	}
	m.ledger.deleted.Add(float64(n))
}

// LedgerSwept records the ledger as a sweep that finished at the time at left it.
func (m *Metrics) LedgerSwept(r LedgerReading, at time.Time) {
	if m == nil {
		return
	}
	m.ledger.rows.Set(float64(r.Rows))
	m.ledger.bytes.Set(float64(r.Bytes))
	oldest := r.Oldest
	if oldest.IsZero() {
		// An empty ledger is as young as the sweep: the alert on the oldest row's age then
		// still fires if sweeps stop.
		oldest = at
	}
	m.ledger.oldest.Set(float64(oldest.UnixMilli()) / 1000)
	m.ledger.swept.Set(float64(at.UnixMilli()) / 1000)
}
