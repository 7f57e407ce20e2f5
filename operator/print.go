package operator

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/brokerswitch/brokerswitch/errorqueue"
)

// stamp is a time as the text output shows it, "-" for none.
func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func printListing(w io.Writer, l errorqueue.Listing) {
	fmt.Fprintf(w, "filter: %s\n\n", l.Filter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BROKER\tQUEUE\tHELD\tMATCHED\tOLDEST\tNEWEST\tREASONS")
	for _, q := range l.Queues {
		if q.Error != "" {
			fmt.Fprintf(tw, "%d\t%s-error\t?\t?\t\t\tNOT READ: %s\n", q.Broker, q.Queue, q.Error)
			continue
		}
		var reasons []string
		for _, r := range q.Reasons {
			reasons = append(reasons, fmt.Sprintf("%s %d", r.Kind, r.Count))
		}
		fmt.Fprintf(tw, "%d\t%s-error\t%d\t%d\t%s\t%s\t%s\n", q.Broker, q.Queue, q.Held, q.Matched, stamp(q.Oldest), stamp(q.Newest), strings.Join(reasons, ", "))
	}
	tw.Flush()
	if len(l.Messages) == 0 {
		fmt.Fprintln(w, "\nno message matches")
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBROKER\tQUEUE\tEVENT\tACTION\tSIZE\tREJECTED\tAPPLIED SINCE\tREASON")
	for _, m := range l.Messages {
		applied := "no"
		if m.AppliedSince {
			applied = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Broker, m.Queue, m.Event, m.Action, m.Size, stamp(&m.ErrorAt), applied, oneLine(m.Reason, 100))
	}
	tw.Flush()
	if l.Truncated {
		fmt.Fprintf(w, "(%d of %d messages listed: -limit shows more)\n", len(l.Messages), l.Matched)
	}
}

// oneLine is s on one line, cut to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func printShown(w io.Writer, shown errorqueue.Shown) {
	for i, d := range shown.Messages {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "message %s on broker %d, %s-error (position %d)\n", d.ID, d.Broker, d.Queue, d.Position)
		fmt.Fprintf(w, "  event:    %s %s\n  rejected: %s\n  reason:   %s (%s)\n", d.Event, d.Action, stamp(&d.ErrorAt), d.Reason, d.ReasonKind)
		fmt.Fprintln(w, "  headers:")
		keys := make([]string, 0, len(d.Headers))
		for k := range d.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "    %s: %v\n", k, d.Headers[k])
		}
		if l := d.Ledger; l != nil {
			fmt.Fprintf(w, "  ledger:   %s (received %s, applied %s, %d retry cycles) %s\n", l.Outcome, stamp(&l.ReceivedAt), stamp(l.AppliedAt), l.RetryCycles, l.ErrorReason)
		} else {
			fmt.Fprintln(w, "  ledger:   no row (never applied: malformed headers, unreadable or oversize)")
		}
		fmt.Fprintf(w, "  applied since: %v\n", d.AppliedSince)
		if d.BodyCut {
			fmt.Fprintf(w, "  body (first %d of %d bytes):\n%s\n", len(d.Body), d.Size, d.Body)
		} else {
			fmt.Fprintf(w, "  body (%d bytes):\n%s\n", d.Size, d.Body)
		}
	}
	for _, u := range shown.Unread {
		fmt.Fprintf(w, "not read: %s\n", u)
	}
}

func printRun(w io.Writer, run errorqueue.Run) {
	verb := ""
	if run.DryRun {
		verb = " (dry run: nothing moved)"
	}
	fmt.Fprintf(w, "filter: %s%s\nmatched: %d\n\n", run.Filter, verb, run.Matched)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BROKER\tQUEUE\tREASON\tREQUEUED\tALREADY COPIED\tSKIPPED (APPLIED)\tPURGED")
	for _, o := range run.Outcomes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\n", o.Broker, o.Queue, o.Kind, o.Requeued, o.AlreadyCopied, o.Skipped, o.Purged)
	}
	tw.Flush()
	for _, m := range run.Skipped {
		fmt.Fprintf(w, "skipped %s (%s-error on broker %d): the ledger shows it applied since; -purge-applied takes it\n", m.ID, m.Queue, m.Broker)
	}
	for _, e := range run.Errors {
		fmt.Fprintf(w, "NOT DONE: %s\n", e)
	}
}
