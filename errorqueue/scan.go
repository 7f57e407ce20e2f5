package errorqueue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
)

// confirmTimeout bounds the wait for the broker to confirm one copy; a broker that
// blocks publishers (a resource alarm) answers late.
const confirmTimeout = 30 * time.Second

// headerRequeuedAt is set on a message requeued from -error: when, RFC 3339 UTC.
const headerRequeuedAt = "x-requeued-at"

// action is what a scan does with a message it got.
type action int

const (
	// keep gives the message back, in its place, when the scan's channel closes.
	keep action = iota
	// requeue copies it to its own queue and takes it from -error once the copy is confirmed.
	requeue
	// take takes it from -error.
	take
)

// visitor decides what a scan does with each message; m is filled by the scan.
type visitor func(ctx context.Context, d amqp.Delivery, m *Message) (action, error)

// scanner holds the channels of one scan of one -error queue.
type scanner struct {
	s     *Service
	index int
	queue string
	ep    broker.Endpoint
	// get gets the messages, in transactional mode: an ack takes effect at its commit,
	// which the broker answers, so that a message is known to be taken.
	get *amqp.Channel
	// pub publishes the copies, in confirm mode; opened at the first copy.
	pub     *amqp.Channel
	returns chan amqp.Return
	// copied runs between a requeue's confirmed copy and the take of its original.
	copied func(context.Context, Message) error
	// taken counts the originals taken; refreshed the copies put at -error's tail.
	taken, refreshed int
}

// scan hands visit each message that {queue}-error held on broker index when the scan
// started, in queue order, and returns how many it held. What visit keeps goes back, in
// its place, when the scan's channel closes; a kept message of a quorum queue that was
// delivered refreshAt times is refreshed first (see the package's comment). A message that
// arrives during the scan is not visited.
//
// A requeue's copy is confirmed, then copied (when set) runs, then the original is taken.
// settled, when set, is told what was done with each message once it was done.
func (s *Service) scan(ctx context.Context, index int, queue string, visit visitor, copied func(context.Context, Message) error, settled func(Message, action)) (int, error) {
	eps := s.Brokers.Endpoints()
	if index < 0 || index >= len(eps) {
		return 0, fmt.Errorf("%w: no broker %d", ErrBadFilter, index)
	}
	s.scans.Lock()
	defer s.scans.Unlock()
	sc := &scanner{s: s, index: index, queue: queue, ep: eps[index], copied: copied}
	defer sc.close()
	var err error
	if sc.get, err = s.Brokers.Channel(ctx, index); err != nil {
		return 0, fmt.Errorf("broker %d (%s) cannot be reached: %w", index, sc.ep, err)
	}
	errq := broker.ErrorQueue(queue)
	info, err := sc.get.QueueDeclarePassive(errq, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("%s on broker %d (%s): %w", errq, index, sc.ep, err)
	}
	if err := sc.get.Tx(); err != nil {
		return 0, fmt.Errorf("%s on broker %d (%s): transactional mode: %w", errq, index, sc.ep, err)
	}
	defer sc.awaitReturns(ctx, info.Messages)
	for pos := range info.Messages {
		if err := ctx.Err(); err != nil {
			return info.Messages, err
		}
		d, ok, err := sc.get.Get(errq, false)
		if err != nil {
			return info.Messages, fmt.Errorf("get from %s on broker %d (%s): %w", errq, index, sc.ep, err)
		}
		if !ok {
			break // taken by another reader meanwhile
		}
		m := describe(d, index, queue, pos)
		act, err := visit(ctx, d, &m)
		if err != nil {
			return info.Messages, err
		}
		if err := sc.apply(ctx, d, m, act); err != nil {
			return info.Messages, err
		}
		if settled != nil {
			settled(m, act)
		}
	}
	return info.Messages, nil
}

func (sc *scanner) apply(ctx context.Context, d amqp.Delivery, m Message, act action) error {
	errq := broker.ErrorQueue(sc.queue)
	switch act {
	case requeue:
		if err := sc.copyTo(ctx, sc.queue, requeueCopy(d, time.Now())); err != nil {
			return err
		}
		if sc.copied != nil {
			if err := sc.copied(ctx, m); err != nil {
				return err
			}
		}
		return sc.take(d)
	case take:
		return sc.take(d)
	}
	if deliveryCount(d) < refreshAt {
		return nil
	}
	if err := sc.copyTo(ctx, errq, refreshCopy(d)); err != nil {
		return fmt.Errorf("refresh a message delivered %d times: %w", deliveryCount(d), err)
	}
	sc.refreshed++
	sc.s.logger().InfoContext(ctx, "message of a quorum -error queue refreshed before its delivery limit",
		"queue", errq, "broker", sc.ep, "message_id", d.MessageId, "delivery_count", deliveryCount(d))
	return sc.take(d)
}

// take acknowledges d and commits: once it returns, d is gone from -error.
func (sc *scanner) take(d amqp.Delivery) error {
	if err := sc.get.Ack(d.DeliveryTag, false); err != nil {
		return fmt.Errorf("take message %s from %s on broker %d: %w", d.MessageId, broker.ErrorQueue(sc.queue), sc.index, err)
	}
	if err := sc.get.TxCommit(); err != nil {
		return fmt.Errorf("take message %s from %s on broker %d: %w", d.MessageId, broker.ErrorQueue(sc.queue), sc.index, err)
	}
	sc.taken++
	return nil
}

// returnsWait bounds the wait for a scan's kept messages to be back in their queue.
const returnsWait = 10 * time.Second

// awaitReturns closes the get channel and waits until the queue counts as ready at least
// what the scan kept: a quorum queue takes back a closed channel's messages after the
// close's answer, and a scan that started before they were back would count, and read,
// fewer than the queue holds.
func (sc *scanner) awaitReturns(ctx context.Context, held int) {
	if sc.get == nil {
		return
	}
	_ = sc.get.Close()
	sc.get = nil
	want := held - sc.taken + sc.refreshed
	ch, err := sc.s.Brokers.Channel(ctx, sc.index)
	if err != nil {
		return
	}
	defer ch.Close()
	deadline := time.Now().Add(returnsWait)
	for {
		info, err := ch.QueueDeclarePassive(broker.ErrorQueue(sc.queue), true, false, false, false, nil)
		if err != nil || info.Messages >= want || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// errRefused is wrapped into the error of a copy the broker did not take: the original
// stays in -error.
var errRefused = errors.New("copy refused by the broker")

// copyTo publishes msg to queue on the scan's broker and waits for the broker's confirm.
// The publish is mandatory: a copy no queue takes comes back as a return, before the
// confirm, and counts as refused, as does a negative confirm (a full queue that rejects
// publishes, say).
func (sc *scanner) copyTo(ctx context.Context, queue string, msg amqp.Publishing) error {
	if err := sc.openPub(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	dc, err := sc.pub.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
	if err != nil {
		return fmt.Errorf("copy message %s to %s on broker %d: %w", msg.MessageId, queue, sc.index, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("copy message %s to %s on broker %d: no confirm: %w", msg.MessageId, queue, sc.index, err)
	}
	select {
	case r := <-sc.returns:
		return fmt.Errorf("copy message %s to %s on broker %d: %w: returned %d %s", msg.MessageId, queue, sc.index, errRefused, r.ReplyCode, r.ReplyText)
	default:
	}
	if !acked {
		return fmt.Errorf("copy message %s to %s on broker %d: %w: negative confirm (is the queue full?)", msg.MessageId, queue, sc.index, errRefused)
	}
	return nil
}

func (sc *scanner) openPub(ctx context.Context) error {
	if sc.pub != nil {
		return nil
	}
	ch, err := sc.s.Brokers.Channel(ctx, sc.index)
	if err != nil {
		return fmt.Errorf("broker %d (%s): %w", sc.index, sc.ep, err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return fmt.Errorf("broker %d (%s): confirm mode: %w", sc.index, sc.ep, err)
	}
	sc.pub = ch
	sc.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
	return nil
}

// close closes the channels: what was got and not taken goes back to -error.
func (sc *scanner) close() {
	if sc.pub != nil {
		_ = sc.pub.Close()
	}
	if sc.get != nil {
		_ = sc.get.Close()
	}
}

// deliveryCount is x-delivery-count, which quorum queues set on a message delivered before.
func deliveryCount(d amqp.Delivery) int64 {
	switch v := d.Headers["x-delivery-count"].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int:
		return int64(v)
	}
	return 0
}

// publishing is d as a new publish, with its headers less those named in drop.
func publishing(d amqp.Delivery, drop ...string) amqp.Publishing {
	headers := maps.Clone(d.Headers)
	for _, k := range drop {
		delete(headers, k)
	}
	return amqp.Publishing{
		Headers: headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, Priority: d.Priority, CorrelationId: d.CorrelationId,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
}

// refreshCopy is d as it goes back to the tail of its -error queue, uncounted.
func refreshCopy(d amqp.Delivery) amqp.Publishing {
	return publishing(d, "x-delivery-count")
}

// requeueCopy is d as it goes back to its own queue: without the -error headers, which
// a new rejection would write again, and with when it was requeued. Its retry cycles
// (brokerswitch-retry-cycles, x-death) are kept: should it fail once more, it goes
// straight back to -error.
func requeueCopy(d amqp.Delivery, now time.Time) amqp.Publishing {
	msg := publishing(d, "x-delivery-count", broker.HeaderErrorReason, broker.HeaderErrorAt, broker.HeaderErrorQueue, broker.HeaderErrorCut)
	if msg.Headers == nil {
		msg.Headers = amqp.Table{}
	}
	msg.Headers[headerRequeuedAt] = now.UTC().Format(time.RFC3339)
	return msg
}
