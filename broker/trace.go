package broker

import (
	"context"
	"sync/atomic"
	"time"
)

// Phase is a part of a consumed batch's wall time.
type Phase int

// The phases of a batch, in the order a batch goes through them.
const (
	// PhaseReceive is the wait for the batch's first delivery.
	PhaseReceive Phase = iota
	// PhaseDecode is the decoding of the bodies.
	PhaseDecode
	// PhaseLedger is the claim of the batch's ledger rows.
	PhaseLedger
	// PhaseRead is the read of the rows the batch changes, under lock.
	PhaseRead
	// PhaseWrite is the write of the changed rows.
	PhaseWrite
	// PhaseCommit is the commit of the Postgres transaction.
	PhaseCommit
	// PhaseAck is the settling of the verdicts on the channel, its commit included.
	PhaseAck
	// PhaseCount is the number of phases.
	PhaseCount
)

// String is the phase as the benchmark reports it.
func (p Phase) String() string {
	switch p {
	case PhaseReceive:
		return "receive"
	case PhaseDecode:
		return "decode"
	case PhaseLedger:
		return "ledger"
	case PhaseRead:
		return "read under lock"
	case PhaseWrite:
		return "write"
	case PhaseCommit:
		return "commit"
	case PhaseAck:
		return "ack"
	default:
		return "phase?"
	}
}

// BatchTrace is where one consumed batch's time went and how many round trips it took;
// PoolSettings.Trace receives one per batch settled. Handlers add their phases with Add, through
// TraceOf of the context Consume hands them.
type BatchTrace struct {
	// Queue is the queue consumed; Deliveries the batch's size.
	Queue      string
	Deliveries int
	// Spent is the wall time of each phase; Wall the batch's, from the wait for its first
	// delivery to its settling (what no phase covers is CPU between them: folding, verdicts).
	// Consume settles a batch while the next one is handled, so a batch's ack overlaps the
	// next batch's phases and the walls of consecutive batches overlap too.
	Spent [PhaseCount]time.Duration
	Wall  time.Duration
	// PGRoundTrips are the batch's round trips to Postgres, added by whoever watches the
	// driver (the benchmark's tracer); the service counts none.
	PGRoundTrips atomic.Int64
	// AMQPRoundTrips are the methods the consumer waited on the broker's answer for
	// (queue.declare, tx.commit), and 1 when it waited for the batch's first delivery.
	AMQPRoundTrips int
}

// Add adds the time since start to phase p; a nil t records nothing.
func (t *BatchTrace) Add(p Phase, start time.Time) {
	if t != nil {
		t.Spent[p] += time.Since(start)
	}
}

type traceKey struct{}

// TraceOf is the trace of the batch a handler's ctx belongs to, nil when nobody traces.
func TraceOf(ctx context.Context) *BatchTrace {
	t, _ := ctx.Value(traceKey{}).(*BatchTrace)
	return t
}

// withTrace is ctx carrying t.
func withTrace(ctx context.Context, t *BatchTrace) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, t)
}
