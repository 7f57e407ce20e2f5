package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// BenchmarkHandleBatchUpdates applies batches of 100 deliveries that change rows that
// exist (34 pull requests and 33 comments beside 33 new pushes), with each payload's clock
// newer than the last round's and, for the baseline, with the clock removed: the path
// where each row is folded per assumption about its stored clock and the write's WHERE
// compares the clocks, against the queue-order path of the same statements.
func BenchmarkHandleBatchUpdates(b *testing.B) {
	for _, clocked := range []bool{false, true} {
		b.Run(fmt.Sprintf("clock=%t", clocked), func(b *testing.B) {
			const perRound = 100
			e := newEnv(b)
			h := e.ing.ForBroker(0)
			ctx := context.Background()
			rounds := make([][]amqp.Delivery, b.N+1)
			for i := range rounds {
				rounds[i] = benchUpdates(b, i, perRound, clocked)
			}
			if _, err := h.HandleBatch(ctx, queue, rounds[0]); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for _, ds := range rounds[1:] {
				if _, err := h.HandleBatch(ctx, queue, ds); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*perRound)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// benchUpdates returns n deliveries for round that hit the same pull requests and
// comments every round, stamped round minutes after a fixed instant, or without their
// clock unless clocked.
func benchUpdates(t testing.TB, round, n int, clocked bool) []amqp.Delivery {
	sync := example(t, "pull_request.synchronize.0")
	comment := example(t, "issue_comment.edited.0")
	push := example(t, "push.none.4")
	clock := time.Date(2019, 5, 15, 0, 0, 0, 0, time.UTC).Add(time.Duration(round) * time.Minute).Format(time.RFC3339)
	out := make([]amqp.Delivery, 0, n)
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("u%d-%d", round, i)
		switch i % 3 {
		case 0:
			out = append(out, delivery("pull_request", id, edit(t, sync, func(p map[string]any) {
				pr := object(p, "pull_request")
				pr["node_id"], pr["updated_at"] = fmt.Sprintf("PR_%d", i), clock
				if !clocked {
					delete(pr, "updated_at")
				}
			})))
		case 1:
			out = append(out, delivery("issue_comment", id, edit(t, comment, func(p map[string]any) {
				c := object(p, "comment")
				c["node_id"], c["updated_at"] = fmt.Sprintf("IC_%d", i), clock
				if !clocked {
					delete(c, "updated_at")
				}
			})))
		default:
			out = append(out, delivery("push", id, push))
		}
	}
	return out
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
