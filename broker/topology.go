package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrTopologyMismatch is wrapped into the error of a declaration that RabbitMQ
// refused because the queue exists with other arguments. Retrying soon will not
// help: someone has to delete the queue or fix the configuration.
var ErrTopologyMismatch = errors.New("topology mismatch")

// Topology is the set of queues the producer and the consumer both declare.
// For each logical queue q there are three durable queues: q dead-letters to
// q-retry, q-retry dead-letters back to q after RetryTTL, and q-error keeps
// rejected messages.
type Topology struct {
	Queues   []string
	RetryTTL time.Duration
}

// RetryQueue is the name of the queue where q's retried messages wait out the retry TTL.
func RetryQueue(q string) string { return q + "-retry" }

// ErrorQueue is the name of the queue that receives q's rejected messages.
func ErrorQueue(q string) string { return q + "-error" }

type queueDecl struct {
	name string
	args amqp.Table
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
		decls = append(decls,
			queueDecl{q, amqp.Table{
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": RetryQueue(q),
			}},
			queueDecl{RetryQueue(q), amqp.Table{
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": q,
				"x-message-ttl":             ttl, // int64: RabbitMQ takes any integer type
			}},
			queueDecl{ErrorQueue(q), nil},
		)
	}
	return decls, nil
}

// DeclareTopology declares the queues of t on broker index. It is idempotent.
// When a queue exists with other arguments, the error wraps ErrTopologyMismatch
// and RabbitMQ's reply, which names the queue and the argument.
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
		ch, err := chans.get(ctx)
		if err != nil {
			return fmt.Errorf("declare queue %s: %w", d.name, err)
		}
		if _, err := ch.QueueDeclare(d.name, true, false, false, false, d.args); err != nil {
			if isCode(err, amqp.PreconditionFailed) {
				return fmt.Errorf("declare queue %s on %s: %w: %w", d.name, ep, ErrTopologyMismatch, err)
			}
			return fmt.Errorf("declare queue %s on %s: %w", d.name, ep, err)
		}
	}
	b.setDeclared(key, conn)
	return nil
}

// key identifies a topology among those declared on one broker.
func (t Topology) key() string {
	return fmt.Sprintf("%q %d", t.Queues, t.RetryTTL.Milliseconds())
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

func (r *reopener) close() {
	if r.ch != nil {
		_ = r.ch.Close()
	}
}
