package metrics

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stateReadTimeout bounds the Postgres read of one scrape, well within Prometheus' default
// scrape timeout of 10s.
const stateReadTimeout = 3 * time.Second

// stateCacheFor is how long one reading serves the scrapes that follow. /metrics needs no
// token: without it, a burst of scrapes would each read Postgres. A second is well under
// any scrape interval, so every scrape still sees a fresh reading.
const stateCacheFor = time.Second

// StateReading is what Postgres says about the brokers at scrape time: the source of
// truth, the same whichever replica is scraped.
type StateReading struct {
	ActiveIndex int
	// PendingSince is when the Pending Switch was recorded; zero when nothing is pending.
	PendingSince time.Time
	// PendingHops is the number of hops on the Pending Switch's route.
	PendingHops int
	// LastCheck is the last drain check of a switch, nil before the first.
	LastCheck *DrainCheckReading
	// Consuming counts, per configured queue, the consume attempts that live workers hold
	// (their leases): 0 while nobody reads the queue.
	Consuming map[string]int
}

// DrainCheckReading is the last drain check as recorded.
type DrainCheckReading struct {
	Broker    int
	Counts    map[string]int // ready messages per queue, -retry queues included
	Reachable bool
	At        time.Time
}

// StateReader reads the broker state; it is called once per scrape.
type StateReader func(ctx context.Context) (StateReading, error)

// WatchState exports gauges read from the broker state at every scrape: the active broker,
// the Pending Switch's age and route length, and the last drain check's counts. Reading at
// scrape time keeps the gauges right on every replica, including those that did not run
// the last activity. Call it at most once per Metrics.
func (m *Metrics) WatchState(read StateReader) error {
	if m == nil {
		return nil
	}
	if m.stateWatching {
		return errors.New("metrics: WatchState called twice")
	}
	m.stateWatching = true
	return m.registerer.Register(newStateCollector(read, time.Now))
}

type stateCollector struct {
	read StateReader
	now  func() time.Time

	// mu makes concurrent scrapes share one read: at most one is in flight, and the
	// others wait for it and use its reading.
	mu       sync.Mutex
	cached   StateReading
	cacheErr error
	readAt   time.Time

	up, active, pendingAge, pendingHops, checkReady, checkReachable, checkTime, consuming *prometheus.Desc
}

func newStateCollector(read StateReader, now func() time.Time) *stateCollector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, "", n) }
	return &stateCollector{
		read: read,
		now:  now,
		up: prometheus.NewDesc(name("state_up"),
			"1 when the broker state could be read from Postgres for this scrape, else 0 (and the other state gauges are absent).", nil, nil),
		active: prometheus.NewDesc(name("active_broker"),
			"Index of the active broker, the one the windows consume.", nil, nil),
		pendingAge: prometheus.NewDesc(name("pending_switch_age_seconds"),
			"Seconds since the Pending Switch was recorded; 0 when nothing is pending.", nil, nil),
		pendingHops: prometheus.NewDesc(name("pending_switch_hops"),
			"Hops left on the Pending Switch's route; 0 when nothing is pending.", nil, nil),
		checkReady: prometheus.NewDesc(name("drain_check_ready_messages"),
			"Ready messages the last drain check counted, by queue (-retry queues included) and the broker it checked.",
			[]string{"queue", "broker"}, nil),
		checkReachable: prometheus.NewDesc(name("drain_check_reachable"),
			"1 when the last drain check reached its broker, else 0.", []string{"broker"}, nil),
		checkTime: prometheus.NewDesc(name("drain_check_timestamp_seconds"),
			"Unix time of the last drain check.", []string{"broker"}, nil),
		consuming: prometheus.NewDesc(name("windows_consuming"),
			"Consume attempts that live workers hold for the queue, from their leases in Postgres: 1 while the queue is read, 0 while nobody reads it.",
			[]string{"queue"}, nil),
	}
}

// Describe sends the descriptors.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.active, c.pendingAge, c.pendingHops, c.checkReady, c.checkReachable, c.checkTime, c.consuming} {
		ch <- d
	}
}

// Collect reads the state and sends the gauges; on a failed read only state_up (0).
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.reading()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(st.ActiveIndex))
	age := 0.0
	if !st.PendingSince.IsZero() {
		age = max(0, c.now().Sub(st.PendingSince).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.pendingAge, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(c.pendingHops, prometheus.GaugeValue, float64(st.PendingHops))
	for q, n := range st.Consuming {
		ch <- prometheus.MustNewConstMetric(c.consuming, prometheus.GaugeValue, float64(n), q)
	}
	if lc := st.LastCheck; lc != nil {
		b := strconv.Itoa(lc.Broker)
		for q, n := range lc.Counts {
			ch <- prometheus.MustNewConstMetric(c.checkReady, prometheus.GaugeValue, float64(n), q, b)
		}
		reachable := 0.0
		if lc.Reachable {
			reachable = 1
		}
		ch <- prometheus.MustNewConstMetric(c.checkReachable, prometheus.GaugeValue, reachable, b)
		ch <- prometheus.MustNewConstMetric(c.checkTime, prometheus.GaugeValue, float64(lc.At.UnixMilli())/1000, b)
	}
}

// reading returns the last reading if it is younger than stateCacheFor, or reads anew.
func (c *stateCollector) reading() (StateReading, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); !c.readAt.IsZero() && now.Sub(c.readAt) < stateCacheFor && !now.Before(c.readAt) {
		return c.cached, c.cacheErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateReadTimeout)
	defer cancel()
	c.cached, c.cacheErr = c.read(ctx)
	c.readAt = c.now()
	return c.cached, c.cacheErr
}
