package operator

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/errorqueue"
	"github.com/brokerswitch/brokerswitch/liveness"
)

// brokerStatus is the part of GET /api/v1/broker that status prints.
type brokerStatus struct {
	Brokers []struct {
		Index  int    `json:"index"`
		Host   string `json:"host"`
		Port   int    `json:"port"`
		Vhost  string `json:"vhost"`
		Active bool   `json:"active"`
	} `json:"brokers"`
	ActiveIndex    int                        `json:"activeIndex"`
	PendingSwitch  *brokerstate.PendingSwitch `json:"pendingSwitch"`
	LastSwitch     *brokerstate.LastSwitch    `json:"lastSwitch"`
	LastDrainCheck *brokerstate.DrainCheck    `json:"lastDrainCheck"`
	Workflow       struct {
		Status  string `json:"status"`
		Waiting string `json:"waiting"`
		Error   string `json:"error"`
	} `json:"workflow"`
	Windows []liveness.Attempt `json:"windows"`
}

// Status runs `brokerswitch status`: the broker state at a glance, from the API.
func Status(ctx context.Context, args []string, getenv Getenv, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("brokerswitch status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conn := connectionFlags(fs, getenv)
	if rest, err := parseFlags(fs, args); err != nil || len(rest) > 0 {
		return usageErr(err, rest)
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	var st brokerStatus
	rawState, err := c.get(ctx, "/api/v1/broker", &st)
	if err != nil {
		return err
	}
	var l errorqueue.Listing
	rawErrors, errorsErr := c.get(ctx, "/api/v1/errors?limit=1", &l)
	if conn.json() {
		if errorsErr != nil {
			rawErrors = []byte("null")
		}
		_, err := fmt.Fprintf(stdout, "{\"broker\":%s,\"errors\":%s}\n", rawState, rawErrors)
		return err
	}
	printStatus(stdout, st, l, errorsErr)
	return nil
}

func printStatus(w io.Writer, st brokerStatus, l errorqueue.Listing, errorsErr error) {
	for _, b := range st.Brokers {
		if b.Index == st.ActiveIndex {
			fmt.Fprintf(w, "active broker:  %d (%s:%d/%s)\n", b.Index, b.Host, b.Port, b.Vhost)
		}
	}
	if st.ActiveIndex < 0 {
		fmt.Fprintln(w, "active broker:  none of the configured ones (removed from RABBITMQ_CONNECTION_STRINGS): force a switch")
	}
	if p := st.PendingSwitch; p != nil && len(p.Route) > 0 {
		fmt.Fprintf(w, "pending switch: %d → %d, recorded %s (%s ago)", st.ActiveIndex, p.Route[len(p.Route)-1].Index, stamp(&p.RecordedAt), time.Since(p.RecordedAt).Round(time.Second))
		fmt.Fprintf(w, ", route %d hop(s)\n", len(p.Route))
		switch {
		case st.Workflow.Waiting != "":
			fmt.Fprintf(w, "  waits for:    %s\n", st.Workflow.Waiting)
		case st.Workflow.Error != "":
			fmt.Fprintf(w, "  waits for:    unknown: %s\n", st.Workflow.Error)
		}
	} else {
		fmt.Fprintln(w, "pending switch: none")
	}
	if s := st.LastSwitch; s != nil {
		how := "drained"
		if s.Forced {
			how = "forced"
		}
		fmt.Fprintf(w, "last switch:    %d → %d at %s (%s)\n", s.From, s.To, stamp(&s.CompletedAt), how)
	} else {
		fmt.Fprintln(w, "last switch:    none")
	}
	fmt.Fprintf(w, "workflow:       %s\n", st.Workflow.Status)
	fmt.Fprintln(w, "\nwindows:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  QUEUE\tBROKER\tACTIVITY\tWORKER\tSINCE")
	for _, a := range st.Windows {
		b := "-"
		if a.Broker != nil {
			b = fmt.Sprint(*a.Broker)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", a.Queue, b, a.ActivityType, a.Worker, stamp(&a.Since))
	}
	tw.Flush()
	if len(st.Windows) == 0 {
		fmt.Fprintln(w, "  none held: is a worker running?")
	}
	fmt.Fprintln(w, "\n-error queues:")
	if errorsErr != nil {
		fmt.Fprintf(w, "  not read: %v\n", errorsErr)
		return
	}
	printErrorCounts(w, l)
}

func printErrorCounts(w io.Writer, l errorqueue.Listing) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  BROKER\tQUEUE\tMESSAGES\tOLDEST")
	for _, q := range l.Queues {
		if q.Error != "" {
			fmt.Fprintf(tw, "  %d\t%s-error\t?\tNOT READ: %s\n", q.Broker, q.Queue, q.Error)
			continue
		}
		fmt.Fprintf(tw, "  %d\t%s-error\t%d\t%s\n", q.Broker, q.Queue, q.Held, stamp(q.Oldest))
	}
	tw.Flush()
}
