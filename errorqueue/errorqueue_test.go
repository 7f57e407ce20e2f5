//go:build integration

package errorqueue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/metrics/metricstest"
	"github.com/brokerswitch/brokerswitch/models"
)

// A list takes nothing: listed more often than RabbitMQ 4.0's default delivery limit
// of quorum queues (20), every message is still there, in its order, and each list
// counted it and grouped its reason.
func TestAListTakesNothingAndKeepsTheOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	want := []string{"d1", "d2", "d3", "d4", "d5"}
	for i, id := range want {
		reason := "failed after 3 retry cycles (max 3): database down"
		if i%2 == 1 {
			reason = "malformed delivery: body is not valid JSON"
		}
		e.reject("issues", id, reason, t0.Add(time.Duration(i)*time.Minute), body(i))
	}
	e.reject("pushes", "p1", "malformed delivery: missing header x-github-event", t0, body(9))
	for range 25 {
		l, err := e.svc.List(ctx, Filter{}, 0)
		require.NoError(t, err)
		require.Equal(t, append(append([]string{}, want...), "p1"), ids(l.Messages))
		require.Equal(t, 6, l.Matched)
	}
	l, err := e.svc.List(ctx, Filter{Queue: "issues"}, 0)
	require.NoError(t, err)
	require.Len(t, l.Queues, 1)
	sum := l.Queues[0]
	require.Equal(t, 5, sum.Held)
	require.Equal(t, t0, *sum.Oldest)
	require.Equal(t, t0.Add(4*time.Minute), *sum.Newest)
	require.Equal(t, []ReasonCount{
		{Kind: "retries", Count: 3, Example: "failed after 3 retry cycles (max 3): database down"},
		{Kind: "malformed", Count: 2, Example: "malformed delivery: body is not valid JSON"},
	}, sum.Reasons)
	m := l.Messages[0]
	require.Equal(t, "issues", m.Event)
	require.Equal(t, "opened", m.Action)
	require.Equal(t, len(body(0)), m.Size)

	for _, c := range []struct {
		f    Filter
		want []string
	}{
		{Filter{Reason: "malformed"}, []string{"d2", "d4", "p1"}},
		{Filter{Reason: "DATABASE DOWN"}, []string{"d1", "d3", "d5"}},
		{Filter{ID: "d3"}, []string{"d3"}},
		{Filter{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, []string{"d2", "d3"}},
		{Filter{Event: "pull_request"}, []string{}},
	} {
		l, err := e.svc.List(ctx, c.f, 0)
		require.NoError(t, err, c.f)
		require.Equal(t, c.want, ids(l.Messages), c.f.String())
	}
	_, err = e.svc.List(ctx, Filter{Queue: "issues-error"}, 0)
	require.ErrorIs(t, err, ErrBadFilter)
	require.Equal(t, want, e.takeAll("issues-error"), "every message is still there, in its order")
}

// Show gives the headers, the reason, the ledger row and the body cut to the size asked,
// with the full size; an id in no queue is an error that says so.
func TestShowGivesHeadersLedgerAndACutBody(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	big := []byte(`{"action":"opened","text":"` + strings.Repeat("é", 3000) + `"}`)
	e.reject("issues", "d1", "Postgres cannot store this payload, not retried: value too long", time.Now(), big)
	e.ledger("d1", models.OutcomeError, big)

	shown, err := e.svc.Show(ctx, "d1", 101)
	require.NoError(t, err)
	require.Len(t, shown.Messages, 1)
	d := shown.Messages[0]
	require.Equal(t, "data", d.ReasonKind)
	require.Equal(t, "issues", d.Headers["x-github-event"])
	require.Contains(t, d.Headers, "x-error-at")
	require.True(t, d.BodyCut)
	require.Equal(t, len(big), d.Size)
	require.LessOrEqual(t, len(d.Body), 101)
	require.True(t, strings.HasPrefix(string(big), d.Body), "cut at a character boundary")
	require.NotNil(t, d.Ledger)
	require.Equal(t, string(models.OutcomeError), d.Ledger.Outcome)
	require.False(t, d.AppliedSince)

	_, err = e.svc.Show(ctx, "nope", 0)
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, 1, e.held("issues-error"), "show took nothing")
}

// A requeue interrupted after a copy was confirmed and recorded, but before its original
// was taken, run again, takes that original without copying it twice; a message the
// ledger shows applied since stays, reported, until --purge-applied.
func TestAnInterruptedRequeueRunAgainMovesNothingTwice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	for i, id := range []string{"a", "b", "c", "d"} {
		e.reject("issues", id, "failed after 3 retry cycles (max 3): database down", now, body(i))
	}
	e.ledger("b", models.OutcomeApplied, body(1)) // a later delivery of b got through

	dry, err := e.svc.Requeue(ctx, Filter{}, RequeueOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []Outcome{{Queue: "issues", Kind: "retries", Requeued: 3, Skipped: 1}}, dry.Outcomes)
	require.Equal(t, 0, e.held("issues"), "a dry run moves nothing")
	require.Equal(t, 4, e.held("issues-error"))

	reg := prometheus.NewRegistry()
	counts, err := metrics.NewErrorQueues(reg, queues, ReasonKinds())
	require.NoError(t, err)
	e.svc.Metrics = counts
	killed := errors.New("killed after the copy of c")
	e.svc.afterMark = func(m Message) error {
		if m.ID == "c" {
			return killed
		}
		return nil
	}
	run, err := e.svc.Requeue(ctx, Filter{}, RequeueOptions{Rate: 50})
	require.NoError(t, err)
	require.Len(t, run.Errors, 1)
	require.Contains(t, run.Errors[0], killed.Error())
	require.Equal(t, 3, e.held("issues-error"), "b, c and d are still in -error")

	e.svc.afterMark = nil
	run, err = e.svc.Requeue(ctx, Filter{}, RequeueOptions{})
	require.NoError(t, err)
	require.Empty(t, run.Errors)
	require.Equal(t, []Outcome{{Queue: "issues", Kind: "retries", Requeued: 1, Skipped: 1, AlreadyCopied: 1}}, run.Outcomes)
	require.Equal(t, []string{"b"}, ids(run.Skipped))
	require.Equal(t, []string{"b"}, ids(mustList(t, e).Messages), "b stays, reported")

	run, err = e.svc.Requeue(ctx, Filter{}, RequeueOptions{PurgeApplied: true})
	require.NoError(t, err)
	require.Equal(t, []Outcome{{Queue: "issues", Kind: "retries", Purged: 1}}, run.Outcomes)
	require.Equal(t, 0, e.held("issues-error"))
	require.Equal(t, []string{"a", "c", "d"}, e.takeAll("issues"), "each copied once, in -error's order")
	require.Equal(t, 3.0, metricstest.Value(t, reg, "brokerswitch_error_messages_requeued_total", "queue", "issues", "reason", "retries"), "a and c, then d and c's take")
	require.Equal(t, 1.0, metricstest.Value(t, reg, "brokerswitch_error_messages_purged_total", "queue", "issues", "reason", "retries"))
	require.Contains(t, e.logs.String(), "-error requeue run")

	_, err = e.svc.Requeue(ctx, Filter{}, RequeueOptions{})
	require.ErrorIs(t, err, ErrNothingMatched)
}

// A copy the broker refuses (its queue is gone: a mandatory publish comes back) leaves
// the original in -error, and says so.
func TestARefusedCopyLeavesTheOriginal(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.reject("issues", "a", "failed after 3 retry cycles (max 3): database down", time.Now(), body(0))
	ch, err := e.conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete("issues", false, false, false)
	require.NoError(t, err)
	ch.Close()

	run, err := e.svc.Requeue(ctx, Filter{Queue: "issues"}, RequeueOptions{})
	require.NoError(t, err)
	require.Len(t, run.Errors, 1)
	require.Contains(t, run.Errors[0], errRefused.Error())
	require.Equal(t, []string{"a"}, e.takeAll("issues-error"))
}

// Purge takes what the filter selects, counts it by reason, and leaves the rest in order.
func TestPurgeTakesWhatTheFilterSelects(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	e.reject("issues", "a", "malformed delivery: body is not valid JSON", now, body(0))
	e.reject("issues", "b", "failed after 3 retry cycles (max 3): database down", now, body(1))
	e.reject("issues", "c", "malformed delivery: missing header x-github-event", now, body(2))
	e.reject("pushes", "p", "malformed delivery: body is not valid JSON", now, body(3))

	run, err := e.svc.Purge(ctx, Filter{Queue: "issues", Reason: "malformed"})
	require.NoError(t, err)
	require.Equal(t, []Outcome{{Queue: "issues", Kind: "malformed", Purged: 2}}, run.Outcomes)
	require.Equal(t, []string{"b"}, e.takeAll("issues-error"))
	require.Equal(t, []string{"p"}, e.takeAll("pushes-error"))

	_, err = e.svc.Purge(ctx, Filter{ID: "zzz"})
	require.ErrorIs(t, err, ErrNothingMatched)
}

// A broker that cannot be reached is named; the others are listed.
func TestAnUnreachableBrokerIsNamedAndTheOthersListed(t *testing.T) {
	e := newEnv(t, "amqp://guest:secret-pw@127.0.0.1:1/nowhere")
	ctx := context.Background()
	e.reject("issues", "a", "malformed delivery: body is not valid JSON", time.Now(), body(0))

	l, err := e.svc.List(ctx, Filter{}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids(l.Messages))
	require.Len(t, l.Queues, 4)
	for _, q := range l.Queues {
		if q.Broker == 1 {
			require.Contains(t, q.Error, "broker 1")
			require.NotContains(t, q.Error, "secret-pw")
		} else {
			require.Empty(t, q.Error)
		}
	}
	_, err = e.svc.List(ctx, Filter{Broker: new(2)}, 0)
	require.ErrorIs(t, err, ErrBadFilter)
}

func mustList(t *testing.T, e *env) Listing {
	t.Helper()
	l, err := e.svc.List(context.Background(), Filter{}, 0)
	require.NoError(t, err)
	return l
}
