//go:build integration

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// TestHostileBodiesGoToError publishes bodies that no decoder may choke on between good
// events, on the real stack. A body of nested arrays made the worker die of a stack
// overflow (and this test process with it), then every worker after it. Each must end in
// its -error queue with its reason, the events behind it must be applied, and the worker
// must go on consuming.
func TestHostileBodiesGoToError(t *testing.T) {
	s := newStack(t, 1, nil)
	const depth = 3_000_000 // 6 MB of brackets, as in the review
	install := `{"action":"created","installation":{"id":1},"repositories":[`
	hostile := []struct {
		queue, event, id, body, reason string
	}{
		{"issues", "issues", "deep-arrays", `{"action":"opened","issue":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`,
			"body nests arrays and objects deeper than 64 levels"},
		{"issues", "issues", "deep-objects", `{"action":"opened","issue":` + strings.Repeat(`{"a":`, depth/2) + "1" + strings.Repeat("}", depth/2) + `}`,
			"body nests arrays and objects deeper than 64 levels"},
		{"installations", "installation", "wide-array", install + strings.Repeat(`{},`, depth) + `{}]}`,
			"more than one per 64 bytes, which GitHub never sends"},
		{"issues", "issues", "invalid-utf8", `{"action":"opened","issue":{"title":"caf` + "\xe9" + `"}}`,
			"body is not valid UTF-8 (first invalid byte at offset 40)"},
		{"pushes", "push", "array-root", `[{"ref":"refs/heads/main"}]`, "body is not a JSON object"},
		{"pushes", "push", "empty-body", ``, "body is not valid JSON: unexpected end of JSON input"},
	}
	var good []payloads.Event
	for _, h := range hostile {
		before, err := payloads.Build(h.event, "", nil)
		require.NoError(t, err)
		after, err := payloads.Build(h.event, "", nil)
		require.NoError(t, err)
		s.Publish(0, before)
		s.PublishRaw(0, h.queue, amqp.Table{"x-github-event": h.event, "x-github-delivery": h.id}, []byte(h.body))
		s.Publish(0, after)
		good = append(good, before, after)
	}
	s.StartWorker()

	s.waitFor("every good event applied and every hostile one recorded", 2*time.Minute, func() bool {
		return s.deliveries() == int64(len(good)+len(hostile))
	})
	for _, ev := range good {
		assert.Equal(t, models.OutcomeApplied, outcome(s, ev.DeliveryID), ev.DeliveryID)
	}
	// The ledger commits before the AMQP transaction that publishes the -error copy and
	// acknowledges the original: the copies may land a moment after the count above.
	var reasons map[string]string
	s.waitFor("every hostile body in its -error queue", time.Minute, func() bool {
		reasons = map[string]string{}
		for _, q := range []string{"issues", "pushes", "installations"} {
			for id, reason := range errorReasons(t, s, q+"-error") {
				reasons[id] = reason
			}
		}
		return len(reasons) >= len(hostile)
	})
	require.Len(t, reasons, len(hostile))
	for _, h := range hostile {
		assert.Contains(t, reasons[h.id], h.reason, h.id)
		assert.Equal(t, models.OutcomeError, outcome(s, h.id), h.id)
	}

	// The worker is still up: an event published now is applied.
	later, err := payloads.Build("issues", "", nil)
	require.NoError(t, err)
	s.Publish(0, later)
	s.waitFor("an event after the hostile ones", time.Minute, func() bool { return outcome(s, later.DeliveryID) == models.OutcomeApplied })
}

// errorReasons reads the x-error-reason of every message in queue on broker 0, by
// delivery id, and leaves them there.
func errorReasons(t *testing.T, s *stack, queue string) map[string]string {
	t.Helper()
	ch, err := s.Direct.Channel(context.Background(), 0)
	require.NoError(t, err)
	defer ch.Close() // puts back what it got
	out := map[string]string{}
	for {
		msg, ok, err := ch.Get(queue, false)
		require.NoError(t, err)
		if !ok {
			return out
		}
		id, _ := msg.Headers["x-github-delivery"].(string)
		reason, _ := msg.Headers["x-error-reason"].(string)
		out[id] = reason
	}
}
