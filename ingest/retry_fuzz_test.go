package ingest

import (
	"math"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
)

// asHeader turns a count into each type an AMQP table may carry it as, and into a string.
var asHeader = []func(int64) any{
	func(n int64) any { return n },
	func(n int64) any { return int32(n) },
	func(n int64) any { return int16(n) },
	func(n int64) any { return int8(n) },
	func(n int64) any { return uint64(n) },
	func(n int64) any { return uint32(n) },
	func(n int64) any { return uint8(n) },
	func(int64) any { return "not a number" },
}

// FuzzRetryHeaders feeds the retry count arbitrary x-death entries and our own
// retry-cycles header, in every integer type AMQP carries: the count is never negative,
// never beyond maxRetryCount (no wrap-around, no retrying forever), and an honest count
// reads as itself.
func FuzzRetryHeaders(f *testing.F) {
	f.Add(int64(3), uint8(0), int64(0), "issues", "rejected")
	f.Add(int64(-5), uint8(0), int64(0), "issues", "rejected")
	f.Add(int64(math.MaxInt64), uint8(7), int64(-1), "issues", "rejected")
	f.Add(int64(2), uint8(3), int64(10), "issues", "expired")
	f.Add(int64(1)<<40, uint8(4), int64(1)<<40, "issues-retry", "rejected")
	f.Fuzz(func(t *testing.T, count int64, kind uint8, ours int64, queue, reason string) {
		v := asHeader[int(kind)%len(asHeader)](count)
		headers := amqp.Table{
			HeaderDelivery: "d-1", HeaderEvent: "issues",
			"x-death": []any{amqp.Table{"queue": queue, "reason": reason, "count": v}},
		}
		if ours != 0 {
			headers[broker.HeaderRetryCycles] = ours
		}
		ev, _ := Decode(amqp.Delivery{Headers: headers, Body: []byte(`{}`)})
		got := ev.retryCycles("issues")
		if got < 0 || got > maxRetryCount {
			t.Fatalf("retry cycles %d out of [0, %d]", got, maxRetryCount)
		}
		if kind%uint8(len(asHeader)) == 0 && queue == "issues" && reason == "rejected" && ours == 0 &&
			count >= 0 && count <= maxRetryCount && int64(got) != count {
			t.Fatalf("an honest count %d read as %d", count, got)
		}
	})
}
