package operator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/errorqueue"
)

const errorsUsage = `usage: brokerswitch errors <list|show|requeue|purge> [flags]

  list     count and list the messages of the {q}-error queues of every broker; reads
           without taking anything: every message stays in -error, in its place
  show ID  one message (by delivery id): headers, reason, ledger row, body cut to -body-bytes
  requeue  copy messages back to their own queue on their own broker, each taken from
           -error once the broker confirmed its copy; one the ledger shows applied since
           is skipped (and reported), or purged with -purge-applied
  purge    take messages from -error for good; needs -yes

A requeued message comes back behind the events published since it failed: rows with
GitHub's clock (issues, pull requests, comments...) stay right, as an older event does not
overwrite a newer one; the other tables take it as the latest. A run stopped half way
(Ctrl-C, a lost connection) and run again copies nothing twice.

Filters (list, requeue, purge): -broker N, -queue Q (a logical queue), -event E,
-reason R (a kind: malformed, oversize, unreadable, reused_id, data, too_costly,
retries, other; or words of the reason), -id ID, -since and -until (RFC 3339).
requeue and purge need a filter or -all. Every command takes -api, -token and -o json.
`

// Errors runs `brokerswitch errors ...`.
func Errors(ctx context.Context, args []string, getenv Getenv, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, errorsUsage)
		if len(args) == 0 {
			return errors.New("errors: no subcommand given")
		}
		return nil
	}
	switch args[0] {
	case "list":
		return errorsList(ctx, args[1:], getenv, stdout, stderr)
	case "show":
		return errorsShow(ctx, args[1:], getenv, stdout, stderr)
	case "requeue":
		return errorsRequeue(ctx, args[1:], getenv, stdout, stderr)
	case "purge":
		return errorsPurge(ctx, args[1:], getenv, stdout, stderr)
	}
	fmt.Fprint(stderr, errorsUsage)
	return fmt.Errorf("errors: unknown subcommand %q", args[0])
}

// filterFlags are the filter's flags, as strings until parsed.
type filterFlags struct {
	broker, queue, event, reason, id, since, until *string
	all                                            *bool
}

func addFilterFlags(fs *flag.FlagSet, withAll bool) filterFlags {
	f := filterFlags{
		broker: fs.String("broker", "", "only this broker's index"),
		queue:  fs.String("queue", "", "only this logical queue ({q}-error is read)"),
		event:  fs.String("event", "", "only this x-github-event"),
		reason: fs.String("reason", "", "only this kind of reason, or reasons holding these words"),
		id:     fs.String("id", "", "only this delivery id"),
		since:  fs.String("since", "", "only messages rejected at or after this time (RFC 3339)"),
		until:  fs.String("until", "", "only messages rejected before this time (RFC 3339)"),
	}
	if withAll {
		f.all = fs.Bool("all", false, "every message of every -error queue (when no filter is given)")
	}
	return f
}

// parse builds the filter; a move without a filter needs -all.
func (f filterFlags) parse() (errorqueue.Filter, error) {
	out := errorqueue.Filter{Queue: *f.queue, Event: *f.event, Reason: *f.reason, ID: *f.id}
	if *f.broker != "" {
		n, err := strconv.Atoi(*f.broker)
		if err != nil {
			return out, fmt.Errorf("-broker %q: want a broker's index", *f.broker)
		}
		out.Broker = &n
	}
	for _, t := range []struct {
		name, v string
		to      *time.Time
	}{{"since", *f.since, &out.Since}, {"until", *f.until, &out.Until}} {
		if t.v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			return out, fmt.Errorf("-%s %q: want RFC 3339, like 2026-12-01T10:00:00Z", t.name, t.v)
		}
		*t.to = at
	}
	if f.all != nil && out == (errorqueue.Filter{}) && !*f.all {
		return out, errors.New("no filter given: name what to move (-id, -reason, -queue, ...) or say -all")
	}
	return out, nil
}

// query is the filter as GET /api/v1/errors takes it.
func query(f errorqueue.Filter) url.Values {
	q := url.Values{}
	if f.Broker != nil {
		q.Set("broker", strconv.Itoa(*f.Broker))
	}
	for k, v := range map[string]string{"queue": f.Queue, "event": f.Event, "reason": f.Reason, "id": f.ID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !f.Since.IsZero() {
		q.Set("since", f.Since.Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.Format(time.RFC3339))
	}
	return q
}

// parseFlags parses args, printing fs's usage on an error; it takes flags after the
// positional arguments too (show ID -o json).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("brokerswitch errors "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func errorsList(ctx context.Context, args []string, getenv Getenv, stdout, stderr io.Writer) error {
	fs := newFlagSet("list", stderr)
	conn := connectionFlags(fs, getenv)
	ff := addFilterFlags(fs, false)
	limit := fs.Int("limit", errorqueue.DefaultListLimit, "list at most this many messages (the counts cover all)")
	c, f, err := parseFiltered(fs, args, ff, conn)
	if err != nil {
		return err
	}
	q := query(f)
	q.Set("limit", strconv.Itoa(*limit))
	return getAndPrint(ctx, c, conn, "/api/v1/errors?"+q.Encode(), stdout, printListing)
}

func errorsShow(ctx context.Context, args []string, getenv Getenv, stdout, stderr io.Writer) error {
	fs := newFlagSet("show", stderr)
	conn := connectionFlags(fs, getenv)
	bodyBytes := fs.Int("body-bytes", errorqueue.DefaultBodyBytes, "show at most this many bytes of the body")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("errors show: give one delivery id (brokerswitch errors list shows them)")
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	path := "/api/v1/errors/" + url.PathEscape(rest[0]) + "?bodyBytes=" + strconv.Itoa(*bodyBytes)
	return getAndPrint(ctx, c, conn, path, stdout, printShown)
}

// getAndPrint reads path's answer into a T and prints it: as the API sent it with -o json,
// else with print, for a person.
func getAndPrint[T any](ctx context.Context, c *client, conn connection, path string, stdout io.Writer, print func(io.Writer, T)) error {
	var v T
	raw, err := c.get(ctx, path, &v)
	if err != nil {
		return err
	}
	if conn.json() {
		_, err := fmt.Fprintln(stdout, string(raw))
		return err
	}
	print(stdout, v)
	return nil
}

func errorsRequeue(ctx context.Context, args []string, getenv Getenv, stdout, stderr io.Writer) error {
	fs := newFlagSet("requeue", stderr)
	conn := connectionFlags(fs, getenv)
	ff := addFilterFlags(fs, true)
	var opts errorqueue.RequeueOptions
	fs.BoolVar(&opts.DryRun, "dry-run", false, "say what would be requeued, skipped and purged; move nothing")
	fs.Float64Var(&opts.Rate, "rate", 0, "copy at most this many messages per second (0: no cap)")
	fs.BoolVar(&opts.PurgeApplied, "purge-applied", false, "purge the messages the ledger shows applied since, rather than skip them")
	c, f, err := parseFiltered(fs, args, ff, conn)
	if err != nil {
		return err
	}
	body := struct {
		errorqueue.Filter
		errorqueue.RequeueOptions
	}{f, opts}
	return runMove(ctx, c, conn, "/api/v1/errors/requeue", body, stdout)
}

func errorsPurge(ctx context.Context, args []string, getenv Getenv, stdout, stderr io.Writer) error {
	fs := newFlagSet("purge", stderr)
	conn := connectionFlags(fs, getenv)
	ff := addFilterFlags(fs, true)
	yes := fs.Bool("yes", false, "yes, take these messages from -error for good")
	if rest, err := parseFlags(fs, args); err != nil || len(rest) > 0 {
		return usageErr(err, rest)
	}
	f, err := ff.parse()
	if err != nil {
		return err
	}
	if !*yes {
		return errors.New("errors purge cannot be undone: say -yes (list first with the same filter to see what it takes)")
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	body := struct {
		errorqueue.Filter
		Confirm bool `json:"confirm"`
	}{f, true}
	return runMove(ctx, c, conn, "/api/v1/errors/purge", body, stdout)
}

// runMove posts a requeue or purge and prints its run; a run that could not read or
// finish a queue fails the command after printing what it did.
func runMove(ctx context.Context, c *client, conn connection, path string, body any, stdout io.Writer) error {
	raw, err := c.do(ctx, http.MethodPost, path, body, true)
	if err != nil {
		return err
	}
	var run errorqueue.Run
	if err := json.Unmarshal(raw, &run); err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if conn.json() {
		fmt.Fprintln(stdout, string(raw))
	} else {
		printRun(stdout, run)
	}
	if len(run.Errors) > 0 {
		return fmt.Errorf("%d queue(s) not done: %s", len(run.Errors), strings.Join(run.Errors, "; "))
	}
	return nil
}

// parseFiltered parses the flags of a command that takes a filter and no arguments (list,
// requeue, purge), then its filter, and gives the API client its connection flags name.
func parseFiltered(fs *flag.FlagSet, args []string, ff filterFlags, conn connection) (*client, errorqueue.Filter, error) {
	if rest, err := parseFlags(fs, args); err != nil || len(rest) > 0 {
		return nil, errorqueue.Filter{}, usageErr(err, rest)
	}
	f, err := ff.parse()
	if err != nil {
		return nil, errorqueue.Filter{}, err
	}
	c, err := conn.client()
	return c, f, err
}

func usageErr(err error, rest []string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("unexpected arguments %q", rest)
}
