package main

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
)

// The figures publish with the producer's own code, simulate.Producer: persistent messages
// with the contract's headers, each confirmed before Publish returns (pipelined in windows),
// the topology declared on first use.

// producerConnection names the benchmark's producer connections apart from the service's
// ("brokerswitch") in rabbitmqctl list_connections.
const producerConnection = "bench-producer"

// newProducer is a producer as cfg says, its connections named apart from the service's;
// it is closed when the figure ends. It never notifies: the figures that rotate tell the
// service themselves (stack.Notify).
func (s *figure) newProducer(cfg simulate.Config) *simulate.Producer {
	cfg.Notify, cfg.ConnectionName = simulate.NotifyNone, producerConnection
	p, err := simulate.New(cfg)
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
	eps, err := broker.ParseEndpoints(url)
	s.check(err, "producer endpoints")
	p := s.newProducer(simulate.Config{Brokers: eps})
	s.check(p.Publish(context.Background(), messages(nil, events...)...), "publish")
	_ = p.Close()
}

// atRate calls publish rate times a second, one event each, until stop, which returns how
// many calls were made and the error that ended them early, if any.
func atRate(rate float64, publish func() error) (stop func() (int, error)) {
	done, ended := make(chan struct{}), make(chan error, 1)
	n := 0
	go func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for {
			select {
			case <-done:
				ended <- nil
				return
			case <-tick.C:
				if err := publish(); err != nil {
					ended <- err
					return
				}
				n++
			}
		}
	}()
	return func() (int, error) {
		close(done)
		err := <-ended
		return n, err
	}
}
