package ingest

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-github/v75/github"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// BenchmarkHandleBatch compares one transaction per batch of 100 deliveries with one
// transaction per delivery, on a mix of new pull requests, comments and pushes.
func BenchmarkHandleBatch(b *testing.B) {
	const perRound = 100
	for _, batchSize := range []int{1, perRound} {
		b.Run(fmt.Sprintf("batch=%d", batchSize), func(b *testing.B) {
			e := newEnv(b)
			h := e.ing.ForBroker(0)
			ctx := context.Background()
			rounds := make([][]amqp.Delivery, b.N)
			for i := range rounds {
				rounds[i] = benchDeliveries(b, i, perRound)
			}
			b.ResetTimer()
			for _, ds := range rounds {
				for start := 0; start < len(ds); start += batchSize {
					if _, err := h.HandleBatch(ctx, queue, ds[start:start+batchSize]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*perRound)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// benchDeliveries returns n distinct deliveries for round: each creates its own row.
func benchDeliveries(t testing.TB, round, n int) []amqp.Delivery {
	opened := example(t, "pull_request.opened.0")
	comment := example(t, "issue_comment.created.0")
	push := example(t, "push.none.4")
	out := make([]amqp.Delivery, 0, n)
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("r%d-%d", round, i)
		switch i % 3 {
		case 0:
			out = append(out, delivery("pull_request", id, edit(t, opened, func(p map[string]any) {
				object(p, "pull_request")["node_id"] = "PR_" + id
			})))
		case 1:
			out = append(out, delivery("issue_comment", id, edit(t, comment, func(p map[string]any) {
				object(p, "comment")["node_id"] = "IC_" + id
			})))
		default:
			out = append(out, delivery("push", id, push))
		}
	}
	return out
}

// BenchmarkDecode decodes the vendored payloads of the events that have a table, with
// Decode and with what Decode did before it read only the stored fields (go-github's
// ParseWebHook into its full types), so that one run gives the ratio.
func BenchmarkDecode(b *testing.B) {
	var ds []amqp.Delivery
	for _, e := range payloads.All() {
		if applierFor(e.Event) != nil {
			ds = append(ds, delivery(e.Event, "d-"+e.Name, e.Body))
		}
	}
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := Decode(ds[i%len(ds)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-github ParseWebHook", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			d := ds[i%len(ds)]
			if _, err := github.ParseWebHook(d.Headers[HeaderEvent].(string), d.Body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
