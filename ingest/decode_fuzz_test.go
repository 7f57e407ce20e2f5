package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// Shapes of the headers a fuzzed delivery carries, as bits of FuzzDecode's shape argument:
// publishers send strings as AMQP "S" or "x", may leave a header out or send another type,
// and RabbitMQ adds x-death when it dead-letters.
const (
	shapeEventBytes    = 1 << iota // x-github-event as a byte array
	shapeDeliveryBytes             // x-github-delivery as a byte array
	shapeNoEvent                   // x-github-event missing
	shapeNoDelivery                // x-github-delivery missing
	shapeEventNumber               // x-github-event an integer
	shapeDeath                     // an x-death entry for the queue
)

// FuzzDecode feeds Decode arbitrary headers and bodies, seeded with every vendored GitHub
// payload: it must never panic, it fails only with ErrMalformed, and what it accepts is
// valid JSON and holds the delivery's headers exactly, within the ledger's limits.
func FuzzDecode(f *testing.F) {
	for _, ex := range payloads.All() {
		f.Add(ex.Event, "72d3162e-cc78-11e3-81ab-4c9367dc0958", ex.Body, uint8(0))
	}
	opened := payloads.Find("pull_request", "opened")[0].Body
	f.Add("pull_request", "d-1", opened, uint8(shapeEventBytes|shapeDeliveryBytes|shapeDeath))
	f.Add("pull_request", "d-2", opened, uint8(shapeNoEvent))
	f.Add("pull_request", "d-3", opened, uint8(shapeNoDelivery))
	f.Add("pull_request", "d-4", opened, uint8(shapeEventNumber))
	f.Add("pull_request", "d\x00", opened, uint8(0))
	f.Add("Pull-Request", "d-5", opened, uint8(0))
	f.Add("issues", "d-6", []byte(`{not json`), uint8(0))
	f.Add("issues", "d-7", []byte(`[]`), uint8(0))
	f.Add("issues", "d-8", []byte(`{"action": 7}`), uint8(0))
	f.Add("issues", "d-9", []byte(`{"action":"opened","issue":{"node_id":"I_1","state":"merged"},"repository":{"id":1}}`), uint8(0))
	f.Add("push", "d-10", []byte(`{"ref":"refs/heads/main","repository":{"id":1}} trailing`), uint8(0))
	f.Add("unknown_event", "d-11", []byte(`{"action":"x","sender":{"id":"not a number"}}`), uint8(0))
	f.Add("push", strings.Repeat("x", 300), []byte(`{}`), uint8(0))

	f.Fuzz(func(t *testing.T, event, delivery string, body []byte, shape uint8) {
		headers := amqp.Table{}
		switch {
		case shape&shapeNoEvent != 0:
		case shape&shapeEventNumber != 0:
			headers[HeaderEvent] = int64(len(event))
		case shape&shapeEventBytes != 0:
			headers[HeaderEvent] = []byte(event)
		default:
			headers[HeaderEvent] = event
		}
		switch {
		case shape&shapeNoDelivery != 0:
		case shape&shapeDeliveryBytes != 0:
			headers[HeaderDelivery] = []byte(delivery)
		default:
			headers[HeaderDelivery] = delivery
		}
		if shape&shapeDeath != 0 {
			headers["x-death"] = []any{amqp.Table{"queue": "issues", "reason": "rejected", "count": int64(shape)}}
		}

		ev, err := Decode(amqp.Delivery{Headers: headers, Body: body})

		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode failed without ErrMalformed: %v", err)
			}
			if ev.DeliveryID != "" && ev.DeliveryID != delivery {
				t.Fatalf("a malformed delivery keeps its id as sent: got %q, sent %q", ev.DeliveryID, delivery)
			}
			if reason := cleanText(err.Error()); !utf8.ValidString(reason) || strings.ContainsRune(reason, 0) {
				t.Fatalf("the reason must be storable in the ledger: %q", reason)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not valid JSON: %q", body)
		}
		if shape&(shapeNoEvent|shapeNoDelivery|shapeEventNumber) != 0 {
			t.Fatalf("a delivery without its headers was accepted: shape %b", shape)
		}
		if ev.DeliveryID != delivery || ev.Type != event {
			t.Fatalf("accepted delivery %q event %q, sent %q and %q", ev.DeliveryID, ev.Type, delivery, event)
		}
		if len(ev.DeliveryID) > maxDeliveryIDLength || !utf8.ValidString(ev.DeliveryID) {
			t.Fatalf("accepted a delivery id the ledger cannot key: %q", ev.DeliveryID)
		}
		for _, r := range ev.DeliveryID {
			if !unicode.IsPrint(r) {
				t.Fatalf("accepted a delivery id with the non-printable %q", r)
			}
		}
		for _, r := range ev.Type {
			if (r < 'a' || r > 'z') && r != '_' {
				t.Fatalf("accepted the event name %q", ev.Type)
			}
		}
		if shape&shapeDeath != 0 && ev.retryCycles("issues") != int(shape) {
			t.Fatalf("retry cycles %d, want %d", ev.retryCycles("issues"), shape)
		}
		if ev.Payload != nil {
			if err := validate(ev.Type, ev.Payload); err != nil {
				t.Fatalf("accepted a payload that does not validate: %v", err)
			}
		}
	})
}

// FuzzDecodeNesting wraps a fuzzed value in up to two million levels of arrays and
// objects, in a fuzzed order, inside a fuzzed prefix and suffix, closed or not: the
// decoder recursed once per level, and 6 MB of "[" overflowed the goroutine stack. Decode
// must return, failing only with ErrMalformed, and what it accepts nests at most
// maxNesting deep, as the standard library's non-recursive tokenizer counts it.
func FuzzDecodeNesting(f *testing.F) {
	f.Add("issues", uint32(3_000_000), []byte{0}, []byte(``), []byte(`{"action":"opened","issue":`), []byte(`}`), true)
	f.Add("issues", uint32(1_000_000), []byte{1}, []byte(`1`), []byte(`{"action":"opened","issue":`), []byte(`}`), true)
	f.Add("pull_request", uint32(500_000), []byte{0, 1, 1}, []byte(`"x"`), []byte(`{"x":`), []byte(`}`), false)
	f.Add("brand_new_event", uint32(maxNesting-1), []byte{0, 1}, []byte(`null`), []byte(`{"x":`), []byte(`}`), true)
	f.Add("installation", uint32(100_000), []byte{1}, []byte(`{}`), []byte(`{"installation":{"id":1},"repositories":[`), []byte(`]}`), true)
	f.Add("push", uint32(maxNesting), []byte{0}, []byte(``), []byte(`{"ref":"r","repository":{"id":1},"x":"[[[","y":`), []byte(`}`), true)

	f.Fuzz(func(t *testing.T, event string, depth uint32, order, inner, prefix, suffix []byte, closed bool) {
		depth %= 1 << 21
		if len(order) == 0 {
			order = []byte{0}
		}
		var b strings.Builder
		b.Write(prefix)
		for i := range depth {
			if order[int(i)%len(order)]%2 == 0 {
				b.WriteString("[")
			} else {
				b.WriteString(`{"k":`)
			}
		}
		b.Write(inner)
		if closed {
			for i := int(depth) - 1; i >= 0; i-- {
				if order[i%len(order)]%2 == 0 {
					b.WriteString("]")
				} else {
					b.WriteString("}")
				}
			}
		}
		b.Write(suffix)
		body := []byte(b.String())

		_, err := Decode(amqp.Delivery{Headers: amqp.Table{HeaderEvent: event, HeaderDelivery: "d-1"}, Body: body})
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode failed without ErrMalformed: %v", err)
			}
			return
		}
		if got := tokenDepth(t, body); got > maxNesting {
			t.Fatalf("accepted a body nested %d deep, past MaxNesting", got)
		}
	})
}

// tokenDepth is the deepest nesting of a valid JSON document, counted by the standard
// library's tokenizer, which keeps its own stack instead of recursing.
func tokenDepth(t *testing.T, body []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return deepest
		}
		if err != nil {
			t.Fatalf("accepted a body the standard library cannot read: %v", err)
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}
