package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// month is the 30 days the Actions figures are extrapolated to.
const month = 30 * 24 * time.Hour

// actionsResult is what brokerswitch costs in Temporal Actions at the default settings
// (CONSUMER_WINDOW, 4 queues, 3 s drain checks), counted by the server itself: the dev
// server's `action` counter is the count Temporal Cloud bills. Windows last hours, so a
// run does not wait for one to end by its length: it counts what runs between window
// ends (Idle, Steady), and one window's end and restart (Turnover), and adds the two.
type actionsResult struct {
	// Window and Queues are the settings the month is extrapolated with.
	Window time.Duration
	Queues int
	// Idle is every Action of the namespace, by type, over IdlePeriod while the windows
	// consume an idle queue.
	IdlePeriod time.Duration
	Idle       map[string]float64
	// Steady is the same over SteadyPeriod while the producer publishes SteadyRate events
	// per second.
	SteadyPeriod time.Duration
	SteadyRate   float64
	Steady       map[string]float64
	// Switch is the Actions of one rotation: from the notification until the counter shows
	// that the switch ended every window and the BrokerSwitch workflow watches again.
	Switch map[string]float64
	// Turnover is the Actions of one window of one queue ending and the next consuming:
	// here ended by a straggler on the broker the switch left.
	Turnover map[string]float64
	// StragglerLag is from the straggler's publish on that spare to its row applied.
	StragglerLag time.Duration
}

// idleFallbackActions is what the idle BrokerSwitch workflow's fallback costs each
// idleFallbackEvery (workflows' idleFallback): a timer, a read and a new watch. A run does
// not last long enough to see one, so it is added as designed.
const (
	idleFallbackActions = 3
	idleFallbackEvery   = 6 * time.Hour
)

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// betweenWindows is a month of every window's end and restart, and of the idle fallback.
func (a actionsResult) betweenWindows() float64 {
	if a.Window <= 0 {
		return 0
	}
	windows := float64(a.Queues) * float64(month) / float64(a.Window)
	return windows*total(a.Turnover) + idleFallbackActions*float64(month)/float64(idleFallbackEvery)
}

// perMonth extrapolates a count over period (Idle, Steady) to 30 days.
func (a actionsResult) perMonth(count map[string]float64, period time.Duration) float64 {
	return total(count)*float64(month)/float64(period) + a.betweenWindows()
}

// actionsPeriod is how long the idle and the steady counts run.
const actionsPeriod = 3 * time.Minute

// runActions measures the Actions of one deployment with two brokers and the defaults,
// and a straggler on a spare.
func runActions(s *figure, rate float64) actionsResult {
	ctx := context.Background()
	st := s.newStack(2, stackOptions{})
	count := func() map[string]float64 { return actionCounts(s, st.Config.TemporalNamespace) }
	stopWorker := st.StartWorker()
	s.check(testenv.WaitUntil(ctx, time.Minute, "the windows consume", func() (bool, error) { return st.Consumed(0) }), "start")
	// The BrokerSwitch workflow's first read and watch are part of the start, not of the
	// idle cost: each window's prepare and consume, and the watch (its reads are local
	// activities, markers rather than activity tasks).
	s.check(testenv.WaitUntil(ctx, time.Minute, "the start settles", func() (bool, error) {
		return count()["command_ScheduleActivityTask"] >= float64(2*len(st.Config.Queues)+1), nil
	}), "start: "+byType(count()))
	// Windows restarted since the start; a window ends by its length only after hours.
	windowsEnded := func(before map[string]float64, windows, others int) func() (bool, error) {
		return func() (bool, error) {
			d := diff(count(), before)
			return d["command_ContinueAsNewWorkflowExecution"] >= float64(windows) &&
				d["command_ScheduleActivityTask"] >= float64(2*windows+others), nil
		}
	}
	over := func(d time.Duration) (map[string]float64, time.Duration) {
		before, t0 := count(), time.Now()
		time.Sleep(d)
		return diff(count(), before), time.Since(t0)
	}
	res := actionsResult{SteadyRate: rate, Window: st.Config.ConsumerWindow, Queues: len(st.Config.Queues)}
	res.Idle, res.IdlePeriod = over(actionsPeriod)

	// Steady traffic: events do not travel through Temporal.
	p, next := st.producer(), s.stream()
	stop := atRate(rate, func() error { return p.Publish(ctx, messages(nil, next())...) })
	res.Steady, res.SteadyPeriod = over(actionsPeriod)
	n, err := stop()
	s.check(err, "steady traffic")
	s.check(st.waitApplied(int64(n), time.Minute), "steady traffic applied")

	// One rotation to broker 1, as the producer announces it.
	before := count()
	st.Notify(1, time.Now())
	s.check(testenv.WaitUntil(ctx, time.Minute, "the switch", func() (bool, error) { return st.Switched(1), nil }), "switch")
	s.check(testenv.WaitUntil(ctx, time.Minute, "the windows to consume broker 1", func() (bool, error) { return st.Consumed(1) }), "switch")
	// The committed switch ends every window early, so its cost is complete once each has
	// continued as new and scheduled its next prepare and consume; waiting on the counter
	// itself, since the server's metrics may trail the consumers RabbitMQ already shows.
	// After the commit the idle BrokerSwitch workflow schedules its watch again: one more
	// activity task than the windows'.
	s.check(testenv.WaitUntil(ctx, time.Minute, "the switch's windows counted", windowsEnded(before, len(st.Config.Queues), 1)),
		"switch: "+byType(diff(count(), before)))
	res.Switch = diff(count(), before)

	// A straggler on broker 0, which the switch left: a message an operator moved back from
	// -error there, with its stamps (a message back from -retry is read alike), and one
	// window ends for it.
	applied := st.Applied()
	ev := s.corpus(1)
	before, t0 := count(), time.Now()
	st.publish(0, ev, amqp.Table{broker.HeaderRetryCycles: int64(1), broker.HeaderErrorQueue: ev[0].Queue,
		broker.HeaderErrorAt: time.Now().UTC().Format(time.RFC3339), broker.HeaderErrorReason: "moved back by an operator"})
	s.check(st.waitApplied(applied+1, 2*time.Minute), "the straggler applied")
	res.StragglerLag = time.Since(t0)
	s.check(testenv.WaitUntil(ctx, time.Minute, "the straggler's window counted", windowsEnded(before, 1, 0)), "straggler")
	s.check(testenv.WaitUntil(ctx, time.Minute, "the windows consume broker 1 again", func() (bool, error) { return st.Consumed(1) }), "straggler")
	res.Turnover = diff(count(), before)
	stopWorker()
	return res
}

// actionCounts reads the dev server's `action` counter of a namespace, by action type.
func actionCounts(s *figure, namespace string) map[string]float64 {
	resp, err := http.Get(s.temporal.MetricsURL())
	s.check(err, "read the dev server's action counter")
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	s.check(err, "parse the dev server's metrics")
	out := map[string]float64{}
	for _, m := range families["action"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		// The server's metrics spell a namespace with underscores for dashes.
		if labels["namespace"] == strings.ReplaceAll(namespace, "-", "_") {
			out[labels["action_type"]] += m.GetCounter().GetValue()
		}
	}
	return out
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// byType lists the counts, largest first, as "type n"; "none" when there are none.
func byType(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(strings.TrimPrefix(k, "command_"), "grpc_"), m[k]))
	}
	return strings.Join(parts, ", ")
}

// actionRows adds the Actions figures to the cost table.
func (r *results) actionRows(add func(row)) {
	a := r.Actions
	if a == nil {
		return
	}
	perMonth, steady := a.perMonth(a.Idle, a.IdlePeriod), a.perMonth(a.Steady, a.SteadyPeriod)
	add(row{"Temporal Actions per month, idle, default settings (server's `action` counter)", commas(int64(perMonth)),
		fmt.Sprintf("%.0f over %s (%s), + %.0f per window end and restart (%s) × %d queues × a window per %s, + the idle fallback (%d per %s)",
			total(a.Idle), a.IdlePeriod.Round(time.Second), byType(a.Idle), total(a.Turnover), byType(a.Turnover), a.Queues, a.Window,
			idleFallbackActions, idleFallbackEvery), "", "≤ 10,000", status(perMonth <= 10_000)})
	add(row{fmt.Sprintf("  … with steady traffic (%.0f events/s)", a.SteadyRate), commas(int64(steady)),
		fmt.Sprintf("%.0f over %s: %s", total(a.Steady), a.SteadyPeriod.Round(time.Second), byType(a.Steady)), "", "same order", status(steady <= 2*perMonth)})
	perSwitch := total(a.Switch)
	add(row{"Temporal Actions per completed switch (notification to windows on the new broker)", fmt.Sprintf("%.0f", perSwitch),
		byType(a.Switch), "", "≤ 18", status(perSwitch <= 18)})
	add(row{"Straggler on a spare the producer left: publish to applied", a.StragglerLag.Round(100 * time.Millisecond).String(),
		"one window ends on a passive count (SPARE_CHECK_INTERVAL 15s) and its Leftover Drain takes it", "", "≤ 60s", status(a.StragglerLag <= time.Minute)})
}
