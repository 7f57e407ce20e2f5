package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// chart is one of the report's bar charts, drawn by whatever shows the markdown (GitHub
// renders mermaid's xychart-beta): each bar is a figure of the table, Hi a second bar
// behind it (the p95 behind a median), Target a line across all bars (0: none).
type chart struct {
	Title, Unit string
	Labels      []string
	Values, Hi  []float64
	Target      float64
}

func (c *chart) add(label string, value float64) {
	c.Labels = append(c.Labels, label)
	c.Values = append(c.Values, value)
}

// mermaid is the chart as a fenced mermaid block.
func (c chart) mermaid() string {
	quoted := make([]string, len(c.Labels))
	for i, l := range c.Labels {
		quoted[i] = `"` + strings.ReplaceAll(l, `"`, "'") + `"`
	}
	var b strings.Builder
	fmt.Fprintf(&b, "```mermaid\nxychart-beta horizontal\n  title \"%s\"\n  x-axis [%s]\n  y-axis \"%s\"\n",
		c.Title, strings.Join(quoted, ", "), c.Unit)
	if len(c.Hi) == len(c.Values) {
		fmt.Fprintf(&b, "  bar [%s]\n", numbers(c.Hi))
	}
	fmt.Fprintf(&b, "  bar [%s]\n", numbers(c.Values))
	if c.Target > 0 {
		line := make([]float64, len(c.Values))
		for i := range line {
			line[i] = c.Target
		}
		fmt.Fprintf(&b, "  line [%s]\n", numbers(line))
	}
	b.WriteString("```\n")
	return b.String()
}

// numbers lists xs to two decimals at most, as mermaid reads them.
func numbers(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64)
	}
	return strings.Join(parts, ", ")
}

// charts are the report's charts: throughput on loopback, throughput with the injected
// round trip time, and switch lag.
func (r *results) charts() []chart {
	tp := chart{Title: "Throughput on loopback, median (line: target 3x B)", Unit: "msg/s"}
	if len(r.A1) > 0 {
		tp.add("A: bare consumer, prefetch 1", median(rates(r.A1)))
	}
	if len(r.A100) > 0 {
		tp.add("A: bare consumer, prefetch 100", median(rates(r.A100)))
	}
	if len(r.B) > 0 {
		tp.add("B: old design, 1 tx per message", median(rates(r.B)))
		tp.Target = 3 * median(rates(r.B))
	}
	if len(r.Product) > 0 {
		tp.add("brokerswitch end to end", median(rates(r.Product)))
	}
	if c := r.CatchUp; c != nil {
		tp.add(fmt.Sprintf("catch-up of %dk (process)", c.Backlog/1000), float64(c.Backlog+c.OnNew)/c.Done.Seconds())
	}
	if len(r.Drain) > 0 {
		raw, ing := r.drainRates()
		tp.add("Leftover Drain, ack only", median(raw))
		tp.add("Leftover Drain + ingest", median(ing))
	}
	var out []chart
	if len(tp.Values) > 0 {
		out = append(out, tp)
	}
	if len(r.BRTT) > 0 && len(r.ProductRTT) > 0 {
		rtt := chart{Title: fmt.Sprintf("Throughput with %s RTT to RabbitMQ and Postgres, median (line: target 10x B)", r.Settings.RTT), Unit: "msg/s"}
		rtt.add("B: old design, 1 tx per message", median(rates(r.BRTT)))
		rtt.add("brokerswitch end to end", median(rates(r.ProductRTT)))
		rtt.Target = 10 * median(rates(r.BRTT))
		out = append(out, rtt)
	}
	lag := chart{Title: "Switch lag, old broker's last applied to new broker's first applied (median, p95 behind; line: target p95 2 s)", Unit: "s", Target: 2}
	for _, name := range r.LagOrder {
		lags, _ := lagSeconds(r.rotations(name))
		lag.add(name, median(lags))
		lag.Hi = append(lag.Hi, percentile(lags, 95))
	}
	if len(lag.Values) > 0 {
		out = append(out, lag)
	}
	return out
}
