package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker/quarantine"
	"github.com/brokerswitch/brokerswitch/metrics"
)

// Headers added to a message copied to {q}-error, by a Reject or by the quarantine.
const (
	HeaderErrorReason = quarantine.HeaderReason // why: the Reject verdict's Reason, or the quarantine's
	HeaderErrorAt     = quarantine.HeaderAt     // when, RFC 3339 UTC
	HeaderErrorQueue  = quarantine.HeaderQueue  // the queue it came from
	HeaderErrorCut    = quarantine.HeaderCut    // what the copy left out to fit frame_max, if anything
)

// ErrHandler is wrapped into the error of Consume or Drain when the batch handler failed
// (the database, say), as opposed to the broker: a caller that tolerates a broker's
// failure must not tolerate this one.
var ErrHandler = errors.New("batch handler failed")

// publishTimeout bounds a copy's publish to {q}-error, which waits while the broker
// blocks publishers (a resource alarm).
const publishTimeout = 30 * time.Second

// settler applies verdicts to deliveries of one channel. Consume and Drain
// share it so both settle exactly the same way.
//
// The channel is transactional (tx.select): a message rejected to {q}-error is copied and
// acknowledged in one transaction, with the other verdicts of its batch. A publisher
// confirm and then an ack would not do: a connection lost between the two leaves the copy
// in -error and the original in its queue, to be copied again when redelivered, so that
// -error holds the message twice.
type settler struct {
	pool      *Pool
	index     int
	ep        Endpoint
	queue     string
	ch        *amqp.Channel // the channel the deliveries came from, transactional
	frameMax  int           // the frame_max its connection negotiated
	onSettled func(Verdict)
	// fence, when it closes, gives up the batch in hand: nothing of it is settled.
	fence <-chan struct{}
	// settleTimeout bounds the batch in hand once its consumer was told to stop; 0 means
	// handleTimeout.
	settleTimeout time.Duration
	returns       chan amqp.Return
	// inFlight is the settle running behind the handling of the next part (handleAhead),
	// nil when none; only the goroutine that handles touches it.
	inFlight *settling
}

// newSettler puts ch in transactional mode; Consume and Drain settle on it alone.
func newSettler(p *Pool, ep Endpoint, ch *amqp.Channel, frameMax int, queue string, onSettled func(Verdict)) (*settler, error) {
	if err := ch.Tx(); err != nil {
		return nil, fmt.Errorf("transactional channel on %s: %w", ep, err)
	}
	// Buffered for every copy of a batch: the library blocks until a return is taken.
	returns := ch.NotifyReturn(make(chan amqp.Return, MaxPrefetch))
	return &settler{pool: p, index: ep.Index, ep: ep, queue: queue, ch: ch, frameMax: frameMax, onSettled: onSettled, returns: returns}, nil
}

// handleTimeout bounds one batch once its consumer has been told to stop, unless
// ConsumeOptions.SettleTimeout says otherwise.
const handleTimeout = time.Minute

// handleThen runs h on batch, in parts of at most PoolSettings.MaxBatchBytes, for a drain, whose
// consumer must stay until the batch is applied: it applies every part, then calls
// release (when not nil), then settles the parts in order, and returns how many
// deliveries it settled. It stops before a delivery whose body was over
// PoolSettings.MaxMessageBytes, and returns its error (quarantine's Cut). Settling uses a context
// that the end of ctx does not cancel: a handled batch is always settled, every part of it. Nothing of the batch is acknowledged before all of it was applied, so
// while its consumer is there no delivery beyond the batch can come. release is called
// for an empty batch too, and not when h fails: the caller closes the channel then.
func (s *settler) handleThen(ctx context.Context, h BatchHandler, batch []amqp.Delivery, release func() error) (int, error) {
	batch, oversize := s.pool.quarantine().Cut(batch)
	parts := splitByBytes(batch, s.pool.settings.MaxBatchBytes)
	verdicts := make([][]Verdict, len(parts))
	for i, part := range parts {
		v, err := s.apply(ctx, h, part)
		if err != nil {
			return 0, err
		}
		verdicts[i] = v
	}
	if release != nil {
		if err := release(); err != nil {
			return 0, err
		}
	}
	settled := 0
	for i, part := range parts {
		start := time.Now()
		n, err := s.settle(context.WithoutCancel(ctx), part, verdicts[i])
		TraceOf(ctx).Add(PhaseAck, start)
		settled += n
		if err != nil {
			return settled, err
		}
	}
	return settled, oversize
}

// splitByBytes cuts batch, in order, into parts whose bodies add up to at most maxBytes;
// a message larger than that is a part of its own. maxBytes <= 0 keeps batch whole. No
// part is empty: an empty batch has none.
func splitByBytes(batch []amqp.Delivery, maxBytes int) [][]amqp.Delivery {
	switch {
	case len(batch) == 0:
		return nil
	case maxBytes <= 0:
		return [][]amqp.Delivery{batch}
	}
	var parts [][]amqp.Delivery
	start, size := 0, 0
	for i, d := range batch {
		if i > start && size+len(d.Body) > maxBytes {
			parts = append(parts, batch[start:i])
			start, size = i, 0
		}
		size += len(d.Body)
	}
	return append(parts, batch[start:])
}

// apply runs h on one part of a batch and returns its verdicts, nothing settled yet.
func (s *settler) apply(ctx context.Context, h BatchHandler, batch []amqp.Delivery) ([]Verdict, error) {
	// A batch in hand is finished even when ctx ends meanwhile (a window cut short by a
	// switch): abandoning it would only have it delivered and applied again later, and
	// every delivery counts against a CloudAMQP plan. Only from that end on is it bounded
	// in time: while the consumer runs, a batch that needs long (isolating a costly message
	// one statement timeout after another) must be let finish, or it would fail the same
	// way at every attempt and hold the queue for good.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var timer atomic.Pointer[time.Timer]
	bound := handleTimeout
	if s.settleTimeout > 0 {
		bound = s.settleTimeout
	}
	stopWatch := context.AfterFunc(ctx, func() { timer.Store(time.AfterFunc(bound, cancel)) })
	defer func() {
		stopWatch()
		if t := timer.Load(); t != nil {
			t.Stop()
		}
	}()
	if s.fence != nil {
		stopFence := make(chan struct{})
		defer close(stopFence)
		go func() {
			select {
			case <-s.fence:
				cancel()
			case <-stopFence:
			}
		}()
	}
	verdicts, err := h.HandleBatch(hctx, s.queue, batch)
	if isClosed(s.fence) {
		return nil, fmt.Errorf("handle batch of %d: %w", len(batch), ErrFenced)
	}
	if err != nil {
		return nil, fmt.Errorf("handle batch of %d: %w: %w", len(batch), ErrHandler, err)
	}
	return verdicts, nil
}

// settling is the settle of one handled part, running behind the handling of the next.
type settling struct {
	done   chan struct{} // closed once the settle ended
	failed chan struct{} // closed too when it failed, before done
	err    error         // why, once done is closed
}

// handleAhead is handle for Consume, pipelined: each part's verdicts are settled in the
// background while the next part, or the next batch, is handled and applied, so that the
// channel's commit costs the queue no round trip of its own. A part is handled only once
// the part before it was applied (the handler's transaction committed), and settled only
// once the settle before it ended, in queue order: the ack of a part never precedes the
// commit of any part before it, in Postgres or on the channel.
//
// When h fails on a part, nothing of it is settled; the settle in flight, whose part did
// commit, ends first, so that its acks are in before the caller closes the channel and the
// part that failed, with everything received behind it, goes back to the head of the queue.
// The returned error is the first failure in queue order: the settle in flight's, else the
// part's. batchSettled runs, from the settling goroutine, once the batch's last part is
// settled.
func (s *settler) handleAhead(ctx context.Context, h BatchHandler, batch []amqp.Delivery, batchSettled func()) error {
	batch, oversize := s.pool.quarantine().Cut(batch)
	parts := splitByBytes(batch, s.pool.settings.MaxBatchBytes)
	for i, part := range parts {
		if s.settleFailed() {
			// The channel is closed or unusable: applying more would only be undone by the
			// redelivery.
			return s.wait()
		}
		verdicts, err := s.apply(ctx, h, part)
		if werr := s.wait(); werr != nil {
			return werr
		}
		if err != nil {
			return err
		}
		var done func()
		if i == len(parts)-1 && oversize == nil {
			done = batchSettled
		}
		s.settleBehind(ctx, part, verdicts, done)
	}
	if oversize != nil {
		if err := s.wait(); err != nil {
			return err
		}
	}
	return oversize
}

// settleBehind settles batch's verdicts in a goroutine of its own; wait waits for it. A
// fence closed before it starts settles nothing, as for a part still being handled.
func (s *settler) settleBehind(ctx context.Context, batch []amqp.Delivery, verdicts []Verdict, done func()) {
	f := &settling{done: make(chan struct{}), failed: make(chan struct{})}
	s.inFlight = f
	go func() {
		defer close(f.done)
		if isClosed(s.fence) {
			f.err = fmt.Errorf("settle batch of %d: %w", len(batch), ErrFenced)
		} else {
			start := time.Now()
			_, f.err = s.settle(context.WithoutCancel(ctx), batch, verdicts)
			TraceOf(ctx).Add(PhaseAck, start)
		}
		if f.err != nil {
			close(f.failed)
			return
		}
		if done != nil {
			done()
		}
	}()
}

// wait waits for the settle in flight, if any, and returns its error. A nil settler (its
// channel never became transactional) has none.
func (s *settler) wait() error {
	if s == nil || s.inFlight == nil {
		return nil
	}
	f := s.inFlight
	<-f.done
	s.inFlight = nil
	return f.err
}

// failing is closed when the settle in flight failed; nil (never ready) when none is.
func (s *settler) failing() <-chan struct{} {
	if s.inFlight == nil {
		return nil
	}
	return s.inFlight.failed
}

// settleFailed tells whether the settle in flight has failed already.
func (s *settler) settleFailed() bool {
	return isClosed(s.failing())
}

// settle applies verdicts to batch in order, in one transaction of the channel, and
// returns how many deliveries it settled: all of them once the transaction commits, none
// before. Consecutive Acks go out as one multiple-ack on the last of them, which is right
// because every earlier delivery of the channel is settled by then. Call it with a context
// that is not cancelled when the consumer stops: a handled batch must not be abandoned
// half way.
func (s *settler) settle(ctx context.Context, batch []amqp.Delivery, verdicts []Verdict) (int, error) {
	if err := checkVerdicts(batch, verdicts); err != nil {
		return 0, err
	}
	if err := s.send(ctx, batch, verdicts); err != nil {
		return 0, err
	}
	s.roundTrip(ctx)
	if err := s.ch.TxCommit(); err != nil {
		return 0, fmt.Errorf("commit the verdicts of %d messages of %s on %s: %w", len(batch), s.queue, s.ep, err)
	}
	// The broker sends a return before the commit's answer, and the library hands it to
	// our buffered channel before it reads the answer.
	select {
	case r, ok := <-s.returns:
		if ok {
			return len(batch), fmt.Errorf("copy of message %s to %s returned by broker after its original was acknowledged: %d %s",
				r.MessageId, ErrorQueue(s.queue), r.ReplyCode, r.ReplyText)
		}
	default:
	}
	for _, v := range verdicts {
		switch v.Outcome {
		case Retry:
			s.pool.settings.Metrics.Routed(s.queue, metrics.RouteRetry)
		case Reject:
			s.pool.settings.Metrics.Routed(s.queue, metrics.RouteError)
		}
		s.notify(v)
	}
	return len(batch), nil
}

// send sends verdicts, for batch, in the channel's transaction, without committing it.
func (s *settler) send(ctx context.Context, batch []amqp.Delivery, verdicts []Verdict) error {
	if slices.ContainsFunc(verdicts, func(v Verdict) bool { return v.Outcome == Reject }) {
		// A copy that no queue takes is returned only once the transaction commits, with
		// its original acknowledged; a missing -error queue fails here instead, and closing
		// the channel rolls the transaction back.
		target := ErrorQueue(s.queue)
		s.roundTrip(ctx)
		if _, err := s.ch.QueueDeclarePassive(target, true, false, false, false, nil); err != nil {
			return fmt.Errorf("reject messages of %s on %s: %s: %w", s.queue, s.ep, target, err)
		}
	}
	acks := 0 // consecutive Acks not sent yet, ending at batch[i-1]
	flush := func(i int) error {
		if acks == 0 {
			return nil
		}
		last := batch[i-1]
		if err := s.ch.Ack(last.DeliveryTag, acks > 1); err != nil {
			return fmt.Errorf("ack %s on %s: %w", s.queue, s.ep, err)
		}
		acks = 0
		return nil
	}
	for i, v := range verdicts {
		if v.Outcome == Ack {
			acks++
			continue
		}
		if err := flush(i); err != nil {
			return err
		}
		if err := s.settleOne(ctx, batch[i], v); err != nil {
			return err
		}
	}
	return flush(len(batch))
}

// roundTrip counts a method whose answer settle waits for in the batch's trace.
func (s *settler) roundTrip(ctx context.Context) {
	if t := TraceOf(ctx); t != nil {
		t.AMQPRoundTrips++
	}
}

func checkVerdicts(batch []amqp.Delivery, verdicts []Verdict) error {
	if len(verdicts) != len(batch) {
		return fmt.Errorf("handler returned %d verdicts for %d deliveries", len(verdicts), len(batch))
	}
	for i, v := range verdicts {
		if v.Outcome != Ack && v.Outcome != Retry && v.Outcome != Reject {
			return fmt.Errorf("handler returned unknown outcome %d for delivery %d", v.Outcome, i)
		}
	}
	return nil
}

func (s *settler) settleOne(ctx context.Context, d amqp.Delivery, v Verdict) error {
	switch v.Outcome {
	case Retry:
		// Without requeue the queue dead-letters it to {q}-retry.
		if err := s.ch.Nack(d.DeliveryTag, false, false); err != nil {
			return fmt.Errorf("retry message of %s on %s: %w", s.queue, s.ep, err)
		}
	case Reject:
		if err := s.publishError(ctx, d, v.Reason, v.RetryCycles); err != nil {
			return fmt.Errorf("reject message of %s on %s: %w", s.queue, s.ep, err)
		}
		if err := s.ch.Ack(d.DeliveryTag, false); err != nil {
			return fmt.Errorf("ack rejected message of %s on %s: %w", s.queue, s.ep, err)
		}
	}
	return nil
}

func (s *settler) notify(v Verdict) {
	if s.onSettled != nil {
		s.onSettled(v)
	}
}

// publishError copies d to {q}-error within the channel's transaction, so that the copy
// and the ack of d take effect together when settle commits. The publish is mandatory:
// should no queue take it, the broker returns it. The copy is cut to fit the connection's
// frame_max (see errorCopy).
func (s *settler) publishError(ctx context.Context, d amqp.Delivery, reason string, retryCycles int) error {
	msg, cut := errorCopy(d, errorHeaders{reason: reason, at: time.Now(), queue: s.queue, retryCycles: retryCycles}, s.frameMax)
	if cut != "" {
		s.pool.logger.WarnContext(ctx, "copy to -error cut to fit frame_max", "queue", s.queue, "broker", s.ep,
			"message_id", msg.MessageId, "frame_max", s.frameMax, "cut", cut)
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	target := ErrorQueue(s.queue)
	if err := s.ch.PublishWithContext(ctx, "", target, true, false, msg); err != nil {
		return fmt.Errorf("publish to %s: %w", target, err)
	}
	return nil
}
