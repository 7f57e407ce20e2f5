package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// Headers added to a message copied to {q}-error by a Reject.
const (
	HeaderErrorReason = "x-error-reason" // the Reject verdict's Reason
	HeaderErrorAt     = "x-error-at"     // when it was rejected, RFC 3339 UTC
	HeaderErrorQueue  = "x-error-queue"  // the queue it was rejected from
)

// ErrHandler is wrapped into the error of Consume or Drain when the batch handler failed
// (the database, say), as opposed to the broker: a caller that tolerates a broker's
// failure must not tolerate this one.
var ErrHandler = errors.New("batch handler failed")

// confirmTimeout bounds the wait for the broker to confirm a copy to {q}-error.
const confirmTimeout = 30 * time.Second

// settler applies verdicts to deliveries of one channel. Consume and Drain
// share it so both settle exactly the same way.
type settler struct {
	pool      *Pool
	index     int
	ep        Endpoint
	queue     string
	ch        *amqp.Channel // the channel the deliveries came from
	onSettled func(Verdict)
	// fence, when it closes, gives up the batch in hand: nothing of it is settled.
	fence <-chan struct{}

	pub     *amqp.Channel // confirm-mode channel for Reject copies, opened on first use
	returns chan amqp.Return
}

func newSettler(p *Pool, ep Endpoint, ch *amqp.Channel, queue string, onSettled func(Verdict)) *settler {
	return &settler{pool: p, index: ep.Index, ep: ep, queue: queue, ch: ch, onSettled: onSettled}
}

// handleTimeout bounds one batch once its consumer has been told to stop.
const handleTimeout = time.Minute

func (s *settler) close() {
	if s.pub != nil {
		_ = s.pub.Close()
	}
}

// handle runs h on batch, in parts of at most Pool.MaxBatchBytes, and settles the
// verdicts, returning how many deliveries it settled. Settling uses a context that the
// end of ctx does not cancel: a handled batch is always settled, every part of it.
func (s *settler) handle(ctx context.Context, h BatchHandler, batch []amqp.Delivery) (int, error) {
	settled := 0
	for _, part := range splitByBytes(batch, s.pool.MaxBatchBytes) {
		n, err := s.handlePart(ctx, h, part)
		settled += n
		if err != nil {
			return settled, err
		}
	}
	return settled, nil
}

// splitByBytes cuts batch, in order, into parts whose bodies add up to at most maxBytes;
// a message larger than that is a part of its own. maxBytes <= 0 keeps batch whole.
func splitByBytes(batch []amqp.Delivery, maxBytes int) [][]amqp.Delivery {
	if maxBytes <= 0 {
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

// handlePart runs h on one part of a batch and settles its verdicts.
func (s *settler) handlePart(ctx context.Context, h BatchHandler, batch []amqp.Delivery) (int, error) {
	// A batch in hand is finished even when ctx ends meanwhile (a window cut short by a
	// switch): abandoning it would only have it delivered and applied again later, and
	// every delivery counts against a CloudAMQP plan. Only from that end on is it bounded
	// in time: while the consumer runs, a batch that needs long (isolating a costly message
	// one statement timeout after another) must be let finish, or it would fail the same
	// way at every attempt and hold the queue for good.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var timer atomic.Pointer[time.Timer]
	stopWatch := context.AfterFunc(ctx, func() { timer.Store(time.AfterFunc(handleTimeout, cancel)) })
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
		return 0, fmt.Errorf("handle batch of %d: %w", len(batch), ErrFenced)
	}
	if err != nil {
		return 0, fmt.Errorf("handle batch of %d: %w: %w", len(batch), ErrHandler, err)
	}
	return s.settle(context.WithoutCancel(ctx), batch, verdicts)
}

// settle applies verdicts to batch in order and returns how many deliveries it
// settled. Consecutive Acks go out as one multiple-ack on the last of them,
// which is right because every earlier delivery of the channel is settled by
// then. Call it with a context that is not cancelled when the consumer stops:
// a handled batch must not be abandoned half way.
func (s *settler) settle(ctx context.Context, batch []amqp.Delivery, verdicts []Verdict) (int, error) {
	if err := checkVerdicts(batch, verdicts); err != nil {
		return 0, err
	}
	settled := 0
	acks := 0 // consecutive Acks not sent yet, ending at batch[settled+acks-1]
	flush := func() error {
		if acks == 0 {
			return nil
		}
		last := batch[settled+acks-1]
		if err := s.ch.Ack(last.DeliveryTag, acks > 1); err != nil {
			return fmt.Errorf("ack %s on %s: %w", s.queue, s.ep, err)
		}
		for range acks {
			s.notify(Verdict{Outcome: Ack})
		}
		settled += acks
		acks = 0
		return nil
	}
	for i, v := range verdicts {
		if v.Outcome == Ack {
			acks++
			continue
		}
		if err := flush(); err != nil {
			return settled, err
		}
		if err := s.settleOne(ctx, batch[i], v); err != nil {
			return settled, err
		}
		s.notify(v)
		settled++
	}
	return settled, flush()
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
		s.pool.Metrics.Routed(s.queue, metrics.RouteRetry)
	case Reject:
		if err := s.publishError(ctx, d, v.Reason, v.RetryCycles); err != nil {
			return fmt.Errorf("reject message of %s on %s: %w", s.queue, s.ep, err)
		}
		if err := s.ch.Ack(d.DeliveryTag, false); err != nil {
			return fmt.Errorf("ack rejected message of %s on %s: %w", s.queue, s.ep, err)
		}
		s.pool.Metrics.Routed(s.queue, metrics.RouteError)
	}
	return nil
}

func (s *settler) notify(v Verdict) {
	if s.onSettled != nil {
		s.onSettled(v)
	}
}

// publishError copies d to {q}-error and waits until the broker confirms it,
// so that acknowledging d afterwards cannot lose the message. The publish is
// mandatory: should {q}-error not exist, the broker returns the copy and we
// fail instead of acknowledging.
func (s *settler) publishError(ctx context.Context, d amqp.Delivery, reason string, retryCycles int) error {
	pub, err := s.publisher(ctx)
	if err != nil {
		return err
	}
	headers := maps.Clone(d.Headers)
	if headers == nil {
		headers = amqp.Table{}
	}
	headers[HeaderErrorReason] = reason
	headers[HeaderErrorAt] = time.Now().UTC().Format(time.RFC3339)
	headers[HeaderErrorQueue] = s.queue
	headers[HeaderRetryCycles] = int64(retryCycles)
	msg := amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		CorrelationId:   d.CorrelationId,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	target := ErrorQueue(s.queue)
	conf, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", target, true, false, msg)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", target, err)
	}
	acked, err := conf.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("confirm of %s: %w", target, err)
	}
	// A return precedes its confirm on the wire, and the library hands it to
	// our buffered channel before it processes the confirm.
	select {
	case r := <-s.returns:
		return fmt.Errorf("publish to %s: returned by broker: %d %s", target, r.ReplyCode, r.ReplyText)
	default:
	}
	if !acked {
		return fmt.Errorf("publish to %s: %w", target, errNacked)
	}
	return nil
}

var errNacked = errors.New("not confirmed by broker")

func (s *settler) publisher(ctx context.Context) (*amqp.Channel, error) {
	if s.pub != nil && !s.pub.IsClosed() {
		return s.pub, nil
	}
	s.close()
	ch, err := s.pool.Channel(ctx, s.index)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("confirm mode on %s: %w", s.ep, err)
	}
	s.pub = ch
	s.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
	return ch, nil
}
