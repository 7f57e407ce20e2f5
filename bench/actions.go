package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// month is the 30 days the Actions figures are extrapolated to.
const month = 30 * 24 * time.Hour

// actionsResult is what brokerswitch costs in Temporal Actions at the default settings
// (5-minute windows, 4 queues, 3 s drain checks), counted by the server itself: the dev
// server's `action` counter is the count Temporal Cloud bills.
type actionsResult struct {
	// Idle is every Action of the namespace, by type, over IdlePeriod: from the moment the
	// four windows consume until each has ended one window and started the next.
	IdlePeriod time.Duration
	Idle       map[string]float64
	// Steady is the Actions over the next window of every queue, SteadyPeriod, while the
	// producer publishes SteadyRate events per second.
	SteadyPeriod time.Duration
	SteadyRate   float64
	Steady       map[string]float64
	// Switch is the Actions of one rotation: from the notification until the counter shows
	// that the switch ended every window and the BrokerSwitch workflow watches again.
	Switch map[string]float64
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// idlePerMonth extrapolates the idle count to 30 days.
func (a actionsResult) idlePerMonth() float64 {
	return total(a.Idle) * float64(month) / float64(a.IdlePeriod)
}

// steadyPerMonth extrapolates the steady-traffic count to 30 days.
func (a actionsResult) steadyPerMonth() float64 {
	return total(a.Steady) * float64(month) / float64(a.SteadyPeriod)
}

// runActions measures the Actions of one deployment with two brokers and the defaults.
func runActions(s *scope, rate float64) actionsResult {
	ctx := context.Background()
	st := newStack(s, 2, stackOptions{})
	count := func() map[string]float64 {
		m, err := actionCounts(ctx, temporalServer.MetricsURL(), st.ns)
		s.check(err, "read the dev server's action counter")
		return m
	}
	consuming := func(broker int) func() (bool, error) {
		return func() (bool, error) {
			fp, err := rabbitFootprint(st.vhosts)
			return err == nil && fp.Consumers[broker] == len(st.cfg.Queues), err
		}
	}
	st.startWorker()
	s.check(waitUntil(ctx, time.Minute, "the windows consume", consuming(0)), "start")
	// The BrokerSwitch workflow's first read and watch are part of the start, not of the
	// idle cost: each window's prepare and consume, and the watch (its reads are local
	// activities, markers rather than activity tasks).
	s.check(waitUntil(ctx, time.Minute, "the start settles", func() (bool, error) {
		return count()["command_ScheduleActivityTask"] >= float64(2*len(st.cfg.Queues)+1), nil
	}), "start: "+byType(count()))

	// Every window has ended once since before when each has continued as new and
	// scheduled its next window's prepare and consume, beside others activity tasks.
	windowsEnded := func(before map[string]float64, others int) func() (bool, error) {
		return func() (bool, error) {
			d := diff(count(), before)
			return d["command_ContinueAsNewWorkflowExecution"] >= float64(len(st.cfg.Queues)) &&
				d["command_ScheduleActivityTask"] >= float64(2*len(st.cfg.Queues)+others), nil
		}
	}
	// A measured period holds one whole window of every queue: each continues as new
	// once and starts its next window (prepare, consume), which then consumes.
	oneWindow := func(what string) (map[string]float64, time.Duration) {
		before, t0 := count(), time.Now()
		s.check(waitUntil(ctx, st.cfg.ConsumerWindow+2*time.Minute, "every window to end once", windowsEnded(before, 0)), what)
		s.check(waitUntil(ctx, time.Minute, "the next windows consume", consuming(0)), what)
		return diff(count(), before), time.Since(t0)
	}
	res := actionsResult{SteadyRate: rate}
	res.Idle, res.IdlePeriod = oneWindow("idle")

	// Steady traffic over the next window: events do not travel through Temporal.
	p := st.producer()
	stop, published := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		events := corpus(int(rate * (st.cfg.ConsumerWindow + 2*time.Minute).Seconds()))
		for ; n < len(events); n++ {
			select {
			case <-stop:
				published <- n
				return
			case <-tick.C:
			}
			if p.Publish(ctx, messages(nil, events[n])...) != nil {
				break
			}
		}
		published <- n
	}()
	res.Steady, res.SteadyPeriod = oneWindow("steady traffic")
	close(stop)
	n := <-published
	s.check(st.waitApplied(ctx, int64(n), time.Minute), "steady traffic applied")

	// One rotation to broker 1, as the producer announces it.
	before := count()
	s.check(st.notify(1, time.Now()), "notify")
	s.check(waitUntil(ctx, time.Minute, "the switch", func() (bool, error) { return st.switched(ctx, 1) }), "switch")
	s.check(waitUntil(ctx, time.Minute, "the windows to consume broker 1", consuming(1)), "switch")
	// The committed switch ends every window early, so its cost is complete once each has
	// continued as new and scheduled its next prepare and consume; waiting on the counter
	// itself, since the server's metrics may trail the consumers RabbitMQ already shows.
	// After the commit the idle BrokerSwitch workflow schedules its watch again: one more
	// activity task than the windows'.
	s.check(waitUntil(ctx, time.Minute, "the switch's windows counted", windowsEnded(before, 1)),
		"switch: "+byType(diff(count(), before)))
	res.Switch = diff(count(), before)
	return res
}

// actionCounts reads the dev server's `action` counter of a namespace, by action type.
func actionCounts(ctx context.Context, url, namespace string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
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
	return out, nil
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

// byType lists the counts, largest first, as "type n".
func byType(m map[string]float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(strings.TrimPrefix(k, "command_"), "grpc_"), m[k]))
	}
	return strings.Join(parts, ", ")
}

// actionRows adds the Actions figures to the cost table.
func (r *results) actionRows(add func(row), rep *report) {
	a := r.Actions
	if a == nil {
		return
	}
	perMonth := a.idlePerMonth()
	ok := perMonth <= 500_000
	add(row{"Temporal Actions per month, idle, default settings (server's `action` counter)", commas(int64(perMonth)),
		fmt.Sprintf("%.0f over %s: %s", total(a.Idle), a.IdlePeriod.Round(time.Second), byType(a.Idle)), "", "≤ 500,000", status(ok)})
	add(row{fmt.Sprintf("  … with steady traffic (%.0f events/s)", a.SteadyRate), commas(int64(a.steadyPerMonth())),
		fmt.Sprintf("%.0f over %s: %s", total(a.Steady), a.SteadyPeriod.Round(time.Second), byType(a.Steady)), "", "", ""})
	add(row{"Temporal Actions per completed switch (notification to windows on the new broker)", fmt.Sprintf("%.0f", total(a.Switch)),
		byType(a.Switch), "", "", ""})
	rep.targets = append(rep.targets, fmt.Sprintf("At most 500,000 Temporal Actions a month when idle at the default settings: %s (%s, counted by the server over %s and extrapolated to 30 days).",
		status(ok), commas(int64(perMonth)), a.IdlePeriod.Round(time.Second)))
}
