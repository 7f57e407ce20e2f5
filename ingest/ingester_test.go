//go:build integration

package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/payloads"
)

const (
	prNode    = "MDExOlB1bGxSZXF1ZXN0Mjc5MTQ3NDM3"
	issueNode = "MDU6SXNzdWU0NDQ1MDAwNDE="
	queue     = "pull_requests"
)

// clock advances one minute per reading, so each batch gets its own timestamp.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Minute)
	return c.now
}

// env is a migrated database and an Ingester on it.
type env struct {
	db    *gorm.DB
	dsn   string
	clock *clock
	ing   *Ingester
}

func newEnv(t testing.TB) *env {
	t.Helper()
	db, dsn := modelstest.NewDB(t)
	c := &clock{now: time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)}
	return &env{db: db, dsn: dsn, clock: c, ing: &Ingester{
		DB:             openPool(t, dsn, models.PoolConfig{}),
		MaxRetryCycles: 2,
		MaxClockSkew:   5 * time.Minute,
		Logger:         slog.New(slog.DiscardHandler),
		Now:            c.Now,
	}}
}

// openPool is a pool on dsn with pool's settings, closed when the test ends.
func openPool(t testing.TB, dsn string, pool models.PoolConfig) *pgxpool.Pool {
	t.Helper()
	p, err := models.Connect(context.Background(), dsn, pool)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// handle runs one batch on broker 0 and fails the test on an error.
func (e *env) handle(t *testing.T, ds ...amqp.Delivery) []broker.Verdict {
	t.Helper()
	return e.handleWith(t, e.ing.ForBroker(0), ds...)
}

// handleWith applies deliveries through h and requires a verdict for each.
func (e *env) handleWith(t *testing.T, h broker.BatchHandler, ds ...amqp.Delivery) []broker.Verdict {
	t.Helper()
	verdicts, err := h.HandleBatch(context.Background(), queue, ds)
	require.NoError(t, err)
	require.Len(t, verdicts, len(ds))
	return verdicts
}

func (e *env) pullRequest(t *testing.T) models.PullRequest {
	t.Helper()
	var pr models.PullRequest
	require.NoError(t, e.db.Take(&pr, "node_id = ?", prNode).Error)
	return pr
}

func (e *env) issue(t *testing.T) models.Issue {
	t.Helper()
	var is models.Issue
	require.NoError(t, e.db.Take(&is, "node_id = ?", issueNode).Error)
	return is
}

func (e *env) ledger(t *testing.T, id string) models.Delivery {
	t.Helper()
	var d models.Delivery
	require.NoError(t, e.db.Take(&d, "delivery_id = ?", id).Error)
	return d
}

func (e *env) count(t *testing.T, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.db.Table(table).Count(&n).Error)
	return n
}

func acks(n int) []broker.Verdict {
	v := make([]broker.Verdict, n)
	for i := range v {
		v[i] = broker.Verdict{Outcome: broker.Ack}
	}
	return v
}

// prLifecycle derives an ordered lifecycle of ONE pull request from the vendored payloads:
// opened, synchronize (new head), closed as merged, a late synchronize, reopened. Each
// payload carries its true clock (the vendored examples were captured at unrelated
// moments): the late synchronize happened before the close, and arrives after it.
func prLifecycle(t *testing.T) []amqp.Delivery {
	at := func(p map[string]any, clock string) { object(p, "pull_request")["updated_at"] = clock }
	opened := edit(t, example(t, "pull_request.opened.0"), func(p map[string]any) { at(p, "2019-05-15T15:20:33Z") })
	sync1 := edit(t, example(t, "pull_request.synchronize.0"), func(p map[string]any) {
		object(object(p, "pull_request"), "head")["sha"] = "1111111111111111111111111111111111111111"
		at(p, "2019-05-15T15:20:36Z")
	})
	closed := edit(t, example(t, "pull_request.closed.0"), func(p map[string]any) {
		pr := object(p, "pull_request")
		pr["merged"] = true
		pr["merged_at"] = "2019-05-15T15:20:40Z"
		object(pr, "head")["sha"] = "1111111111111111111111111111111111111111"
		at(p, "2019-05-15T15:20:40Z")
	})
	lateSync := edit(t, example(t, "pull_request.synchronize.0"), func(p map[string]any) {
		pr := object(p, "pull_request")
		object(pr, "head")["sha"] = "2222222222222222222222222222222222222222"
		pr["title"] = "changed after close"
		at(p, "2019-05-15T15:20:38Z")
	})
	reopened := edit(t, example(t, "pull_request.reopened.0"), func(p map[string]any) { at(p, "2019-05-15T15:21:00Z") })
	return []amqp.Delivery{
		delivery("pull_request", "pr-1", opened),
		delivery("pull_request", "pr-2", sync1),
		delivery("pull_request", "pr-3", closed),
		delivery("pull_request", "pr-4", lateSync),
		delivery("pull_request", "pr-5", reopened),
	}
}

func TestPullRequestLifecycle(t *testing.T) {
	e := newEnv(t)
	steps := prLifecycle(t)
	const originalHead = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"

	assert.Equal(t, acks(1), e.handle(t, steps[0]))
	pr := e.pullRequest(t)
	assert.Equal(t, "open", pr.State)
	assert.Equal(t, models.StateNew, pr.ProcessingState)
	assert.Equal(t, "pr-1", pr.DeliveryID)
	assert.Equal(t, "pr-1", pr.LastDeliveryID)
	assert.Equal(t, "opened", pr.LastAction)
	assert.Equal(t, originalHead, pr.HeadSHA)
	assert.Equal(t, "Codertocat", pr.RepositoryOwner)
	assert.Equal(t, "Hello-World", pr.RepositoryName)
	assert.Equal(t, int64(186853002), pr.RepositoryID)
	assert.Equal(t, 2, pr.Number)
	assert.Equal(t, "Codertocat", pr.SenderLogin)
	assert.Nil(t, pr.ProcessedDate)

	assert.Equal(t, acks(1), e.handle(t, steps[1]))
	pr = e.pullRequest(t)
	assert.Equal(t, "open", pr.State)
	assert.Equal(t, models.StateUpdated, pr.ProcessingState)
	assert.Equal(t, "1111111111111111111111111111111111111111", pr.HeadSHA)
	assert.Equal(t, "pr-1", pr.DeliveryID, "delivery_id is the creating event")
	assert.Equal(t, "pr-2", pr.LastDeliveryID)
	assert.Equal(t, "synchronize", pr.LastAction)

	assert.Equal(t, acks(1), e.handle(t, steps[2]))
	closed := e.pullRequest(t)
	assert.Equal(t, "closed", closed.State)
	assert.True(t, closed.Merged)
	require.NotNil(t, closed.MergedAt)
	assert.Equal(t, models.StateUpdated, closed.ProcessingState)
	assert.Equal(t, "pr-3", closed.LastDeliveryID)

	// The late synchronize is older than the row: only the ledger records it.
	assert.Equal(t, acks(1), e.handle(t, steps[3]))
	late := e.pullRequest(t)
	assert.Equal(t, "closed", late.State)
	assert.True(t, late.Merged)
	assert.Equal(t, "1111111111111111111111111111111111111111", late.HeadSHA, "head not refreshed on a closed row")
	assert.Equal(t, closed.Title, late.Title)
	assert.Equal(t, models.StateUpdated, late.ProcessingState)
	assert.True(t, closed.ProcessingDate.Equal(late.ProcessingDate), "processing_date untouched")
	assert.Equal(t, "pr-3", late.LastDeliveryID, "last_* name the delivery whose payload the row holds")
	assert.Equal(t, "closed", late.LastAction)
	assert.True(t, late.UpdatedAt.Equal(closed.UpdatedAt), "the row was not written")
	assert.Equal(t, time.Date(2019, 5, 15, 15, 20, 40, 0, time.UTC), late.EntityClock.UTC())

	assert.Equal(t, acks(1), e.handle(t, steps[4]))
	pr = e.pullRequest(t)
	assert.Equal(t, "open", pr.State)
	assert.False(t, pr.Merged, "refreshed from the reopened payload")
	assert.Equal(t, models.StateReRequested, pr.ProcessingState)
	assert.True(t, pr.ProcessingDate.After(late.ProcessingDate))
	assert.Equal(t, "pr-5", pr.LastDeliveryID)

	assert.Equal(t, int64(1), e.count(t, "github_pull_requests"))
	assert.True(t, pr.CreatedAt.Equal(e.ledger(t, "pr-1").ReceivedAt), "created_at kept from the first event")
	assert.Equal(t, int64(5), e.count(t, "github_deliveries"))
	for i := 1; i <= 5; i++ {
		d := e.ledger(t, fmt.Sprintf("pr-%d", i))
		assert.Equal(t, models.OutcomeApplied, d.Outcome)
		assert.Equal(t, queue, d.Queue)
		assert.NotNil(t, d.AppliedAt)
	}
}

// TestPullRequestLifecycleInOneBatch applies the lifecycle as one batch: the rows must be
// the ones applying it message by message leaves, late synchronize included.
func TestPullRequestLifecycleInOneBatch(t *testing.T) {
	for _, n := range []int{4, 5} {
		t.Run(fmt.Sprintf("first %d steps", n), func(t *testing.T) {
			steps := prLifecycle(t)[:n]
			batched, stepwise := newEnv(t), newEnv(t)
			assert.Equal(t, acks(n), batched.handle(t, steps...))
			for _, s := range steps {
				stepwise.handle(t, s)
			}
			got, want := batched.pullRequest(t), stepwise.pullRequest(t)
			if n == 4 {
				assert.Equal(t, "closed", got.State)
				assert.Equal(t, "1111111111111111111111111111111111111111", got.HeadSHA,
					"the late synchronize was not applied to the closed row inside the batch")
			}
			// Timestamps differ: one batch has one clock reading, the stepwise run one per step.
			for _, pr := range []*models.PullRequest{&got, &want} {
				pr.ProcessingDate, pr.CreatedAt, pr.UpdatedAt = time.Time{}, time.Time{}, time.Time{}
			}
			assert.Equal(t, want, got)
			assert.Equal(t, int64(n), batched.count(t, "github_deliveries"))
		})
	}
}

func TestIssueLifecycle(t *testing.T) {
	e := newEnv(t)
	opened := example(t, "issues.opened.0")
	edited := edit(t, example(t, "issues.edited.0"), func(p map[string]any) {
		object(p, "issue")["title"] = "Spelling error in the README (edited)"
	})
	// The package has no issues.closed example: derive it from opened.
	closed := edit(t, opened, func(p map[string]any) {
		p["action"] = "closed"
		is := object(p, "issue")
		is["state"] = "closed"
		is["state_reason"] = "completed"
		is["closed_at"] = "2019-05-15T16:00:00Z"
	})
	lateEdit := edit(t, example(t, "issues.edited.0"), func(p map[string]any) {
		object(p, "issue")["title"] = "edited after close"
	})
	reopened := example(t, "issues.reopened.0")

	e.handle(t, delivery("issues", "is-1", opened))
	is := e.issue(t)
	assert.Equal(t, "open", is.State)
	assert.Equal(t, models.StateNew, is.ProcessingState)

	e.handle(t, delivery("issues", "is-2", edited))
	is = e.issue(t)
	assert.Equal(t, "Spelling error in the README (edited)", is.Title)
	assert.Equal(t, models.StateUpdated, is.ProcessingState)

	e.handle(t, delivery("issues", "is-3", closed))
	is = e.issue(t)
	assert.Equal(t, "closed", is.State)
	assert.Equal(t, "completed", is.StateReason)
	require.NotNil(t, is.ClosedAt)
	assert.Equal(t, models.StateUpdated, is.ProcessingState)

	e.handle(t, delivery("issues", "is-4", lateEdit))
	late := e.issue(t)
	assert.Equal(t, "closed", late.State)
	assert.Equal(t, is.Title, late.Title, "closed row keeps its columns")
	assert.NotEqual(t, "edited after close", late.Title)
	assert.Equal(t, "is-4", late.LastDeliveryID)
	assert.Equal(t, "edited", late.LastAction)
	assert.True(t, is.ProcessingDate.Equal(late.ProcessingDate))

	e.handle(t, delivery("issues", "is-5", reopened))
	is = e.issue(t)
	assert.Equal(t, "open", is.State)
	assert.Equal(t, models.StateReRequested, is.ProcessingState)
}

func TestNonOpenedActionCreatesMissingRowAsUpdated(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery("pull_request", "d-1", example(t, "pull_request.labeled.0")))
	pr := e.pullRequest(t)
	assert.Equal(t, "open", pr.State)
	assert.Equal(t, models.StateUpdated, pr.ProcessingState)
	assert.Equal(t, "d-1", pr.DeliveryID)

	// A pinned issue ships without its state: the row still gets one.
	pinned := edit(t, example(t, "issues.opened.0"), func(p map[string]any) {
		p["action"] = "pinned"
		delete(object(p, "issue"), "state")
	})
	e.handle(t, delivery("issues", "d-2", pinned))
	is := e.issue(t)
	assert.Equal(t, "open", is.State)
	assert.Equal(t, models.StateUpdated, is.ProcessingState)
}

func TestRedeliveryHasNoSecondEffect(t *testing.T) {
	e := newEnv(t)
	opened := delivery("pull_request", "d-1", example(t, "pull_request.opened.0"))
	push := delivery("push", "d-2", example(t, "push.none.4"))

	// Duplicates inside one batch: applied once, every copy acknowledged.
	assert.Equal(t, acks(4), e.handle(t, opened, push, opened, push))
	first := e.pullRequest(t)
	assert.Equal(t, models.StateNew, first.ProcessingState, "a second opened would have made it RE_REQUESTED")
	assert.Equal(t, int64(1), e.count(t, "github_pushes"))

	// Redelivered later, e.g. after a consumer crash before its acks.
	assert.Equal(t, acks(2), e.handle(t, opened, push))
	again := e.pullRequest(t)
	assert.Equal(t, models.StateNew, again.ProcessingState)
	assert.True(t, first.UpdatedAt.Equal(again.UpdatedAt), "row not written again")
	assert.Equal(t, int64(1), e.count(t, "github_pushes"))
	assert.Equal(t, int64(2), e.count(t, "github_deliveries"))
	assert.True(t, e.ledger(t, "d-1").ReceivedAt.Equal(first.CreatedAt), "ledger row kept from the first attempt")
}

func TestIgnoredEvents(t *testing.T) {
	e := newEnv(t)
	unknown := delivery("brand_new_event", "d-3", []byte(`{"action": "happened", "sender": {"id": 99, "login": "newcomer", "type": "User"}}`))
	got := e.handle(t,
		delivery("check_run", "d-1", example(t, "check_run.created.0")),
		delivery("workflow_run", "d-2", example(t, "workflow_run.completed.0")),
		unknown)
	assert.Equal(t, acks(3), got)
	for _, id := range []string{"d-1", "d-2", "d-3"} {
		d := e.ledger(t, id)
		assert.Equal(t, models.OutcomeIgnored, d.Outcome, id)
		assert.Empty(t, d.ErrorReason)
	}
	assert.Equal(t, "happened", e.ledger(t, "d-3").Action)
	for _, table := range []string{"github_pull_requests", "github_issues", "github_comments", "github_pushes"} {
		assert.Zero(t, e.count(t, table), table)
	}
	// Senders are recorded for every event, including ignored ones.
	var u models.User
	require.NoError(t, e.db.Take(&u, "id = ?", 99).Error)
	assert.Equal(t, "newcomer", u.Login)

	// Free text that Postgres cannot store never makes the ledger row fail.
	nul := delivery("brand_new_event", "d-4", []byte(`{"action": "bad\u0000action"}`))
	assert.Equal(t, acks(1), e.handle(t, nul))
	assert.Equal(t, `bad\x00action`, e.ledger(t, "d-4").Action)

	// An ignored delivery is a duplicate like any other.
	assert.Equal(t, acks(1), e.handle(t, unknown))
	assert.Equal(t, int64(4), e.count(t, "github_deliveries"))
}

func TestMalformedIsRejected(t *testing.T) {
	e := newEnv(t)
	noID := delivery("pull_request", "", example(t, "pull_request.opened.0"))
	delete(noID.Headers, HeaderDelivery)
	badJSON := delivery("issues", "bad-1", []byte(`{"action": "opened"`))
	noNode := delivery("pull_request", "bad-2", edit(t, example(t, "pull_request.opened.0"), func(p map[string]any) {
		delete(object(p, "pull_request"), "node_id")
	}))
	good := delivery("push", "good-1", example(t, "push.none.4"))

	got := e.handle(t, noID, badJSON, good, noNode)
	require.Len(t, got, 4)
	assert.Equal(t, broker.Reject, got[0].Outcome)
	assert.Contains(t, got[0].Reason, "missing header x-github-delivery")
	assert.Equal(t, broker.Reject, got[1].Outcome)
	assert.Contains(t, got[1].Reason, "body is not valid JSON")
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[2])
	assert.Equal(t, broker.Reject, got[3].Outcome)
	assert.Contains(t, got[3].Reason, "no pull_request.node_id")

	assert.Equal(t, int64(3), e.count(t, "github_deliveries"), "no ledger row without a delivery id")
	bad := e.ledger(t, "bad-1")
	assert.Equal(t, models.OutcomeError, bad.Outcome)
	assert.Contains(t, bad.ErrorReason, "body is not valid JSON")
	assert.Nil(t, bad.AppliedAt)
	assert.Equal(t, models.OutcomeError, e.ledger(t, "bad-2").Outcome)
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "good-1").Outcome)
	assert.Zero(t, e.count(t, "github_pull_requests"))
	assert.Equal(t, int64(1), e.count(t, "github_pushes"))

	// An operator fixes and requeues bad-1 from -error: the error row does not block it.
	fixed := delivery("issues", "bad-1", example(t, "issues.opened.0"))
	assert.Equal(t, acks(1), e.handle(t, fixed))
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "bad-1").Outcome)
	assert.Equal(t, int64(1), e.count(t, "github_issues"))
}

func TestMalformedCopyDoesNotHideGoodDelivery(t *testing.T) {
	e := newEnv(t)
	bad := delivery("issues", "d-1", []byte("{"))
	good := delivery("issues", "d-1", example(t, "issues.opened.0"))
	got := e.handle(t, bad, good)
	assert.Equal(t, broker.Reject, got[0].Outcome)
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[1])
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "d-1").Outcome)
	assert.Equal(t, int64(1), e.count(t, "github_issues"))

	// A malformed copy after it is applied does not downgrade the ledger row either.
	got = e.handle(t, bad)
	assert.Equal(t, broker.Reject, got[0].Outcome)
	assert.Equal(t, models.OutcomeApplied, e.ledger(t, "d-1").Outcome)
}

// nulComment is an issue comment whose body holds a NUL character: valid JSON that
// Postgres refuses to store in a text column, so it fails on its own every time.
func nulComment(t *testing.T) []byte {
	return edit(t, example(t, "issue_comment.created.0"), func(p map[string]any) {
		object(p, "comment")["body"] = "before\u0000after"
	})
}

// A message that fails on its own for a reason that is neither transient nor in its data
// (here a trigger's error, P0001) may succeed later: it goes through -retry.
func TestMessageFailureIsRetriedThenRejected(t *testing.T) {
	e := newEnv(t)
	injectFault(t, e, "github_comments", "P0001", -1)
	good1 := delivery("pull_request", "good-1", example(t, "pull_request.opened.0"))
	bad := delivery("issue_comment", "bad-1", example(t, "issue_comment.created.0"))
	good2 := delivery("push", "good-2", example(t, "push.none.4"))

	got := e.handle(t, good1, bad, good2)
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[0])
	assert.Equal(t, broker.Retry, got[1].Outcome)
	assert.Contains(t, got[1].Reason, "P0001", "the reason carries Postgres' error")
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[2])

	assert.Equal(t, int64(1), e.count(t, "github_pull_requests"), "the rest of the batch is applied")
	assert.Equal(t, int64(1), e.count(t, "github_pushes"))
	assert.Zero(t, e.count(t, "github_comments"))
	failed := e.ledger(t, "bad-1")
	assert.Equal(t, models.OutcomeError, failed.Outcome)
	assert.Contains(t, failed.ErrorReason, "P0001")
	assert.Equal(t, 0, failed.RetryCycles)

	// Back from -retry once: still below MaxRetryCycles (2).
	got = e.handle(t, withDeaths(bad, queue, 1))
	assert.Equal(t, broker.Retry, got[0].Outcome)
	assert.Equal(t, 1, e.ledger(t, "bad-1").RetryCycles)

	// Back from -retry a second time: rejected to -error.
	got = e.handle(t, good1, withDeaths(bad, queue, 2))
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[0], "duplicate still acknowledged in the fallback")
	assert.Equal(t, broker.Reject, got[1].Outcome)
	assert.Contains(t, got[1].Reason, "failed after 2 retry cycles")
	failed = e.ledger(t, "bad-1")
	assert.Equal(t, models.OutcomeError, failed.Outcome)
	assert.Equal(t, 2, failed.RetryCycles)
	assert.Nil(t, failed.AppliedAt)
	assert.Equal(t, models.StateNew, e.pullRequest(t).ProcessingState, "good-1 applied once")
}

func TestUnreachablePostgresReturnsError(t *testing.T) {
	e := newEnv(t)
	// A port that was just free: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	u, err := url.Parse(e.dsn)
	require.NoError(t, err)
	u.Host = addr
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	// pgxpool connects on first use: nothing answers before the batch.
	dead, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(dead.Close)

	ing := *e.ing
	ing.DB = dead
	verdicts, err := ing.ForBroker(1).HandleBatch(context.Background(), queue, prLifecycle(t))
	require.Error(t, err)
	assert.Nil(t, verdicts, "nothing is settled")
	assert.True(t, isConnectionError(err), "%v", err)
	assert.Zero(t, e.count(t, "github_deliveries"))

	// Rejecting a delivery without an id needs no database.
	noID := delivery("pull_request", "", example(t, "pull_request.opened.0"))
	delete(noID.Headers, HeaderDelivery)
	verdicts, err = ing.ForBroker(1).HandleBatch(context.Background(), queue, []amqp.Delivery{noID})
	require.NoError(t, err)
	require.Len(t, verdicts, 1)
	assert.Equal(t, broker.Reject, verdicts[0].Outcome)
}

// TestBrokenSchemaReturnsError: a database that cannot take a write whatever the message
// (here a table is missing) must stop the consumer, not spread the batch over -retry.
func TestBrokenSchemaReturnsError(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.db.Exec("DROP TABLE github_pushes").Error)
	verdicts, err := e.ing.ForBroker(0).HandleBatch(context.Background(), queue, []amqp.Delivery{
		delivery("pull_request", "d-1", example(t, "pull_request.opened.0")),
		delivery("push", "d-2", example(t, "push.none.4")),
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "42P01")
	assert.Nil(t, verdicts)
	assert.Zero(t, e.count(t, "github_deliveries"))
	assert.Zero(t, e.count(t, "github_pull_requests"))
}

// blockedBatch runs batch on a connection of its own while another transaction holds
// the pull request's row lock, terminates that connection once the batch waits on the
// lock, and returns what HandleBatch returned.
func blockedBatch(t *testing.T, e *env, ing *Ingester, batch []amqp.Delivery) ([]broker.Verdict, error) {
	t.Helper()
	blocker := e.db.Begin()
	require.NoError(t, blocker.Error)
	defer blocker.Rollback()
	require.NoError(t, blocker.Exec("SELECT 1 FROM github_pull_requests WHERE node_id = ? FOR UPDATE", prNode).Error)

	type result struct {
		verdicts []broker.Verdict
		err      error
	}
	done := make(chan result, 1)
	go func() {
		v, err := ing.ForBroker(1).HandleBatch(context.Background(), queue, batch)
		done <- result{v, err}
	}()

	var pid int
	require.Eventually(t, func() bool {
		pid = 0
		err := e.db.Raw("SELECT pid FROM pg_stat_activity WHERE application_name = ? AND wait_event_type = 'Lock'", victimApp).Scan(&pid).Error
		return err == nil && pid != 0
	}, 10*time.Second, 10*time.Millisecond, "batch never blocked on the row lock")
	var terminated bool
	require.NoError(t, e.db.Raw("SELECT pg_terminate_backend(?)", pid).Scan(&terminated).Error)
	require.True(t, terminated)

	select {
	case res := <-done:
		return res.verdicts, res.err
	case <-time.After(10 * time.Second):
		t.Fatal("HandleBatch did not return after its connection was terminated")
		return nil, nil
	}
}

const victimApp = "ingest_victim"

// victim is an Ingester on its own pool, recognisable in pg_stat_activity.
func victim(t *testing.T, e *env) *Ingester {
	t.Helper()
	u, err := url.Parse(e.dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", victimApp)
	u.RawQuery = q.Encode()
	ing := *e.ing
	ing.DB = openPool(t, u.String(), models.PoolConfig{})
	return &ing
}

// TestPostgresDyingMidBatchReturnsError kills the batch's connection while it waits on a
// row lock: the consumer must get an error, and nothing of the batch may be committed.
func TestPostgresDyingMidBatchReturnsError(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery("pull_request", "pr-1", example(t, "pull_request.opened.0")))
	ing := victim(t, e)

	steps := prLifecycle(t)
	batch := []amqp.Delivery{delivery("push", "push-1", example(t, "push.none.4")), steps[1], steps[2]}
	verdicts, err := blockedBatch(t, e, ing, batch)
	require.Error(t, err)
	assert.Nil(t, verdicts, "nothing is settled")
	assert.True(t, isConnectionError(err), "%v", err)

	assert.Equal(t, int64(1), e.count(t, "github_deliveries"), "only the earlier pr-1")
	assert.Zero(t, e.count(t, "github_pushes"), "the push before the blocked event was rolled back")
	assert.Equal(t, "pr-1", e.pullRequest(t).LastDeliveryID)

	// Once Postgres is back the same batch applies normally, in order.
	v, err := ing.ForBroker(1).HandleBatch(context.Background(), queue, batch)
	require.NoError(t, err)
	assert.Equal(t, acks(3), v)
	assert.Equal(t, "closed", e.pullRequest(t).State)
	assert.Equal(t, 1, e.ledger(t, "push-1").BrokerIndex)
}

// TestPostgresDyingDuringFallbackReturnsError fails a batch on a message of its own (so
// the handler isolates messages), then kills the connection of the next message.
func TestPostgresDyingDuringFallbackReturnsError(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery("pull_request", "pr-1", example(t, "pull_request.opened.0")))
	ing := victim(t, e)

	bad := delivery("issue_comment", "bad-1", nulComment(t))
	batch := []amqp.Delivery{bad, prLifecycle(t)[1]}
	verdicts, err := blockedBatch(t, e, ing, batch)
	require.Error(t, err)
	assert.Nil(t, verdicts, "nothing is settled, not even the bad message's Retry")
	assert.True(t, isConnectionError(err), "%v", err)
	assert.Equal(t, "pr-1", e.pullRequest(t).LastDeliveryID)
	assert.Equal(t, int64(1), e.count(t, "github_pull_requests"))
}

// handleBlocked runs batch on broker 1 of ing, which must be a victim, and returns once
// it waits on a lock; the returned function waits for its verdicts.
func handleBlocked(t *testing.T, e *env, ing *Ingester, batch []amqp.Delivery, why string) func() []broker.Verdict {
	t.Helper()
	done := make(chan []broker.Verdict, 1)
	go func() {
		v, err := ing.ForBroker(1).HandleBatch(context.Background(), queue, batch)
		assert.NoError(t, err)
		done <- v
	}()
	require.Eventually(t, func() bool {
		var n int
		err := e.db.Raw("SELECT count(*) FROM pg_stat_activity WHERE application_name = ? AND wait_event_type = 'Lock'", victimApp).Scan(&n).Error
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond, why)
	return func() []broker.Verdict {
		t.Helper()
		select {
		case v := <-done:
			return v
		case <-time.After(10 * time.Second):
			t.Fatal("the blocked batch did not finish")
			return nil
		}
	}
}

// TestConcurrentClaimAppliesOnce delivers the same message to a second broker while the
// first one's transaction is still open: the second must wait, then acknowledge it as a
// duplicate without applying it.
func TestConcurrentClaimAppliesOnce(t *testing.T) {
	e := newEnv(t)
	second := victim(t, e)
	opened := delivery("pull_request", "d-1", example(t, "pull_request.opened.0"))

	// The first broker's transaction: it has applied d-1 but not committed yet.
	first := e.begin(t)
	firstHandler := &batchHandler{ingester: e.ing, broker: 0}
	msg := decodeMessage(queue, opened, 0)
	require.NoError(t, msg.malformed)
	ev := msg.event
	now := e.clock.Now()
	rows, _ := firstHandler.ledgerRows(queue, []message{msg}, now)
	claimed, err := claimLedger(context.Background(), first, rows)
	require.NoError(t, err)
	require.True(t, claimed["d-1"])
	w := newWrites(now)
	applyPullRequest(w, ev)
	require.NoError(t, w.flush(context.Background(), first))

	wait := handleBlocked(t, e, second, []amqp.Delivery{opened}, "second broker never waited for the first")
	require.NoError(t, first.Commit(context.Background()))
	assert.Equal(t, acks(1), wait())
	d := e.ledger(t, "d-1")
	assert.Equal(t, 0, d.BrokerIndex, "the first broker's row stands")
	assert.Equal(t, models.StateNew, e.pullRequest(t).ProcessingState, "applied once")
}

func TestEveryVendoredPayloadApplies(t *testing.T) {
	e := newEnv(t)
	var batch []amqp.Delivery
	for _, ex := range payloads.All() {
		batch = append(batch, delivery(ex.Event, "d-"+ex.Name, ex.Body))
	}
	assert.Equal(t, acks(len(batch)), e.handle(t, batch...))
	for _, ex := range payloads.All() {
		d := e.ledger(t, "d-"+ex.Name)
		want := models.OutcomeApplied
		if appliers[ex.Event] == nil {
			want = models.OutcomeIgnored
		}
		assert.Equal(t, want, d.Outcome, ex.Name)
	}
	for _, table := range []string{"github_pull_requests", "github_issues", "github_comments", "github_pushes",
		"github_branches", "github_installations", "github_repositories", "github_users"} {
		assert.NotZero(t, e.count(t, table), table)
	}
	var kinds []string
	require.NoError(t, e.db.Raw("SELECT DISTINCT kind FROM github_comments ORDER BY kind").Scan(&kinds).Error)
	assert.Equal(t, []string{"commit_comment", "issue_comment", "review", "review_comment"}, kinds)
}

// decodeMessage decodes one delivery of queue as a batch does, refusing a body over
// maxBody bytes.
func decodeMessage(queue string, d amqp.Delivery, maxBody int) message {
	return decodeSafely(queue, d, maxBody, decodeWithin)
}

// flush writes the batch's rows in tx, with the statements a batch pipelines
// (queueReads, queueWrites), for a test that writes rows without a batch.
func (w *writes) flush(ctx context.Context, tx pgx.Tx) error {
	p := newPipeline(ctx, tx)
	reads := w.queueReads(p)
	if err := p.send(); err != nil {
		return err
	}
	if err := w.queueWrites(p, reads); err != nil {
		return err
	}
	return p.send()
}

// begin opens a transaction of the test's own on e's database, on a connection of its
// own, as another consumer's; it is rolled back at the end of the test unless committed.
func (e *env) begin(t *testing.T) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}
