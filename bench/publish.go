package main

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// confirmWindow is how many publishes may wait for their confirm at once.
const confirmWindow = 1000

// producer publishes as the producer does (persistent, confirmed, the two headers), with
// confirms pipelined so that publishing is never what a figure measures.
type producer struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	pending []*amqp.DeferredConfirmation
	// extra headers go on every publish besides the producer's two.
	extra amqp.Table
}

// dialNamed connects with a connection name that tells it apart from the service's
// ("brokerswitch") in rabbitmqctl list_connections.
func dialNamed(url, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	return amqp.DialConfig(url, amqp.Config{Properties: props, Heartbeat: 10 * time.Second})
}

func newProducer(url string) (*producer, error) {
	conn, err := dialNamed(url, "bench-producer")
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("producer channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		conn.Close()
		return nil, fmt.Errorf("producer confirm mode: %w", err)
	}
	return &producer{conn: conn, ch: ch}, nil
}

func (p *producer) publish(ctx context.Context, ev payloads.Event) error {
	headers := amqp.Table{"x-github-event": ev.Event, "x-github-delivery": ev.DeliveryID}
	for k, v := range p.extra {
		headers[k] = v
	}
	conf, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", ev.Queue, false, false, amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Headers:      headers,
		Body:         ev.Body,
	})
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	p.pending = append(p.pending, conf)
	if len(p.pending) >= confirmWindow {
		return p.wait(ctx, confirmWindow/2)
	}
	return nil
}

// wait waits for the confirms of all but keep publishes.
func (p *producer) wait(ctx context.Context, keep int) error {
	for len(p.pending) > keep {
		ok, err := p.pending[0].WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("confirm: %w", err)
		}
		if !ok {
			return fmt.Errorf("broker nacked a publish")
		}
		p.pending = p.pending[1:]
	}
	return nil
}

func (p *producer) flush(ctx context.Context) error { return p.wait(ctx, 0) }

func (p *producer) close() { _ = p.conn.Close() }

// publishAll publishes events to the broker at url and waits for every confirm.
func publishAll(ctx context.Context, url string, events []payloads.Event) error {
	return publishAllWith(ctx, url, nil, events)
}

// publishAllWith is publishAll with extra headers on every message.
func publishAllWith(ctx context.Context, url string, extra amqp.Table, events []payloads.Event) error {
	p, err := newProducer(url)
	if err != nil {
		return err
	}
	defer p.close()
	p.extra = extra
	for _, ev := range events {
		if err := p.publish(ctx, ev); err != nil {
			return err
		}
	}
	return p.flush(ctx)
}
