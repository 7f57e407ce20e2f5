package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerswitch/brokerswitch/broker"
)

// Where a batch's time goes, and how many round trips it takes, is what latency multiplies:
// the consumer's pool hands each settled batch's broker.BatchTrace to the stack, and with
// an injected RTT the Postgres delay proxy (testenv.Delay) counts, per client connection,
// the round trips on the wire, which pgTracer charges to the batch whose statements ran
// on that connection.

// pgTracer is a pgx tracer that charges the round trips of a batch's statements to the
// batch: from the first statement that runs with the batch's context on a connection to
// the end of the transaction (the commit runs without it), as the proxy counted them.
type pgTracer struct {
	turnsOf func(clientAddr string) int64
	mu      sync.Mutex
	open    map[*pgx.Conn]pgSpan
}

type pgSpan struct {
	trace *broker.BatchTrace
	from  int64
}

func (t *pgTracer) start(ctx context.Context, conn *pgx.Conn) {
	bt := broker.TraceOf(ctx)
	if bt == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.open[conn]; !ok {
		t.open[conn] = pgSpan{trace: bt, from: t.turnsOf(conn.PgConn().Conn().LocalAddr().String())}
	}
}

// end closes the connection's span once it is out of a transaction.
func (t *pgTracer) end(conn *pgx.Conn) {
	if conn.PgConn().TxStatus() != 'I' {
		return
	}
	t.mu.Lock()
	sp, ok := t.open[conn]
	delete(t.open, conn)
	t.mu.Unlock()
	if ok {
		sp.trace.PGRoundTrips.Add(t.turnsOf(conn.PgConn().Conn().LocalAddr().String()) - sp.from)
	}
}

func (t *pgTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.start(ctx, conn)
	return ctx
}

func (t *pgTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.end(conn)
}

func (t *pgTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.start(ctx, conn)
	return ctx
}

func (t *pgTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *pgTracer) TraceBatchEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.end(conn)
}

// batchLog collects the traces of one run's batches.
type batchLog struct {
	mu      sync.Mutex
	batches []*broker.BatchTrace
}

func (l *batchLog) add(t *broker.BatchTrace) {
	l.mu.Lock()
	l.batches = append(l.batches, t)
	l.mu.Unlock()
}

// batchSummary is what a run's batches spent, as medians over them.
type batchSummary struct {
	Batches    int
	Deliveries float64 // median batch size
	// PhaseMS is the median of each phase (broker.Phase's names), in milliseconds; WallMS
	// the median of a batch's wall time.
	PhaseMS map[string]float64
	WallMS  float64
	// PGRoundTrips is -1 when not counted (no delay proxy in front of Postgres).
	PGRoundTrips, AMQPRoundTrips float64
	// FullPGRoundTrips is the median over the batches of the largest size seen.
	FullPGRoundTrips float64
	FullSize         int
}

func (l *batchLog) summary(counted bool) *batchSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.batches) == 0 {
		return nil
	}
	s := &batchSummary{Batches: len(l.batches), PhaseMS: map[string]float64{}, PGRoundTrips: -1, FullPGRoundTrips: -1}
	of := func(f func(*broker.BatchTrace) float64) float64 {
		xs := make([]float64, len(l.batches))
		for i, b := range l.batches {
			xs[i] = f(b)
		}
		return median(xs)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	s.Deliveries = of(func(b *broker.BatchTrace) float64 { return float64(b.Deliveries) })
	s.WallMS = of(func(b *broker.BatchTrace) float64 { return ms(b.Wall) })
	for p := range broker.PhaseCount {
		s.PhaseMS[p.String()] = of(func(b *broker.BatchTrace) float64 { return ms(b.Spent[p]) })
	}
	s.AMQPRoundTrips = of(func(b *broker.BatchTrace) float64 { return float64(b.AMQPRoundTrips) })
	if counted {
		s.PGRoundTrips = of(func(b *broker.BatchTrace) float64 { return float64(b.PGRoundTrips.Load()) })
		for _, b := range l.batches {
			s.FullSize = max(s.FullSize, b.Deliveries)
		}
		var full []float64
		for _, b := range l.batches {
			if b.Deliveries == s.FullSize {
				full = append(full, float64(b.PGRoundTrips.Load()))
			}
		}
		s.FullPGRoundTrips = median(full)
	}
	return s
}
