package main

import (
	"context"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// The figures publish with the producer's own code, simulate.Producer: persistent messages
// with the contract's headers, each confirmed before Publish returns (pipelined in windows),
// the topology declared on first use.

// producerConnection names the benchmark's producer connections apart from the service's
// ("brokerswitch"), which rabbitFootprint counts.
const producerConnection = "bench-producer"

// newProducer is a producer on urls, broker 0 first, declaring queues as t says; it is
// closed when the figure ends. It never notifies: the figures that rotate tell the service
// themselves (stack.Notify).
func (s *figure) newProducer(t broker.Topology, urls ...string) *simulate.Producer {
	eps, err := broker.ParseEndpoints(strings.Join(urls, ","))
	s.check(err, "producer endpoints")
	p, err := simulate.New(simulate.Config{
		Brokers: eps, Queues: t.Queues, RetryTTL: t.RetryTTL, QueueType: t.Type,
		Notify: simulate.NotifyNone, ConnectionName: producerConnection,
	})
	s.check(err, "producer")
	s.Cleanup(func() { _ = p.Close() })
	return p
}

// messages are events as the producer publishes them, each with the extra headers (nil:
// none).
func messages(extra amqp.Table, events ...payloads.Event) []simulate.Message {
	out := make([]simulate.Message, len(events))
	for i, ev := range events {
		out[i] = simulate.Message{Queue: ev.Queue, Event: ev.Event, Action: ev.Action, DeliveryID: ev.DeliveryID, Body: ev.Body, Extra: extra}
	}
	return out
}

// publishAll publishes events to a vhost of its own at url, declaring the service's
// default topology there, and closes the producer once every message is confirmed.
func (s *figure) publishAll(url string, events []payloads.Event) {
	p := s.newProducer(broker.Topology{}, url)
	s.check(p.Publish(context.Background(), messages(nil, events...)...), "publish")
	_ = p.Close()
}
