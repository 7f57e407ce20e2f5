package ingest

import (
	"bytes"
	"encoding/json"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// example returns the body of the vendored example with that name.
func example(t testing.TB, name string) []byte {
	t.Helper()
	for _, e := range payloads.All() {
		if e.Name == name {
			return e.Body
		}
	}
	t.Fatalf("no vendored example %s", name)
	return nil
}

// edit decodes a payload, lets change modify it and encodes it again. Numbers stay
// json.Number so ids survive unchanged.
func edit(t testing.TB, body []byte, change func(p map[string]any)) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var p map[string]any
	require.NoError(t, dec.Decode(&p))
	change(p)
	out, err := json.Marshal(p)
	require.NoError(t, err)
	return out
}

// object returns p[key] as an object, for nested edits.
func object(p map[string]any, key string) map[string]any { return p[key].(map[string]any) }

// delivery builds a delivery with the contract's headers.
func delivery(event, id string, body []byte) amqp.Delivery {
	return amqp.Delivery{
		Headers: amqp.Table{HeaderEvent: event, HeaderDelivery: id},
		Body:    body,
	}
}

// withDeaths adds RabbitMQ's x-death header, as after cycles trips through queue-retry.
func withDeaths(d amqp.Delivery, queue string, cycles int) amqp.Delivery {
	h := amqp.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	h["x-death"] = []any{
		amqp.Table{"queue": queue + "-retry", "reason": "expired", "count": int64(cycles)},
		amqp.Table{"queue": queue, "reason": "rejected", "count": int64(cycles)},
	}
	d.Headers = h
	return d
}
