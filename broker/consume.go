package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker/quarantine"
)

// ErrExclusiveConsumer is wrapped into Consume's error when the queue already
// has a consumer (RabbitMQ answers 403 ACCESS_REFUSED to an exclusive consume).
var ErrExclusiveConsumer = errors.New("queue already has a consumer")

// ErrConsumerCancelled is wrapped into Consume's error when the broker cancelled the
// consumer (basic.cancel): the queue was deleted, or the node that holds it went down.
var ErrConsumerCancelled = errors.New("consumer cancelled by the broker (queue deleted, or its node down)")

// Errors of a poison message, wrapped into the error of Consume or Drain (see quarantine).
var (
	ErrOversize     = quarantine.ErrOversize   // a body over PoolSettings.MaxMessageBytes
	ErrUnreadable   = quarantine.ErrUnreadable // headers the AMQP client cannot read
	ErrMovedToError = quarantine.ErrMoved      // the message is in {q}-error: read on at once
)

const (
	// MaxPrefetch caps ConsumeOptions.Prefetch. It stays far below 1000 so a
	// window never holds more unacknowledged messages than one batch of the
	// store can take in a reasonable time.
	MaxPrefetch = 500
)

// ConsumeOptions tune Consume; Prefetch is required.
type ConsumeOptions struct {
	// Prefetch is the most unacknowledged deliveries in flight (PREFETCH), from 1 to
	// MaxPrefetch.
	Prefetch int
	// MaxBatch is the most deliveries per HandleBatch call: 0 means Prefetch,
	// which is also its upper bound. PoolSettings.MaxBatchBytes bounds a call in bytes too.
	MaxBatch int
	// ConsumerTag names the consumer on the broker; empty means a random
	// "brokerswitch-..." tag.
	ConsumerTag string
	// OnSettled, if set, is called once per delivery, in queue order, after its verdict
	// was applied; it runs on Consume's settling goroutine, one batch at a time, and
	// every call is over when Consume returns.
	OnSettled func(Verdict)
	// Fence, when it closes, stops Consume at once without settling the batch in hand:
	// the handler's context is cancelled and the batch goes back to the head of the queue.
	// The caller closes it when another consumer may have taken its place.
	Fence <-chan struct{}
	// SettleTimeout bounds the batch in hand once ctx ended: 0 means a minute. A batch
	// that isolates costly messages one statement timeout after another needs up to
	// Prefetch statement timeouts; cut off earlier, it is delivered again, cut off again,
	// and holds the queue for good.
	SettleTimeout time.Duration
}

// ErrFenced is wrapped into Consume's error when its Fence closed.
var ErrFenced = errors.New("fenced: another consumer may have taken this one's place")

func (o ConsumeOptions) withDefaults() (ConsumeOptions, error) {
	if o.Prefetch < 1 || o.Prefetch > MaxPrefetch {
		return o, fmt.Errorf("prefetch %d: must be between 1 and %d", o.Prefetch, MaxPrefetch)
	}
	if o.MaxBatch < 0 {
		return o, fmt.Errorf("max batch %d: must not be negative", o.MaxBatch)
	}
	if o.MaxBatch == 0 || o.MaxBatch > o.Prefetch {
		o.MaxBatch = o.Prefetch
	}
	if o.ConsumerTag == "" {
		o.ConsumerTag = "brokerswitch-" + rand.Text()[:12]
	}
	return o, nil
}

// Consume consumes queue on broker index exclusively, with manual acks, until
// ctx ends or something fails. It hands h batches of deliveries in queue
// order: it waits for one delivery, then takes what else has already arrived,
// up to MaxBatch, and settles the verdicts in order (see Verdict).
//
// Consume is a pipeline: a batch's verdicts are settled on the channel while the next
// batch is handled, so at a distance from the broker its round trip overlaps the
// handler's. The handler is called on one batch at a time, never before the one ahead
// of it returned, and the batches are settled in queue order, each once the one ahead
// of it is settled: the ack of a batch never precedes the handler's end (its commit) of
// any batch before it.
//
// When ctx ends, Consume settles the batch in hand, if any, with a context that
// is not cancelled, then cancels the consumer, closes the channel and returns
// nil: the caller knows why its ctx ended. It returns nil too when h fails
// after ctx ended. Prefetched deliveries that were not handled go back to the
// head of the queue.
//
// Consume returns an error, with nothing of the current batch settled, when h fails
// (once the batch ahead of it, which h applied, is settled); it returns an error too
// when the queue has another consumer (wrapping ErrExclusiveConsumer), when the
// connection is lost or when the broker cancels the consumer. Closing the channel then puts every unsettled delivery back at
// the head of the queue, in order, so the caller can simply start again.
func (p *Pool) Consume(ctx context.Context, index int, queue string, opts ConsumeOptions, h BatchHandler) error {
	ep, err := p.endpoint(index)
	if err != nil {
		return err
	}
	opts, err = opts.withDefaults()
	if err != nil {
		return fmt.Errorf("consume %s on %s: %w", queue, ep, err)
	}
	ch, frameMax, err := p.consumerChannel(ctx, index, queue)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	defer ch.Close()
	c := &consumer{
		pool: p, ep: ep, ch: ch, frameMax: frameMax, queue: queue, opts: opts,
		closed: ch.NotifyClose(make(chan *amqp.Error, 1)),
		// Buffered: the library waits for a cancel listener to take the tag.
		cancelled: ch.NotifyCancel(make(chan string, 1)),
	}

	deliveries, err := subscribe(ch, queue, opts)
	if err != nil {
		if isCode(err, amqp.NotFound) {
			p.forgetTopology(index)
		}
		return c.wrap(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	buffered := forward(deliveries, opts.Prefetch, stop)

	// The first delivery may cut the connection before the channel is transactional: stop
	// moves it all the same.
	c.s, err = newSettler(p, ep, ch, frameMax, queue, opts.OnSettled)
	if err == nil {
		c.s.fence, c.s.settleTimeout = opts.Fence, opts.SettleTimeout
		err = c.run(ctx, buffered, h)
	}
	return c.stop(ctx, err)
}

// consumer is one Consume call once its channel is open: what its ways out need, and,
// once its consumer is subscribed, the settler of its channel.
type consumer struct {
	pool      *Pool
	ep        Endpoint
	ch        *amqp.Channel
	frameMax  int
	queue     string
	opts      ConsumeOptions
	closed    <-chan *amqp.Error
	cancelled <-chan string
	s         *settler
}

// run hands h the deliveries of buffered batch after batch, each while the one ahead of
// it settles, until ctx ends, the fence closes or something fails, and returns why it
// stopped: nil when ctx ended.
func (c *consumer) run(ctx context.Context, buffered <-chan amqp.Delivery, h BatchHandler) error {
	for {
		received := time.Now()
		waited := len(buffered) == 0
		batch, open := nextBatch(ctx, buffered, c.opts.MaxBatch, c.opts.Fence, c.s.failing())
		switch {
		case isClosed(c.opts.Fence):
			return ErrFenced
		case !open:
			return endReason(c.closed, c.cancelled)
		case c.s.settleFailed() || ctx.Err() != nil:
			// Unhandled deliveries go back to the queue, in order, when the channel closes.
			// No basic.cancel first: on a quorum queue (4.0.5) it returns the deliveries
			// still in flight at once, ahead of those already received, which the close
			// returns after them.
			return nil
		}
		trace, settled := c.trace(len(batch), received, waited)
		if err := c.s.handleAhead(withTrace(ctx, trace), h, batch, settled); err != nil {
			return err
		}
	}
}

// stop is every way out of Consume once it subscribed, err being why it stopped. It waits
// for the settle in flight: its batch committed, and its acks must be in before the
// channel closes and puts every unsettled delivery back at the head of the queue, in
// order. Its failure is what Consume returns when err is nil. A poison message that
// stopped the consumer is then moved to {q}-error.
func (c *consumer) stop(ctx context.Context, err error) error {
	if serr := c.s.wait(); err == nil {
		err = serr
	}
	_ = c.ch.Close()
	if err == nil {
		return nil
	}
	err = c.pool.quarantine().Move(ctx, quarantined(c.ep, c.queue, c.frameMax, c.opts.Prefetch, c.closed), err)
	if ctx.Err() != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrOversize) && !errors.Is(err, ErrUnreadable) {
		return nil
	}
	return c.wrap(err)
}

// trace starts the trace of a batch of n deliveries, received from received on (waited:
// after a wait for the first), when the pool traces batches, and returns it with the
// call that hands it over once the batch is settled.
func (c *consumer) trace(n int, received time.Time, waited bool) (*BatchTrace, func()) {
	p := c.pool
	if p.settings.Trace == nil {
		return nil, func() {}
	}
	trace := &BatchTrace{Queue: c.queue, Deliveries: n}
	trace.Add(PhaseReceive, received)
	if waited {
		trace.AMQPRoundTrips++
	}
	return trace, func() {
		trace.Wall = time.Since(received)
		p.settings.Trace(trace)
	}
}

// wrap says which queue, on which broker, err stopped.
func (c *consumer) wrap(err error) error {
	return fmt.Errorf("consume %s on %s: %w", c.queue, c.ep, err)
}

func subscribe(ch *amqp.Channel, queue string, opts ConsumeOptions) (<-chan amqp.Delivery, error) {
	if err := ch.Qos(opts.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("set prefetch: %w", err)
	}
	deliveries, err := ch.Consume(queue, opts.ConsumerTag, false, true, false, false, nil)
	if isCode(err, amqp.AccessRefused) {
		return nil, fmt.Errorf("%w: %w", ErrExclusiveConsumer, err)
	}
	return deliveries, err
}

// forward moves deliveries into a buffered channel as soon as they arrive.
// amqp091-go hands them over through an unbuffered channel, so without this
// a non-blocking receive would miss deliveries that have in fact arrived, and
// batches would stay small. Prefetch bounds the deliveries in flight, so the
// buffer never fills up.
func forward(deliveries <-chan amqp.Delivery, size int, stop <-chan struct{}) <-chan amqp.Delivery {
	out := make(chan amqp.Delivery, size)
	go func() {
		defer close(out)
		for d := range deliveries {
			select {
			case out <- d:
			case <-stop:
				return
			}
		}
	}()
	return out
}

// nextBatch waits for one delivery, the end of ctx, the fence or the failure of the
// settle in flight (failed), then takes the
// deliveries that are already buffered, up to limit, without waiting. open is
// false when the deliveries channel has closed; the batch in hand is then
// useless because it can no longer be acknowledged.
func nextBatch(ctx context.Context, deliveries <-chan amqp.Delivery, limit int, fence, failed <-chan struct{}) (batch []amqp.Delivery, open bool) {
	select {
	case <-ctx.Done():
		return nil, true
	case <-fence:
		return nil, true
	case <-failed:
		return nil, true
	case d, ok := <-deliveries:
		if !ok {
			return nil, false
		}
		batch = append(batch, d)
	}
	for len(batch) < limit {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return nil, false
			}
			batch = append(batch, d)
		default:
			return batch, true
		}
	}
	return batch, true
}

// isClosed tells whether c is closed; a nil channel never is.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// endReason says why the deliveries channel closed. The library notifies the
// cancel and close listeners before it closes the consumers, so a reason is there
// already when there is one.
func endReason(closed <-chan *amqp.Error, cancelled <-chan string) error {
	select {
	case tag, ok := <-cancelled:
		if ok {
			return fmt.Errorf("%w: consumer %s", ErrConsumerCancelled, tag)
		}
	default:
	}
	select {
	case e, ok := <-closed:
		if ok && e != nil {
			return fmt.Errorf("channel closed: %w", e)
		}
		return errors.New("channel closed")
	default:
		return errors.New("deliveries ended without a reason from the broker")
	}
}
