package dashboard

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The runbook entries the panels name: headings of docs/operations.md (the tests check
// that each exists).
const (
	rbDashboard   = "Dashboard"
	rbFirstLook   = "First look"
	rbAlerts      = "What each alert means"
	rbStuck       = "A switch is stuck"
	rbUnannounced = "A broker has messages the producer never announced"
	rbSpare       = "A spare cannot be drained"
	rbError       = "`-error`: inspecting and requeueing"
	rbBrokers     = "Adding or removing a broker"
	rbBlocked     = "A broker blocks the connection"
	rbHealth      = "HealthChecks"
	rbMetrics     = "Metrics"
	rbLease       = "A worker keeps losing its lease"
	rbUnreadable  = "A message with unreadable headers"
	rbOversize    = "A message over MAX_MESSAGE_BYTES"
	rbQuorum      = "A producer's quorum queue can lose order or messages"
)

// query is one PromQL target and its legend.
type query struct{ expr, legend string }

// about is a panel's description: what it shows, the alerts whose series it draws (their
// threshold is drawn), and its runbook entry.
func about(text, runbook string, alerts ...string) string {
	var b strings.Builder
	b.WriteString(text)
	if len(alerts) > 0 {
		fmt.Fprintf(&b, " Alert %s watches this series; its threshold is drawn in red.", strings.Join(alerts, ", "))
	}
	fmt.Fprintf(&b, " Runbook: docs/operations.md, %q.", runbook)
	return b.String()
}

func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + datasourceVar + "}")}
}

func targets(qs []query) []*prometheus.DataqueryBuilder {
	out := make([]*prometheus.DataqueryBuilder, 0, len(qs))
	for i, q := range qs {
		out = append(out, prometheus.NewDataqueryBuilder().
			Datasource(datasource()).
			RefId(string(rune('A'+i))).
			Expr(q.expr).
			LegendFormat(q.legend))
	}
	return out
}

// signed is a time series panel a third of the row wide, its axis free to go below 0.
func signed(title, unit, description string, qs ...query) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Unit(unit).
		Height(8).
		Span(8).
		FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().
			ShowLegend(true).
			DisplayMode(common.LegendDisplayModeList).
			Placement(common.LegendPlacementBottom))
	for _, t := range targets(qs) {
		p = p.WithTarget(t)
	}
	return p
}

// graph is a time series panel a third of the row wide, its axis from 0.
func graph(title, unit, description string, qs ...query) *timeseries.PanelBuilder {
	return signed(title, unit, description, qs...).Min(0)
}

// wide is a time series panel half the row wide.
func wide(title, unit, description string, qs ...query) *timeseries.PanelBuilder {
	return graph(title, unit, description, qs...).Span(12)
}

// single is a stat panel, a sixth of the row wide.
func single(title, unit, description string, qs ...query) *stat.PanelBuilder {
	p := stat.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource()).
		Unit(unit).
		Height(4).
		Span(4).
		GraphMode(common.BigValueGraphModeNone).
		Orientation(common.VizOrientationAuto).
		ColorMode(common.BigValueColorModeValue).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
	for _, t := range targets(qs) {
		p = p.WithTarget(t)
	}
	return p
}

// above colours what exceeds v: an alert that fires on "> v" (or "== 1" of a 0/1 gauge
// with v=1).
func above(v float64) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps([]dashboard.Threshold{{Color: "green"}, {Value: cog.ToPtr(v), Color: "red"}})
}

// zeroIsBad colours 0 red and 1 or more green: an alert that fires on "== 0". The step at
// 0 is red like the base, so that the line is drawn where the alert fires.
func zeroIsBad() *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps([]dashboard.Threshold{{Color: "red"}, {Value: cog.ToPtr(0.0), Color: "red"}, {Value: cog.ToPtr(1.0), Color: "green"}})
}

// alerting draws the thresholds on a time series as dashed lines.
func alerting(p *timeseries.PanelBuilder, t *dashboard.ThresholdsConfigBuilder) *timeseries.PanelBuilder {
	return p.Thresholds(t).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
}

func nowPanels() []panel {
	return []panel{
		single("Active broker", "none",
			about("Index of the broker the windows consume, in RABBITMQ_CONNECTION_STRINGS order; read from Postgres at every scrape, so every replica says the same.", rbFirstLook),
			query{"max(brokerswitch_active_broker)", "active"}),
		single("Pending switch age", "s",
			about("How long the Pending Switch has waited for the active broker to drain; 0 when none is pending.", rbStuck, "BrokerswitchPendingTooLong"),
			query{"max(brokerswitch_pending_switch_age_seconds)", "age"}).
			Thresholds(above(45 * 60)),
		single("Pending hops", "none",
			about("Hops left on the Pending Switch's route; 0 when none is pending, more than 1 after a double rotation.", rbStuck),
			query{"max(brokerswitch_pending_switch_hops)", "hops"}),
		single("State readable", "none",
			about("1 when the processes could read the broker state from Postgres at their last scrape; 0 means nothing is applied and no switch commits.", rbAlerts, "BrokerswitchStateUnreadable"),
			query{"max(brokerswitch_state_up)", "state"}).
			Thresholds(zeroIsBad()),
		single("Workers up", "none",
			about("Prometheus' up series of each worker it scrapes (job brokerswitch-worker).", rbAlerts, "BrokerswitchWorkerDown"),
			query{`up{job="brokerswitch-worker"}`, "{{instance}}"}).
			Thresholds(zeroIsBad()),
		single("Builds running", "none",
			about("Processes per build (brokerswitch_build_info): two builds side by side mean a rollout is under way.", rbMetrics),
			query{"count by (version, revision) (brokerswitch_build_info)", "{{version}}"}).
			TextMode(common.BigValueTextModeValueAndName),
		alerting(wide("Active broker reachable while a switch is pending", "none",
			about("Whether the last drain check reached the broker it checked, beside the hops still pending: a switch cannot complete while the active broker is unreachable.", rbStuck, "BrokerswitchActiveBrokerUnreachable"),
			query{"min(brokerswitch_drain_check_reachable)", "reachable"},
			query{"max(brokerswitch_pending_switch_hops)", "pending hops"}), zeroIsBad()),
		wide("State freshness", "s",
			about("Seconds since the last drain check (it runs only while a switch is pending, so this grows between switches) and since the last ledger retention sweep (every 10 minutes per worker).", rbFirstLook),
			query{"time() - max(brokerswitch_drain_check_timestamp_seconds)", "since the last drain check"},
			query{"time() - max(brokerswitch_ledger_retention_last_sweep_timestamp_seconds)", "since the last retention sweep"}),
	}
}

func queuePanels() []panel {
	return []panel{
		wide("Ready messages at the last drain check", "short",
			about("What the last drain check counted per queue (the -retry queues included) on the broker it checked. The service counts queues only to decide a switch; RabbitMQ's own Prometheus plugin serves live ready and unacked counts of every queue, -error included.", rbStuck),
			query{"max by (queue, broker) (brokerswitch_drain_check_ready_messages)", "{{queue}} on broker {{broker}}"}),
		alerting(wide("Leftover Drain takes (1h)", "short",
			about("Messages the Leftover Drain took from brokers that are not active, over the last hour: stragglers after a switch are normal, a steady stream is not.", rbDashboard, "BrokerswitchLeftoverDrainBusy"),
			query{"sum by (broker) (increase(brokerswitch_leftover_drain_messages_total[1h]))", "broker {{broker}}"}), above(100)),
		alerting(wide("Leftover Drain visits that failed (5m)", "short",
			about("Visits that failed on a broker that answers (its queue's windows then do not read the active broker) and visits that skipped a broker that is down.", rbSpare, "BrokerswitchLeftoverDrainFailing"),
			query{"sum by (broker, queue) (increase(brokerswitch_leftover_drain_failures_total[5m]))", "failed: {{queue}} on broker {{broker}}"},
			query{"sum by (broker, queue) (increase(brokerswitch_leftover_drain_unreachable_total[5m]))", "unreachable: {{queue}} on broker {{broker}}"}), above(0)),
		alerting(wide("Un-notified brokers: held and read (5m)", "short",
			about("Visits that left messages the producer never announced on a broker, plus such messages read once UNNOTIFIED_BROKER_GRACE passed; how long the line stays up is how long the broker was held.", rbUnannounced, "BrokerswitchUnannouncedBroker"),
			query{"sum by (broker) (increase(brokerswitch_unannounced_held_total[5m])) + sum by (broker) (increase(brokerswitch_unannounced_messages_total[5m]))", "broker {{broker}}"}), above(0)),
	}
}

func flowPanels() []panel {
	return []panel{
		graph("Events applied per second", "ops",
			about("Deliveries written to the typed tables, per logical queue, counted once their ledger row committed.", rbMetrics),
			query{`sum by (queue) (rate(brokerswitch_events_total{outcome="applied"}[$__rate_interval]))`, "{{queue}}"}),
		graph("Deliveries per second by outcome", "ops",
			about("Every delivery handled: applied, ignored (no table), duplicate (already in the ledger), retried (through -retry), rejected (to -error).", rbMetrics),
			query{"sum by (outcome) (rate(brokerswitch_events_total[$__rate_interval]))", "{{outcome}}"}),
		alerting(graph("Queues consumed, by the workers' leases", "short",
			about("Consume attempts that live workers hold for each queue, read from their leases in Postgres at every scrape: 1 while the queue is read; 0 for seconds between two windows or while a dead worker's window is taken over, and for longer when no worker runs the queue.", rbAlerts, "BrokerswitchQueueNotConsumed"),
			query{"max by (queue) (brokerswitch_windows_consuming)", "{{queue}}"}), zeroIsBad()),
		graph("Ledger rows", "short",
			about("Rows in github_deliveries at the last retention sweep (Postgres' estimate), and rows the sweeps deleted in the last hour.", rbAlerts),
			query{"max(brokerswitch_ledger_rows)", "rows"},
			query{"sum(increase(brokerswitch_ledger_rows_deleted_total[1h]))", "deleted in the last hour"}),
		graph("Ledger bytes", "bytes",
			about("github_deliveries with its indexes and TOAST at the last retention sweep.", rbAlerts),
			query{"max(brokerswitch_ledger_bytes)", "bytes"}),
		alerting(signed("Ledger retention behind", "s",
			about("How far the oldest ledger row is past LEDGER_RETENTION after the last sweep: negative (about minus LEDGER_RETENTION on a young ledger) while the sweeps keep up. A worker that has not swept yet reports 0, left out here.", rbAlerts, "BrokerswitchLedgerRetentionBehind"),
			query{"time() - min(brokerswitch_ledger_oldest_row_timestamp_seconds > 0) - max(brokerswitch_ledger_retention_seconds)", "oldest row past retention"}), above(3600)),
	}
}

func errorPanels() []panel {
	return []panel{
		alerting(graph("Messages to -error (30m)", "short",
			about("Messages copied to {q}-error over the last 30 minutes: malformed, out of retry cycles, or a reused delivery id. Each carries its reason in x-error-reason.", rbError, "BrokerswitchMessagesToError"),
			query{`sum by (queue) (increase(brokerswitch_routed_messages_total{route="error"}[30m]))`, "{{queue}}"}), above(0)),
		graph("Rejections by cause (30m)", "short",
			about("Deliveries rejected to -error by GitHub event type, and those whose id the ledger holds with another payload (a producer that reuses ids, or a forged delivery).", rbError),
			query{`sum by (event) (increase(brokerswitch_events_total{outcome="rejected"}[30m]))`, "rejected: {{event}}"},
			query{"sum by (queue) (increase(brokerswitch_delivery_id_reused_total[30m]))", "id reused: {{queue}}"}),
		graph("Requeued and purged from -error (1h)", "short",
			about("Messages operators took out of {q}-error with `brokerswitch errors requeue` (back to their queue) or `purge` (for good), by queue and kind of reason: what the messages to -error became.", rbError),
			query{"sum by (queue, reason) (increase(brokerswitch_error_messages_requeued_total[1h])) > 0", "requeued: {{queue}} {{reason}}"},
			query{"sum by (queue, reason) (increase(brokerswitch_error_messages_purged_total[1h])) > 0", "purged: {{queue}} {{reason}}"}),
		alerting(graph("Messages with unreadable headers (15m)", "short",
			about("Consumer connections cut by a message whose headers the AMQP client refuses: moved (copied to {q}-error unread) or not_found (none found at the head: the queue may be stopped at it).", rbUnreadable, "BrokerswitchUnreadableMessageStuck"),
			query{`sum by (queue) (increase(brokerswitch_unreadable_messages_total{outcome="not_found"}[15m]))`, "not found: {{queue}}"},
			query{`sum by (queue) (increase(brokerswitch_unreadable_messages_total{outcome="moved"}[15m]))`, "moved: {{queue}}"}), above(0)),
		alerting(graph("Messages over MAX_MESSAGE_BYTES moved (1h)", "short",
			about("Messages whose body is over MAX_MESSAGE_BYTES, never held by a consumer and streamed to {q}-error unread; each costs its queue a new channel and the redelivery of what was prefetched behind it.", rbOversize, "BrokerswitchOversizeMessages"),
			query{`sum by (queue) (increase(brokerswitch_oversize_messages_total{outcome="moved"}[1h]))`, "{{queue}}"}), above(0)),
		alerting(graph("Messages over MAX_MESSAGE_BYTES not moved (15m)", "short",
			about("Moves of such a message that failed or found another message at the head; the next window tries again, so a count that keeps rising means the queue stands at it.", rbOversize, "BrokerswitchOversizeMessageStuck"),
			query{`sum by (queue) (increase(brokerswitch_oversize_messages_total{outcome="not_moved"}[15m]))`, "{{queue}}"}), above(3)),
		alerting(graph("Producers' quorum queues at risk", "short",
			about("A producer's quorum queue whose delivery limit or dead-letter strategy can lose order or messages, by broker, queue and risk (1 while it is so).", rbQuorum, "BrokerswitchQuorumQueueRisk"),
			query{"max by (broker, queue, risk) (brokerswitch_quorum_queue_risk)", "broker {{broker}} {{queue}}: {{risk}}"}), above(0)),
		alerting(graph("Deliveries back from their delivery limit (15m)", "short",
			about("Messages dead-lettered for their quorum queue's delivery limit that came back behind later ones and were applied out of queue order.", rbQuorum, "BrokerswitchDeliveryLimitReturns"),
			query{"sum by (queue) (increase(brokerswitch_delivery_limit_returns_total[15m]))", "{{queue}}"}), above(0)),
		alerting(graph("Retries per second", "ops",
			about("Deliveries dead-lettered to {q}-retry: each returns after RETRY_TTL and goes to -error after MAX_RETRY_CYCLES; its -retry tail also holds a Pending Switch.", rbStuck, "BrokerswitchRetriesSustained"),
			query{`sum by (queue) (rate(brokerswitch_routed_messages_total{route="retry"}[15m]))`, "{{queue}}"}), above(0)),
		alerting(graph("Window restarts (10m)", "short",
			about("Windows that failed (the activity retries them) beside those that ended well: failures with nothing else means nothing is consumed.", rbAlerts, "BrokerswitchWindowsFailing"),
			query{`sum by (queue) (increase(brokerswitch_consumer_window_seconds_count{end="failed"}[10m]))`, "failed: {{queue}}"},
			query{`sum by (queue) (increase(brokerswitch_consumer_window_seconds_count{end!="failed"}[10m]))`, "ended well: {{queue}}"}), above(0)),
		alerting(graph("Failed dials (10m)", "short",
			about("Attempts to connect to a broker that failed: a spare that is down only pauses its Leftover Drain, the active one fails windows too.", rbBrokers, "BrokerswitchBrokerUnreachable"),
			query{"sum by (broker) (increase(brokerswitch_amqp_dial_failures_total[10m]))", "broker {{broker}}"}), above(0)),
		alerting(graph("Reconnects (15m)", "short",
			about("Connections reopened after a loss, and connections the broker or the network closed: each drop ends the windows reading that broker.", rbBrokers, "BrokerswitchAMQPReconnectsFrequent"),
			query{"sum by (broker) (increase(brokerswitch_amqp_reconnects_total[15m]))", "reconnects: broker {{broker}}"},
			query{"sum by (broker) (increase(brokerswitch_amqp_connections_lost_total[15m]))", "lost: broker {{broker}}"}), above(5)),
		alerting(graph("Blocked by a broker", "none",
			about("1 while a broker blocks our connection (a memory or disk alarm): windows stall on the first message they must copy to -error.", rbBlocked, "BrokerswitchAMQPBlocked"),
			query{"max by (broker) (brokerswitch_amqp_blocked)", "broker {{broker}}"}), above(1)),
		alerting(graph("HealthChecks pings lost (30m)", "short",
			about("Pings to HEALTHCHECKS_PING_URL that could not be delivered: the check then reports late although windows run.", rbHealth, "BrokerswitchHealthchecksPingsFailing"),
			query{"sum(increase(brokerswitch_healthchecks_ping_failures_total[30m]))", "lost pings"}), above(0)),
		graph("Clock fallbacks (1h)", "short",
			about("Applied events whose entity clock was missing or unparseable, by table: their row followed queue order instead of GitHub's clock.", rbMetrics),
			query{"sum by (table, reason) (increase(brokerswitch_clock_fallbacks_total[1h])) > 0", "{{table}}: {{reason}}"}),
	}
}

func controlPlanePanels() []panel {
	ps := []panel{
		wide("Temporal Actions the processes cause (1h)", "short",
			about("Billable events the processes ask Temporal for, from the SDK's own metrics: activity heartbeats, activities run, continue-as-new, and the API's starts and signals. Timers, markers and memo changes are not counted by the SDK: the server's action counter is the bill (docs/design.md, \"What it costs on Temporal\": a few an hour when idle, no heartbeats).", rbDashboard),
			query{`sum(increase(temporal_request_total{operation="RecordActivityTaskHeartbeat"}[1h]))`, "heartbeats"},
			query{"sum(increase(temporal_activity_execution_latency_seconds_count[1h]))", "activities"},
			query{"sum(increase(temporal_workflow_continue_as_new_total[1h]))", "continue-as-new"},
			query{`sum(increase(temporal_request_total{operation=~"StartWorkflowExecution|SignalWorkflowExecution|SignalWithStartWorkflowExecution"}[1h]))`, "starts and signals"}).
			Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)),
		alerting(wide("Workflow task failures", "ops",
			about("Workflow tasks that failed, by workflow type: such a task is retried forever (a panic, or a history the code cannot replay after a deploy).", rbAlerts, "BrokerswitchWorkflowTasksFailing"),
			query{"sum by (workflow_type) (rate(temporal_workflow_task_execution_failed_total[10m]))", "{{workflow_type}}"}), above(0)),
		wide("Switches and drain checks (1h)", "short",
			about("Switches committed after a drain check found the old broker empty (forced=false) or forced by an operator, and drain checks by result.", rbStuck),
			query{"sum by (forced) (increase(brokerswitch_switches_total[1h]))", "switches, forced={{forced}}"},
			query{"sum by (result) (increase(brokerswitch_drain_checks_total[1h]))", "drain checks: {{result}}"}),
		wide("Switch times", "s",
			about("How long Pending Switches waited from their recording to the commit of a hop (the time the producer's new broker went unread), and from the drain check that found the old broker empty to the commit; quantiles over the last hour.", rbStuck),
			query{"histogram_quantile(0.5, sum by (le) (rate(brokerswitch_switch_pending_seconds_bucket[1h])))", "pending, median"},
			query{"histogram_quantile(0.95, sum by (le) (rate(brokerswitch_switch_pending_seconds_bucket[1h])))", "pending, p95"},
			query{"histogram_quantile(0.95, sum by (le) (rate(brokerswitch_switch_commit_lag_seconds_bucket[1h])))", "drained to committed, p95"}),
	}
	return append(ps, takeoverPanels()...)
}

// takeoverPanels show the workers' leases: how often a worker gave its windows up because
// it could not renew its lease, and how many attempts of dead workers the others took over.
func takeoverPanels() []panel {
	return []panel{
		alerting(wide("Worker leases lost (15m)", "short",
			about("Times each worker could not renew its lease in Postgres (or reach Temporal) for three quarters of WORKER_LEASE_TTL and stopped its windows, which then moved to a live worker.", rbLease, "BrokerswitchWorkerLeaseLost"),
			query{"sum by (instance) (increase(brokerswitch_worker_lease_lost_total[15m]))", "{{instance}}"}), above(3)),
		wide("Attempts of dead workers taken over (1h)", "short",
			about("Activity attempts whose worker's lease expired, failed by a live worker so that Temporal retried them at once, by activity: each is a take-over after a worker died or lost its lease.", rbLease),
			query{"sum by (activity) (increase(brokerswitch_worker_lease_reaped_total[1h]))", "{{activity}}"}),
	}
}
