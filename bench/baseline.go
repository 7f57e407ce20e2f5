package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/go-github/v75/github"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sync/errgroup"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// throughput is one timed run: n messages in elapsed.
type throughput struct {
	N       int
	Elapsed time.Duration
	CPU     cpuUse
	// Startup is, for the product, the time from worker start to the first applied event.
	Startup time.Duration
	// Batches is, for the product, where its consumed batches spent their time.
	Batches *batchSummary `json:",omitempty"`
}

func (t throughput) rate() float64 { return float64(t.N) / t.Elapsed.Seconds() }

// consumeAll consumes every queue of the corpus on one connection, one channel per queue
// (as the service does), with manual acks, until each queue's expected count was acked;
// handle, when set, handles each delivery before its ack.
func consumeAll(ctx context.Context, url string, perQueue map[string]int, prefetch int, handle func(ctx context.Context, worker int, d amqp.Delivery) error) (time.Duration, error) {
	// Named apart from the service's connections ("brokerswitch") in rabbitmqctl
	// list_connections.
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("bench-baseline")
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: props, Heartbeat: 10 * time.Second})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	type sub struct {
		queue string
		n     int
		ch    *amqp.Channel
	}
	var subs []sub
	for q, n := range perQueue {
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Qos(prefetch, 0, false)
		}
		if err != nil {
			return 0, err
		}
		subs = append(subs, sub{queue: q, n: n, ch: ch})
	}
	began := time.Now()
	var g errgroup.Group
	for i, sb := range subs {
		ds, err := sb.ch.Consume(sb.queue, "", false, false, false, false, nil)
		if err != nil {
			return 0, err
		}
		g.Go(func() error {
			left := sb.n
			for d := range ds {
				if handle != nil {
					if err := handle(ctx, i, d); err != nil {
						return err
					}
				}
				if err := d.Ack(false); err != nil {
					return err
				}
				if left--; left == 0 {
					return nil
				}
			}
			return fmt.Errorf("consumer of %s closed", sb.queue)
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return time.Since(began), nil
}

// runBaselineA is the limit: a bare amqp091-go consumer that acks every message and does
// nothing else.
func runBaselineA(s *figure, events []payloads.Event, prefetch int) throughput {
	ctx := context.Background()
	url := testenv.NewVhost(s)
	s.publishAll(url, events)
	meter := startCPU()
	elapsed, err := consumeAll(ctx, url, describe(events).PerQueue, prefetch, nil)
	s.check(err, "consume")
	return throughput{N: len(events), Elapsed: elapsed, CPU: meter.Stop()}
}

// oldDesignTable is what Baseline B writes: one row per event.
const oldDesignTable = `CREATE TABLE old_design_events (
	delivery_id text PRIMARY KEY,
	event text NOT NULL,
	action text NOT NULL,
	node_id text NOT NULL,
	title text NOT NULL,
	sender_login text NOT NULL,
	received_at timestamptz NOT NULL
)`

// runBaselineB is the old design: prefetch 1; per message, parse the JSON (with go-github,
// as the service does), write one row in its own transaction, then ack.
func runBaselineB(s *figure, events []payloads.Event, rtt time.Duration) throughput {
	ctx := context.Background()
	direct := testenv.NewVhost(s)
	dsn, url := testenv.NewDatabase(s), direct
	if rtt > 0 {
		dsn, url = testenv.ThroughDelay(s, dsn, rtt), testenv.ThroughDelay(s, url, rtt)
	}
	perQueue := describe(events).PerQueue
	conns := make([]*pgx.Conn, len(perQueue))
	for i := range conns {
		c, err := pgx.Connect(ctx, dsn)
		s.check(err, "connect postgres")
		s.Cleanup(func() { c.Close(context.Background()) })
		conns[i] = c
	}
	_, err := conns[0].Exec(ctx, oldDesignTable)
	s.check(err, "create table")
	s.publishAll(direct, events)

	handle := func(ctx context.Context, worker int, d amqp.Delivery) error {
		event, _ := d.Headers["x-github-event"].(string)
		id, _ := d.Headers["x-github-delivery"].(string)
		payload, err := github.ParseWebHook(event, d.Body)
		if err != nil {
			return fmt.Errorf("parse %s: %w", event, err)
		}
		action, nodeID, title, sender := summarize(payload)
		tx, err := conns[worker].Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO old_design_events VALUES ($1, $2, $3, $4, $5, $6, now())
			ON CONFLICT (delivery_id) DO NOTHING`, id, event, action, nodeID, title, sender); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	meter := startCPU()
	elapsed, err := consumeAll(ctx, url, perQueue, 1, handle)
	s.check(err, "consume")
	cpu := meter.Stop()
	var rows int
	s.check(conns[0].QueryRow(ctx, "SELECT count(*) FROM old_design_events").Scan(&rows), "count rows")
	if rows != len(events) {
		s.Fatalf("baseline B wrote %d rows for %d events", rows, len(events))
	}
	return throughput{N: len(events), Elapsed: elapsed, CPU: cpu}
}

// summarize picks the columns of Baseline B's row from a typed event.
func summarize(p any) (action, nodeID, title, sender string) {
	switch e := p.(type) {
	case *github.PullRequestEvent:
		return e.GetAction(), e.GetPullRequest().GetNodeID(), e.GetPullRequest().GetTitle(), e.GetSender().GetLogin()
	case *github.IssuesEvent:
		return e.GetAction(), e.GetIssue().GetNodeID(), e.GetIssue().GetTitle(), e.GetSender().GetLogin()
	case *github.IssueCommentEvent:
		return e.GetAction(), e.GetComment().GetNodeID(), "", e.GetSender().GetLogin()
	case *github.PullRequestReviewEvent:
		return e.GetAction(), e.GetReview().GetNodeID(), "", e.GetSender().GetLogin()
	case *github.PullRequestReviewCommentEvent:
		return e.GetAction(), e.GetComment().GetNodeID(), "", e.GetSender().GetLogin()
	case *github.PushEvent:
		return "", e.GetHeadCommit().GetID(), e.GetRef(), e.GetSender().GetLogin()
	case *github.CreateEvent:
		return "", e.GetRef(), e.GetRefType(), e.GetSender().GetLogin()
	case *github.InstallationEvent:
		return e.GetAction(), fmt.Sprint(e.GetInstallation().GetID()), "", e.GetSender().GetLogin()
	case *github.InstallationRepositoriesEvent:
		return e.GetAction(), fmt.Sprint(e.GetInstallation().GetID()), "", e.GetSender().GetLogin()
	}
	return "", "", "", ""
}
