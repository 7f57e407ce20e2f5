package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// amqpFootprint is what rabbitmqctl shows of the service's connections ("brokerswitch")
// on each vhost of a stack.
type amqpFootprint struct {
	Connections []int // by broker
	Channels    []int
	Consumers   []int
}

func rabbitFootprint(vhosts []string) (amqpFootprint, error) {
	fp := amqpFootprint{
		Connections: make([]int, len(vhosts)),
		Channels:    make([]int, len(vhosts)),
		Consumers:   make([]int, len(vhosts)),
	}
	var conns []struct {
		PID   string `json:"pid"`
		Vhost string `json:"vhost"`
		// Raw: a connection still in its handshake (another user's, on this shared
		// broker) lists its properties as a string.
		ClientProperties json.RawMessage `json:"client_properties"`
	}
	if err := rabbitJSON(&conns, "list_connections", "pid", "vhost", "client_properties"); err != nil {
		return fp, err
	}
	ours := map[string]int{} // connection pid → broker
	for _, c := range conns {
		i := slices.Index(vhosts, c.Vhost)
		if i < 0 || connectionName(c.ClientProperties) != "brokerswitch" {
			continue
		}
		fp.Connections[i]++
		ours[c.PID] = i
	}
	var chans []struct {
		Connection    string `json:"connection"`
		ConsumerCount int    `json:"consumer_count"`
	}
	if err := rabbitJSON(&chans, "list_channels", "connection", "consumer_count"); err != nil {
		return fp, err
	}
	for _, ch := range chans {
		if i, ok := ours[ch.Connection]; ok {
			fp.Channels[i]++
			fp.Consumers[i] += ch.ConsumerCount
		}
	}
	return fp, nil
}

func connectionName(raw json.RawMessage) string {
	var props [][]any
	if json.Unmarshal(raw, &props) != nil {
		return ""
	}
	for _, p := range props {
		if len(p) == 3 && p[0] == "connection_name" {
			s, _ := p[2].(string)
			return s
		}
	}
	return ""
}

func rabbitJSON(into any, args ...string) error {
	out, err := exec.Command("rabbitmqctl", append([]string{"--quiet"}, append(args, "--formatter", "json")...)...).Output()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %w", args[0], err)
	}
	return json.Unmarshal(out, into)
}

// runHistory is the history of one run of a workflow.
type runHistory struct {
	RunID  string
	Events []*historypb.HistoryEvent
}

// workflowRuns returns the runs of a workflow, oldest first, by following the
// continue-as-new chain back from the current run.
func workflowRuns(ctx context.Context, st *stack, workflowID string) ([]runHistory, error) {
	desc, err := st.Temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", workflowID, err)
	}
	var runs []runHistory
	for runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(); runID != ""; {
		h, err := st.History(ctx, workflowID, runID)
		if err != nil {
			return nil, err
		}
		runs = append(runs, runHistory{RunID: runID, Events: h.GetEvents()})
		runID = ""
		if len(h.GetEvents()) > 0 {
			runID = h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		}
	}
	slices.Reverse(runs)
	return runs, nil
}

// completedActivity is an activity that completed in a run: its type and its result.
type completedActivity struct {
	Type   string
	Result *commonpb.Payloads
}

// completed lists the activities that completed in a run, in order.
func completed(run runHistory) []completedActivity {
	scheduled := map[int64]string{}
	var out []completedActivity
	for _, ev := range run.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			out = append(out, completedActivity{Type: scheduled[a.GetScheduledEventId()], Result: a.GetResult()})
		}
	}
	return out
}

// activityCount counts the activities of a type that completed in a run.
func activityCount(run runHistory, activityType string) int {
	n := 0
	for _, a := range completed(run) {
		if a.Type == activityType {
			n++
		}
	}
	return n
}

// leftoverTaken returns what each Leftover Drain of a run took, summed over brokers: the
// Drained part of PrepareWindow's result.
func leftoverTaken(run runHistory) []int {
	dc := converter.GetDefaultDataConverter()
	var out []int
	for _, a := range completed(run) {
		var w activities.PreparedWindow
		if a.Type != "PrepareWindow" || dc.FromPayloads(a.Result, &w) != nil || len(w.Drained.Taken) == 0 {
			continue
		}
		total := 0
		for _, n := range w.Drained.Taken {
			total += n
		}
		out = append(out, total)
	}
	return out
}

// historyCost summarises the Temporal history of a stack's workflows.
type historyCost struct {
	// WindowEvents are the events of every finished window run (all queues).
	WindowEvents []float64
	// SwitchEvents is the BrokerSwitch workflow's events over all its runs, Commits the
	// switches it committed and DrainChecks the checks it ran.
	SwitchEvents, Commits, DrainChecks int
	// LeftoverTaken is what each Leftover Drain took, in order, all queues mixed.
	LeftoverTaken []int
}

func collectHistory(ctx context.Context, st *stack) (historyCost, error) {
	var hc historyCost
	for _, q := range st.Config.Queues {
		runs, err := workflowRuns(ctx, st, workflows.QueueWindowWorkflowID(q))
		if err != nil {
			return hc, err
		}
		for i, r := range runs {
			hc.LeftoverTaken = append(hc.LeftoverTaken, leftoverTaken(r)...)
			if i == len(runs)-1 { // the last run is still open
				continue
			}
			hc.WindowEvents = append(hc.WindowEvents, float64(len(r.Events)))
		}
	}
	runs, err := workflowRuns(ctx, st, switchID)
	if err != nil {
		return hc, err
	}
	for _, r := range runs {
		hc.SwitchEvents += len(r.Events)
		hc.Commits += activityCount(r, "CommitHop")
		hc.DrainChecks += activityCount(r, "DrainCheck")
	}
	return hc, nil
}
