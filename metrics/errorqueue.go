package metrics

import "github.com/prometheus/client_golang/prometheus"

// ErrorQueues counts what operators' requeue and purge runs moved out of the {q}-error
// queues, by queue and kind of reason. It lives where the runs do: in the API process.
type ErrorQueues struct {
	requeued *prometheus.CounterVec
	purged   *prometheus.CounterVec
}

// NewErrorQueues registers the counters on reg, each served at 0 for every queue and
// kind of reason (kinds come from the errorqueue package), so that increase() sees the
// first run after a start.
func NewErrorQueues(reg prometheus.Registerer, queues, kinds []string) (*ErrorQueues, error) {
	e := &ErrorQueues{
		requeued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "error_messages_requeued_total",
			Help: "Messages `brokerswitch errors requeue` copied from {q}-error back to their queue and took from -error, by queue and kind of reason.",
		}, []string{"queue", "reason"}),
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "error_messages_purged_total",
			Help: "Messages `brokerswitch errors purge` (or requeue --purge-applied) took from {q}-error for good, by queue and kind of reason.",
		}, []string{"queue", "reason"}),
	}
	for _, c := range []prometheus.Collector{e.requeued, e.purged} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, q := range queues {
		for _, k := range kinds {
			e.requeued.WithLabelValues(q, k)
			e.purged.WithLabelValues(q, k)
		}
	}
	return e, nil
}

// ErrorsRequeued counts n messages of queue, of one kind of reason, requeued.
func (e *ErrorQueues) ErrorsRequeued(queue, reason string, n int) {
	if e != nil && n > 0 {
		e.requeued.WithLabelValues(queue, reason).Add(float64(n))
	}
}

// ErrorsPurged counts n messages of queue, of one kind of reason, purged.
func (e *ErrorQueues) ErrorsPurged(queue, reason string, n int) {
	if e != nil && n > 0 {
		e.purged.WithLabelValues(queue, reason).Add(float64(n))
	}
}
