package broker

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
)

// A producer's header made a new message look returned (a retry count of its own, say),
// and a Leftover Drain that reads only returned messages read it early, ahead of the
// producer's notification. Only the broker's x-death for this queue, or the whole set of
// stamps of a copy to -error for this queue, count now.
func TestReturnedTrustsOnlyTheBrokerAndOurStamps(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	stamps := func(queue, at string) amqp.Table {
		return amqp.Table{HeaderErrorQueue: queue, HeaderErrorAt: at, HeaderErrorReason: "invalid JSON", HeaderRetryCycles: int64(1)}
	}
	rejectedFrom := func(queue string) amqp.Table {
		return amqp.Table{"x-death": []any{
			amqp.Table{"queue": queue + "-retry", "reason": "expired", "count": int64(1)},
			amqp.Table{"queue": queue, "reason": "rejected", "count": int64(1)},
		}}
	}
	for _, c := range []struct {
		name    string
		headers amqp.Table
		want    bool
	}{
		{"a new message", amqp.Table{"x-github-event": "issues"}, false},
		{"a producer's x-retry-cycles", amqp.Table{"x-retry-cycles": int64(3)}, false},
		{"our retry count alone", amqp.Table{HeaderRetryCycles: int64(1)}, false},
		{"a reason alone", amqp.Table{HeaderErrorReason: "made up"}, false},
		{"an x-death of another queue", rejectedFrom("pushes"), false},
		{"an x-death that is not a rejection", amqp.Table{"x-death": []any{amqp.Table{"queue": "issues", "reason": "expired", "count": int64(1)}}}, false},
		{"stamps for another queue", stamps("pushes", past), false},
		{"stamps from the future", stamps("issues", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), false},
		{"stamps without a time", stamps("issues", "soon"), false},
		{"back from -retry", rejectedFrom("issues"), true},
		{"expired out of its -retry queue", amqp.Table{"x-death": []any{amqp.Table{"queue": "issues-retry", "reason": "expired", "count": int64(1)}}}, true},
		{"moved back from -error", stamps("issues", past), true},
	} {
		assert.Equal(t, c.want, Returned(amqp.Delivery{Headers: c.headers}, "issues"), c.name)
	}
	copied, _ := errorCopy(amqp.Delivery{Headers: amqp.Table{"x-github-event": "issues"}},
		errorHeaders{reason: "invalid JSON", at: time.Now().Add(-time.Second), queue: "issues", retryCycles: 2}, 0)
	assert.True(t, Returned(amqp.Delivery{Headers: copied.Headers}, "issues"), "a copy to -error, moved back")
}
