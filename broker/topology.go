package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrTopologyMismatch is wrapped into the error of a declaration that RabbitMQ
// refused because the queue exists with other arguments. Retrying soon will not
// help: someone has to delete the queue or fix the configuration.
var ErrTopologyMismatch = errors.New("topology mismatch")

// ErrQueueType is wrapped, beside ErrTopologyMismatch, into the error of a declaration
// refused because the queue exists with another x-queue-type than QUEUE_TYPE says.
var ErrQueueType = errors.New("queue type differs from QUEUE_TYPE")

// QueueType is the x-queue-type of every queue brokerswitch declares: it must be the
// producer's, since RabbitMQ refuses a declaration of an existing queue as another type.
type QueueType string

const (
	// Classic queues, the default.
	Classic QueueType = "classic"
	// Quorum queues: replicated, and the default type of some 4.x brokers.
	Quorum QueueType = "quorum"
)

// ParseQueueType reads a QUEUE_TYPE value.
func ParseQueueType(s string) (QueueType, error) {
	switch t := QueueType(s); t {
	case Classic, Quorum:
		return t, nil
	}
	return "", fmt.Errorf("%q: must be %q or %q", s, Classic, Quorum)
}

// quorumDeliveryLimit is x-delivery-limit on the quorum queues brokerswitch declares:
// brokerswitch counts its own retry cycles, and 4.x's default of 20 deliveries (every
// channel closed during a Postgres outage counts one) would dead-letter a message behind
// the ones after it. The largest value rather than -1, which 3.x reads as "dead-letter at
// the first redelivery".
const quorumDeliveryLimit = int64(2147483647)

// Topology is the set of queues the producer and the consumer both declare.
// For each logical queue q there are three durable queues: q dead-letters to
// q-retry, q-retry dead-letters back to q after RetryTTL, and q-error keeps
// rejected messages. Every queue is declared with Type as its x-queue-type.
type Topology struct {
	Queues   []string
	RetryTTL time.Duration
	// Type of every queue; empty means Classic.
	Type QueueType
}

// ForQueue is t for the one logical queue q.
func (t Topology) ForQueue(q string) Topology {
	t.Queues = []string{q}
	return t
}

func (t Topology) queueType() QueueType {
	if t.Type == "" {
		return Classic
	}
	return t.Type
}

// RetryQueue is the name of the queue where q's retried messages wait out the retry TTL.
func RetryQueue(q string) string { return q + "-retry" }

// ErrorQueue is the name of the queue that receives q's rejected messages.
func ErrorQueue(q string) string { return q + "-error" }

type queueDecl struct {
	name string
	args amqp.Table
	// minimal, when set, are the arguments a producer must at least declare; a queue that
	// refuses args but takes these is the producer's, declared without brokerswitch's
	// extras (single active consumer, delivery limit, at-least-once dead-lettering).
	minimal amqp.Table
	// other, when set, are the arguments brokerswitch would declare the queue with as
	// the other type: a queue that takes them is of that type.
	other amqp.Table
}

func (t Topology) declarations() ([]queueDecl, error) {
	ttl := t.RetryTTL.Milliseconds()
	if ttl < 1 {
		return nil, fmt.Errorf("retry TTL %v: must be at least 1ms", t.RetryTTL)
	}
	decls := make([]queueDecl, 0, 3*len(t.Queues))
	for _, q := range t.Queues {
		if q == "" {
			return nil, errors.New("empty queue name in topology")
		}
		decls = append(decls, declsOf(q, t.queueType(), ttl)...)
		if t.queueType() == Classic {
			quorum := declsOf(q, Quorum, ttl)
			for i := range quorum {
				decls[len(decls)-len(quorum)+i].other = quorum[i].args
			}
		}
	}
	return decls, nil
}

// declsOf are the declarations of the three queues of q as type typ.
func declsOf(q string, qt QueueType, ttl int64) []queueDecl {
	typ := string(qt)
	main := queueDecl{name: q, args: amqp.Table{
		"x-queue-type":              typ,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": RetryQueue(q),
	}}
	retry := queueDecl{name: RetryQueue(q), args: amqp.Table{
		"x-queue-type":              typ,
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q,
		"x-message-ttl":             ttl, // int64: RabbitMQ takes any integer type
	}}
	if qt == Quorum {
		main.minimal, retry.minimal = main.args, retry.args
		main.args = withArgs(main.args, amqp.Table{
			// Quorum queues ignore an exclusive consume: this keeps one reader.
			"x-single-active-consumer": true,
			"x-delivery-limit":         quorumDeliveryLimit,
			// At-most-once by default: a message dead-lettered to -retry could vanish.
			// At-least-once needs reject-publish; without a length limit it rejects nothing.
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		})
		retry.args = withArgs(retry.args, amqp.Table{
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		})
	}
	return []queueDecl{main, retry, {name: ErrorQueue(q), args: amqp.Table{"x-queue-type": typ}}}
}

// withArgs is a copy of base with extra added.
func withArgs(base, extra amqp.Table) amqp.Table {
	out := make(amqp.Table, len(base)+len(extra))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// DeclareTopology declares the queues of t on broker index. It is idempotent.
// When a queue exists with other arguments, the error wraps ErrTopologyMismatch
// and RabbitMQ's reply, which names the queue and the argument; when it exists as
// another type than t.Type, the error wraps ErrQueueType too and names the queue, the
// type found and QUEUE_TYPE.
//
// On quorum queues, a queue that refuses brokerswitch's extras (single active consumer
// and the rest) but takes the arguments a producer must declare is the producer's, and
// is used as it is: the window's fence and its workflow's singleton keep one consumer
// on it. Each refusal costs a channel; a queue costs at most two.
//
// A topology is declared once per connection: a later call on the same connection
// returns at once, which spares every window start a dozen round trips. A new
// connection (after the broker restarted, say) declares it again, and so does the call
// after a consume found a queue missing (see forgetTopology).
func (p *Pool) DeclareTopology(ctx context.Context, index int, t Topology) error {
	b, err := p.broker(index)
	if err != nil {
		return err
	}
	ep := b.ep
	decls, err := t.declarations()
	if err != nil {
		return fmt.Errorf("declare topology on %s: %w", ep, err)
	}
	conn, err := p.connection(ctx, b)
	if err != nil {
		return fmt.Errorf("declare topology: %w", err)
	}
	key := t.key()
	if b.isDeclared(key, conn) {
		return nil
	}
	chans := reopener{pool: p, index: index}
	defer chans.close()
	for _, d := range decls {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("declare topology on %s: %w", ep, err)
		}
		producers, err := declareQueue(ctx, &chans, d, t.queueType())
		if err != nil {
			return fmt.Errorf("declare queue %s on %s: %w", d.name, ep, err)
		}
		if d.minimal != nil {
			if err := p.weighQuorumQueue(ctx, &chans, conn, index, d, producers); err != nil {
				return fmt.Errorf("declare queue %s on %s: %w", d.name, ep, err)
			}
		}
	}
	b.setDeclared(key, conn)
	return nil
}

// Why a producer's quorum queue may lose order or messages, the reason label of
// brokerswitch_quorum_queue_risk.
const (
	// RiskDeliveryLimit: its x-delivery-limit is not brokerswitch's. Every channel closed
	// with a message unsettled counts a delivery (a window that ends during a Postgres
	// outage, a Leftover Drain that peeks at a kept message at the head); at the limit
	// the message is dead-lettered to -retry and comes back behind the ones after it.
	RiskDeliveryLimit = "delivery_limit"
	// RiskAtMostOnce: it dead-letters at most once, so a message dead-lettered to -retry
	// (or back) while its target is unavailable is dropped.
	RiskAtMostOnce = "at_most_once"
)

// weighQuorumQueue tells, in a warning and brokerswitch_quorum_queue_risk, whether the
// quorum queue d, declared by the producer with fewer arguments than brokerswitch's
// (producers), has a delivery limit or a dead-letter strategy that loses order or
// messages. It is not refused: the producer's queues are what there is, and a policy can
// fix them without a redeclaration. Each refused probe costs a channel.
func (p *Pool) weighQuorumQueue(ctx context.Context, chans *reopener, conn *amqp.Connection, index int, d queueDecl, producers bool) error {
	probes := []struct {
		risk, key string
		args      amqp.Table
	}{
		{RiskDeliveryLimit, "x-delivery-limit", amqp.Table{"x-delivery-limit": d.args["x-delivery-limit"]}},
		{RiskAtMostOnce, "x-dead-letter-strategy", amqp.Table{"x-dead-letter-strategy": d.args["x-dead-letter-strategy"], "x-overflow": d.args["x-overflow"]}},
	}
	for _, probe := range probes {
		if _, ok := d.args[probe.key]; !ok {
			continue // not an argument of this queue (-retry has no consumer to count)
		}
		risky := false
		if producers {
			err := chans.declare(ctx, d.name, withArgs(d.minimal, probe.args))
			switch {
			case err == nil:
			case !isCode(err, amqp.PreconditionFailed):
				return err
			case probe.risk == RiskDeliveryLimit && noLimitIsNone(conn, err):
			default:
				risky = true
			}
		}
		p.settings.Metrics.QuorumQueueRisk(index, d.name, probe.risk, risky)
		if risky {
			p.logger.WarnContext(ctx, "the producer's quorum queue may lose order or messages: declare it as docs/design.md says, or set a policy",
				"broker", index, "queue", d.name, "risk", probe.risk)
		}
	}
	return nil
}

// noLimitIsNone tells whether a refused delivery-limit probe found no limit on a broker
// older than 4.0, where a quorum queue without one redelivers without end; 4.0 made 20
// the default.
func noLimitIsNone(conn *amqp.Connection, err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) || !strings.Contains(ae.Reason, "current is none") {
		return false
	}
	v, _ := conn.Properties["version"].(string)
	return v != "" && v < "4"
}

// declareQueue declares d, and tells whether the queue is a producer's quorum queue,
// taken with its minimal arguments.
func declareQueue(ctx context.Context, chans *reopener, d queueDecl, want QueueType) (producers bool, err error) {
	err = chans.declare(ctx, d.name, d.args)
	if err == nil || !isCode(err, amqp.PreconditionFailed) {
		return false, err
	}
	if found, ok := typeFound(err); ok {
		return false, typeError(d.name, found, want, err)
	}
	// RabbitMQ names the first argument that differs, and compares x-queue-type after the
	// others: one more declaration tells the type.
	switch {
	case d.minimal != nil:
		// A producer's quorum queue, without brokerswitch's extras?
		err2 := chans.declare(ctx, d.name, d.minimal)
		if found, ok := typeFound(err2); ok {
			return false, typeError(d.name, found, want, err2)
		}
		if isCode(err2, amqp.PreconditionFailed) {
			return false, fmt.Errorf("%w: %w", ErrTopologyMismatch, err2)
		}
		return err2 == nil, err2
	case d.other != nil:
		// The queue brokerswitch would have declared as the other type?
		err2 := chans.declare(ctx, d.name, d.other)
		found, ok := typeFound(err2)
		switch {
		case err2 == nil:
			return false, typeError(d.name, QueueType(fmt.Sprint(d.other["x-queue-type"])), want, err)
		case ok && found != want:
			return false, typeError(d.name, found, want, err2)
		case !isCode(err2, amqp.PreconditionFailed):
			return false, err2
		}
	}
	return false, fmt.Errorf("%w: %w", ErrTopologyMismatch, err)
}

// typeArg matches the x-queue-type in RabbitMQ's 406 text, 3.10's "received 'quorum' but
// current is 'classic'" and 4.x's "received the value 'classic' of type 'longstr' but
// current is the value 'quorum' of type 'longstr'" (or "current is none": classic).
var typeArg = regexp.MustCompile(`inequivalent arg 'x-queue-type'.* but current is (?:the value )?(?:'([^']*)'|none)`)

// typeFound is the type a refused declaration's reply says the queue has.
func typeFound(err error) (QueueType, bool) {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return "", false
	}
	m := typeArg.FindStringSubmatch(ae.Reason)
	if m == nil {
		return "", false
	}
	if m[1] == "" {
		return Classic, true
	}
	return QueueType(m[1]), true
}

func typeError(queue string, found, want QueueType, err error) error {
	return fmt.Errorf("%w: %w: queue %s is a %s queue, but QUEUE_TYPE is %s (it must be the producer's): %w",
		ErrTopologyMismatch, ErrQueueType, queue, found, want, err)
}

// key identifies a topology among those declared on one broker.
func (t Topology) key() string {
	return fmt.Sprintf("%q %d %s", t.Queues, t.RetryTTL.Milliseconds(), t.queueType())
}

// isDeclared tells whether the topology with key was declared on conn, which is open.
func (b *brokerConn) isDeclared(key string, conn *amqp.Connection) bool {
	b.declaredMu.Lock()
	defer b.declaredMu.Unlock()
	return b.declared[key] == conn && !conn.IsClosed()
}

func (b *brokerConn) setDeclared(key string, conn *amqp.Connection) {
	b.declaredMu.Lock()
	defer b.declaredMu.Unlock()
	if b.declared == nil {
		b.declared = map[string]*amqp.Connection{}
	}
	b.declared[key] = conn
}

// forgetTopology makes the next DeclareTopology on broker index declare again: a queue
// was found missing (deleted by an operator), so what was declared is gone.
func (p *Pool) forgetTopology(index int) {
	b, err := p.broker(index)
	if err != nil {
		return
	}
	b.declaredMu.Lock()
	defer b.declaredMu.Unlock()
	clear(b.declared)
}

// reopener hands out a channel of one broker and opens a new one after the
// broker closed the previous, which it does after every refused declaration.
type reopener struct {
	pool  *Pool
	index int
	ch    *amqp.Channel
}

func (r *reopener) get(ctx context.Context) (*amqp.Channel, error) {
	if r.ch != nil && !r.ch.IsClosed() {
		return r.ch, nil
	}
	ch, err := r.pool.Channel(ctx, r.index)
	if err != nil {
		return nil, err
	}
	r.ch = ch
	return ch, nil
}

// declare declares queue, durable, with args on a channel that is open.
func (r *reopener) declare(ctx context.Context, queue string, args amqp.Table) error {
	ch, err := r.get(ctx)
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(queue, true, false, false, false, args)
	return err
}

func (r *reopener) close() {
	if r.ch != nil {
		_ = r.ch.Close()
	}
}
