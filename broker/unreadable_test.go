//go:build integration

package broker

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// consumeLoop runs Consume on queue again each time it ends, as a window does, until ctx
// ends, and records the errors it ended with.
type consumeLoop struct {
	mu   sync.Mutex
	errs []error
	done chan struct{}
}

func startLoop(ctx context.Context, r *rabbit, queue string, h BatchHandler) *consumeLoop {
	l := &consumeLoop{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			if err := r.pool.Consume(ctx, 0, queue, ConsumeOptions{Prefetch: 10}, h); err != nil {
				l.mu.Lock()
				l.errs = append(l.errs, err)
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *consumeLoop) errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// A message whose headers amqp091-go refuses (an array of 8,193 empty values, tables
// nested more than 32 deep, a header frame over the consumer's frame_max) made the library
// close the pool's one connection to the broker: every queue's consumer lost its channel,
// the message went back to the head unread, and the same happened at every restart, for
// good. Each queue's consumers now have a connection of their own, and the message is
// moved to {q}-error by a client that never decodes its headers: the good messages behind
// it, on its queue and on the other, are consumed, and the other queue's consumer is never
// cut.
func TestAnUnreadableMessageIsMovedToErrorAndCutsNoOtherQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		headers   amqp.Table
		frameSize int
		reason    string
	}{
		{"array of 8193 entries", amqp.Table{"x-list": make([]any, 8193)}, 0, "an array of more than 8192 entries"},
		{"nested 33 deep", amqp.Table{"x-deep": testenv.NestedTable(33)}, 0, "nested more than 32 deep"},
		{"header frame over frame_max", amqp.Table{"x-big": strings.Repeat("b", 6000)}, 4096, "over the frame_max of 4096"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRabbit(t)
			r.pool.settings.FrameSize = c.frameSize
			r.declare(Topology{Queues: []string{"issues", "pushes"}, RetryTTL: time.Minute})
			r.publish("issues", "good-1", "good-2")
			headers := amqp.Table{"x-github-event": "issues", "x-github-delivery": "d-poison"}
			for k, v := range c.headers {
				headers[k] = v
			}
			r.publishMessages("issues", amqp.Publishing{
				Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "d-poison", Body: []byte("poison"),
			})
			r.publish("issues", "good-3", "good-4")
			r.publish("pushes", "push-1", "push-2")

			issues, pushes := &recorder{}, &recorder{}
			ctx, cancel := context.WithCancel(context.Background())
			// The other queue's consumer runs before the poison arrives.
			pushLoop := startLoop(ctx, r, "pushes", pushes)
			require.Eventually(t, func() bool { return pushes.count() == 2 }, waitFor, 20*time.Millisecond)
			issueLoop := startLoop(ctx, r, "issues", issues)
			require.Eventually(t, func() bool { return slices.Contains(issues.bodies(), "good-4") }, waitFor, 20*time.Millisecond,
				"the good messages behind the poison were never consumed: %v", issues.bodies())
			r.eventuallyCount("issues-error", 1)
			r.publish("pushes", "push-3")
			require.Eventually(t, func() bool { return pushes.count() == 3 }, waitFor, 20*time.Millisecond)
			cancel()
			<-pushLoop.done
			<-issueLoop.done

			assert.Empty(t, pushLoop.errors(), "the other queue's consumer was cut")
			errs := issueLoop.errors()
			require.Len(t, errs, 1, "the poison cut its queue's consumer once")
			assert.ErrorIs(t, errs[0], ErrUnreadable)
			assert.NotContains(t, issues.bodies(), "poison", "the poison never reached the handler")
			var firsts []string
			for _, b := range issues.bodies() {
				if !slices.Contains(firsts, b) {
					firsts = append(firsts, b)
				}
			}
			assert.Equal(t, []string{"good-1", "good-2", "good-3", "good-4"}, firsts, "in queue order")
			assert.Equal(t, 0, r.count("issues"))

			copies := testenv.ReadRaw(t, r.url, "issues-error", 1)
			assert.Equal(t, "poison", string(copies[0].Body))
			assert.True(t, bytes.Contains(copies[0].Header, []byte(c.reason)), "the reason is in a header")
			assert.True(t, bytes.Contains(copies[0].Header, []byte("d-poison")), "the message id is kept")
			assert.Contains(t, r.logs.String(), "unreadable message moved to -error")
		})
	}
}
