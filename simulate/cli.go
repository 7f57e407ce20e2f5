package simulate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/brokerswitch/brokerswitch/broker"
)

const cliUsage = `usage: brokerswitch simulate [flags]

Publishes real GitHub webhook payloads as the producer (WebhooksHandler) does: ordered
lifecycles of pull requests, issues, comments, branches, pushes and installations, with
fresh delivery GUIDs, to the logical queues of the broker it currently uses. It rotates to
the next broker after -rotate-after messages, or when it receives SIGUSR1, and tells
brokerswitch with POST /api/v1/broker/pending-switch. Everything it published is written,
in order, to -log as JSON lines (seq, queue, broker, event, action, delivery, entity,
poison), for checking the tables afterwards. Passwords and tokens are never printed.

Rehearse a rotation against a test deployment:

  RABBITMQ_CONNECTION_STRINGS='amqps://u:p@a.example/vh,amqps://u:p@b.example/vh' \
  PRODUCER_TOKEN=... brokerswitch simulate -api https://brokerswitch.test -rotate-after 500

flags:
`

// Main runs the simulate subcommand: args are the flags, getenv supplies the defaults
// that come from the environment.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, cliUsage)
		fs.PrintDefaults()
	}
	var (
		brokers       = fs.String("brokers", "", "broker URLs, comma- or newline-separated, in the format of RABBITMQ_CONNECTION_STRINGS (default $RABBITMQ_CONNECTION_STRINGS)")
		start         = fs.Int("start", 0, "index of the broker to publish to first")
		apiURL        = fs.String("api", "", "brokerswitch base URL to notify, e.g. http://localhost:8080; empty: never notify")
		tokenFlag     = fs.String("token", "", "producer token for the API (default $PRODUCER_TOKEN)")
		queues        = fs.String("queues", "", "logical queues to declare (default $QUEUES, else pull_requests,issues,pushes,installations)")
		retryTTL      = fs.Duration("retry-ttl", 0, "TTL of the -retry queues, equal to the consumer's (default $RETRY_TTL, else 10m)")
		prs           = fs.Int("pull-requests", 10, "pull requests: opened, synchronized, reviewed, closed, reopened, closed")
		issues        = fs.Int("issues", 10, "issues: opened, edited, commented, labeled, closed, reopened")
		pushes        = fs.Int("pushes", 20, "plain pushes")
		branches      = fs.Int("branches", 5, "branches: created, pushed to twice, deleted")
		installations = fs.Int("installations", 2, "installations: created, repositories added, suspended, unsuspended, repositories removed")
		ignored       = fs.Int("ignored", 5, "events without a table (check_run, workflow_run)")
		poison        = fs.Int("poison", 0, "poison messages (invalid JSON, a missing header) among the others; they must end in -error")
		syncs         = fs.Int("syncs", 3, "synchronize events per pull request")
		seed          = fs.Uint64("seed", 1, "seed of the interleaving of lifecycles")
		runID         = fs.String("run-id", "", "names this run's entities (default random)")
		rotateAfter   = fs.Int("rotate-after", 0, "rotate to the next broker after this many messages on the current one (0: only on SIGUSR1)")
		notify        = fs.String("notify", "now", "when to notify a rotation: now, twice, late (after the next rotation or at the end), reverse (all at the end, newest first) or none")
		notifyUnknown = fs.Bool("notify-unknown", false, "also notify an endpoint that is not configured after each rotation (must be answered 404)")
		rate          = fs.Float64("rate", 0, "messages per second at most (0: as fast as the broker confirms)")
		logPath       = fs.String("log", "", "where to write the JSON-lines log (default simulate-<time>.jsonl; - for stdout)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("simulate: unexpected argument %q", fs.Arg(0))
	}
	orEnv := func(v, name, def string) string {
		if v != "" {
			return v
		}
		if e := strings.TrimSpace(getenv(name)); e != "" {
			return e
		}
		return def
	}

	eps, err := broker.ParseEndpoints(orEnv(*brokers, "RABBITMQ_CONNECTION_STRINGS", ""))
	if err != nil {
		return fmt.Errorf("simulate: -brokers: %w", err)
	}
	ttl := *retryTTL
	if ttl == 0 {
		if ttl, err = time.ParseDuration(orEnv("", "RETRY_TTL", DefaultRetryTTL.String())); err != nil || ttl <= 0 {
			return fmt.Errorf("simulate: RETRY_TTL %q is not a positive duration", getenv("RETRY_TTL"))
		}
	}
	queueType, err := broker.ParseQueueType(orEnv("", "QUEUE_TYPE", string(broker.Classic)))
	if err != nil {
		return fmt.Errorf("simulate: QUEUE_TYPE %w", err)
	}
	mode, err := ParseNotifyMode(*notify)
	if err != nil {
		return fmt.Errorf("simulate: -notify: %w", err)
	}
	token := orEnv(*tokenFlag, "PRODUCER_TOKEN", "")
	if *apiURL == "" {
		mode = NotifyNone
	} else if token == "" {
		return errors.New("simulate: -api needs a producer token: -token or $PRODUCER_TOKEN")
	}
	var queueList []string
	for _, q := range strings.FieldsFunc(orEnv(*queues, "QUEUES", strings.Join(DefaultQueues, ",")), func(r rune) bool { return r == ',' || r == '\n' }) {
		if q = strings.TrimSpace(q); q != "" {
			queueList = append(queueList, q)
		}
	}
	w := Workload{
		PullRequests: *prs, Issues: *issues, Pushes: *pushes, Branches: *branches, Installations: *installations,
		Ignored: *ignored, Poison: *poison, Syncs: *syncs, Seed: *seed, RunID: *runID,
	}
	gen, err := w.Generator()
	if err != nil {
		return err
	}

	path := *logPath
	if path == "" {
		path = "simulate-" + time.Now().UTC().Format("20060102T150405Z") + ".jsonl"
	}
	var logOut io.Writer = stdout
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("simulate: -log: %w", err)
		}
		defer f.Close()
		logOut = f
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p, err := New(Config{
		Brokers: eps, Queues: queueList, RetryTTL: ttl, QueueType: queueType, Start: *start, APIURL: *apiURL, Token: token,
		RotateAfter: *rotateAfter, Notify: mode, NotifyUnknown: *notifyUnknown && *apiURL != "",
		Log: logOut, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer p.Close()
	for _, ep := range eps {
		logger.Info("broker", "endpoint", ep) // Endpoint never prints its URL
	}
	logger.Info("simulating", "run_id", gen.RunID(), "messages", gen.Left(), "start", eps[*start], "log", path)

	rotateNow := make(chan os.Signal, 1)
	signal.Notify(rotateNow, syscall.SIGUSR1)
	defer signal.Stop(rotateNow)

	// Messages go out in chunks that share one round of confirms; a rotation asked for with
	// SIGUSR1 takes effect between chunks. With -rate, one message at a time.
	chunk := 100
	if *rate > 0 {
		chunk = 1
	}
	began := time.Now()
	sent := 0
	for gen.Left() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-rotateNow:
			if _, err := p.Rotate(ctx, (p.Active()+1)%len(eps)); err != nil {
				return err
			}
		default:
		}
		var msgs []Message
		for len(msgs) < chunk {
			m, ok, err := gen.Next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			msgs = append(msgs, m)
		}
		if err := p.Publish(ctx, msgs...); err != nil {
			return err
		}
		sent += len(msgs)
		if *rate > 0 {
			due := began.Add(time.Duration(float64(sent) / *rate * float64(time.Second)))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(due)):
			}
		}
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	l := p.Log()
	poisoned := 0
	for _, r := range l.Published {
		if r.Poison {
			poisoned++
		}
	}
	logger.Info("done", "published", len(l.Published), "poison", poisoned, "rotations", len(l.Rotations),
		"notifications", len(l.Notifications), "active", eps[p.Active()], "took", time.Since(began).Round(time.Millisecond))
	return p.LogErr()
}
