package dashboard

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

const root = ".."

// jsonPanel is what the checks read of a panel in the dashboard JSON.
type jsonPanel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Targets     []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Thresholds *struct {
				Steps []struct {
					Value *float64 `json:"value"`
					Color string   `json:"color"`
				} `json:"steps"`
			} `json:"thresholds"`
			Custom struct {
				ThresholdsStyle *struct {
					Mode string `json:"mode"`
				} `json:"thresholdsStyle"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Panels []jsonPanel `json:"panels"` // a collapsed row's
}

// panelsOf lists the dashboard's panels, those of collapsed rows included, rows left out.
func panelsOf(t *testing.T, js []byte) []jsonPanel {
	t.Helper()
	var d struct {
		Panels []jsonPanel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(js, &d))
	var out []jsonPanel
	for _, p := range d.Panels {
		if p.Type == "row" {
			out = append(out, p.Panels...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// grafanaVars stand in for the variables Grafana replaces before a query reaches Prometheus.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "30s", "$__range", "3h")

func parse(expr string) (parser.Expr, error) {
	return parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
}

// metricNames are the metric names an expression selects.
func metricNames(e parser.Expr) []string {
	var names []string
	for _, sel := range parser.ExtractSelectors(e) {
		for _, m := range sel {
			if m.Name == model.MetricNameLabel {
				names = append(names, m.Value)
			}
		}
	}
	return names
}

// queryProblems parses every panel's PromQL with Prometheus' parser and names what is
// wrong: a query that does not parse, or a metric that served does not hold.
func queryProblems(t *testing.T, js []byte, served map[string]bool) []string {
	t.Helper()
	var problems []string
	for _, p := range panelsOf(t, js) {
		if len(p.Targets) == 0 {
			problems = append(problems, fmt.Sprintf("%q has no query", p.Title))
		}
		for _, tg := range p.Targets {
			e, err := parse(tg.Expr)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%q: %q does not parse: %v", p.Title, tg.Expr, err))
				continue
			}
			names := metricNames(e)
			if len(names) == 0 {
				problems = append(problems, fmt.Sprintf("%q: %q names no metric", p.Title, tg.Expr))
			}
			for _, n := range names {
				if !served[n] {
					problems = append(problems, fmt.Sprintf("%q: %s is not served by brokerswitch", p.Title, n))
				}
			}
		}
	}
	return problems
}

func generated(t *testing.T) []byte {
	t.Helper()
	js, err := JSON()
	require.NoError(t, err)
	return js
}

func TestEveryQueryParsesAndNamesServedMetrics(t *testing.T) {
	t.Parallel()
	js := generated(t)
	require.GreaterOrEqual(t, len(panelsOf(t, js)), 25)
	require.Empty(t, queryProblems(t, js, servedNames(t)))
}

// The check is not vacuous: a panel naming a metric the service does not serve, or a query
// Prometheus cannot parse, fails it.
func TestTheCheckCatchesAMetricThatDoesNotExist(t *testing.T) {
	t.Parallel()
	var d map[string]any
	require.NoError(t, json.Unmarshal(generated(t), &d))
	d["panels"] = append(d["panels"].([]any),
		map[string]any{"type": "timeseries", "title": "typo", "targets": []any{
			map[string]any{"expr": `sum(rate(brokerswitch_event_total[$__rate_interval]))`}}},
		map[string]any{"type": "timeseries", "title": "broken", "targets": []any{
			map[string]any{"expr": `sum(rate(brokerswitch_events_total[5m])`}}},
	)
	js, err := json.Marshal(d)
	require.NoError(t, err)
	problems := queryProblems(t, js, servedNames(t))
	require.Len(t, problems, 2, "%q", problems)
	require.Contains(t, problems[0], `"typo": brokerswitch_event_total is not served`)
	require.Contains(t, problems[1], `"broken"`)
	require.Contains(t, problems[1], "does not parse")
}

// alertRule is one rule of docs/alerts.yml.
type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "alerts.yml"))
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// threshold is the number an alert compares its series with: the right side of its first
// comparison (on the left of and/unless/or), constant, or a constant added to a series
// ("x > max(y) + 3600": the panel then draws x - max(y) against 3600).
func threshold(t *testing.T, alert string, e parser.Expr) float64 {
	t.Helper()
	switch e := e.(type) {
	case *parser.ParenExpr:
		return threshold(t, alert, e.Expr)
	case *parser.BinaryExpr:
		if e.Op.IsSetOperator() {
			return threshold(t, alert, e.LHS)
		}
		if e.Op.IsComparisonOperator() {
			if v, ok := constantOf(e.RHS); ok {
				return v
			}
			if b, ok := e.RHS.(*parser.BinaryExpr); ok && b.Op == parser.ADD {
				if v, ok := constantOf(b.RHS); ok {
					return v
				}
			}
		}
	}
	t.Fatalf("%s: no constant threshold in %s", alert, e)
	return 0
}

// constantOf evaluates number literals and arithmetic on them.
func constantOf(e parser.Expr) (float64, bool) {
	switch e := e.(type) {
	case *parser.NumberLiteral:
		return e.Val, true
	case *parser.ParenExpr:
		return constantOf(e.Expr)
	case *parser.BinaryExpr:
		l, ok1 := constantOf(e.LHS)
		r, ok2 := constantOf(e.RHS)
		if !ok1 || !ok2 {
			return 0, false
		}
		switch e.Op {
		case parser.ADD:
			return l + r, true
		case parser.SUB:
			return l - r, true
		case parser.MUL:
			return l * r, true
		case parser.DIV:
			return l / r, true
		}
	}
	return 0, false
}

// selectorsOf are an expression's vector selectors, each as its sorted matchers.
func selectorsOf(e parser.Expr) []string {
	var out []string
	for _, sel := range parser.ExtractSelectors(e) {
		ms := make([]string, 0, len(sel))
		for _, m := range sel {
			ms = append(ms, m.String())
		}
		slices.Sort(ms)
		out = append(out, strings.Join(ms, ","))
	}
	return out
}

var alertName = regexp.MustCompile(`\bBrokerswitch[A-Z]\w+`)

// Every alert has a panel that names it, selects every series its expression selects
// (same metric, same label matchers), and draws its threshold.
func TestEveryAlertHasAPanelWithItsThreshold(t *testing.T) {
	t.Parallel()
	byAlert := map[string][]jsonPanel{}
	for _, p := range panelsOf(t, generated(t)) {
		for _, a := range alertName.FindAllString(p.Description, -1) {
			byAlert[a] = append(byAlert[a], p)
		}
	}
	rules := alertRules(t)
	known := map[string]bool{}
	for _, r := range rules {
		known[r.Alert] = true
		e, err := parse(r.Expr)
		require.NoError(t, err, r.Alert)
		want := threshold(t, r.Alert, e)
		panels := byAlert[r.Alert]
		require.Len(t, panels, 1, "%s: one panel names it in its description", r.Alert)
		p := panels[0]

		var shown []string
		for _, tg := range p.Targets {
			pe, err := parse(tg.Expr)
			require.NoError(t, err, p.Title)
			shown = append(shown, selectorsOf(pe)...)
		}
		for _, sel := range selectorsOf(e) {
			require.Contains(t, shown, sel, "%s: panel %q does not select {%s}", r.Alert, p.Title, sel)
		}

		th := p.FieldConfig.Defaults.Thresholds
		require.NotNil(t, th, "%s: panel %q has no thresholds", r.Alert, p.Title)
		drawn := slices.ContainsFunc(th.Steps, func(s struct {
			Value *float64 `json:"value"`
			Color string   `json:"color"`
		}) bool {
			return s.Value != nil && math.Abs(*s.Value-want) < 1e-9 && s.Color == "red"
		})
		require.True(t, drawn, "%s: panel %q has no red step at %v", r.Alert, p.Title, want)
		if p.Type == "timeseries" {
			st := p.FieldConfig.Defaults.Custom.ThresholdsStyle
			require.True(t, st != nil && st.Mode != "off", "%s: panel %q does not draw its thresholds", r.Alert, p.Title)
		}
	}
	for a := range byAlert {
		require.True(t, known[a], "a panel names %s, which docs/alerts.yml does not have", a)
	}
}

// Each panel's description names its runbook entry, a heading of docs/operations.md.
func TestEveryPanelNamesItsRunbookEntry(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	require.NoError(t, err)
	headings := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			headings[strings.TrimSpace(strings.TrimLeft(h, "#"))] = true
		}
	}
	entry := regexp.MustCompile(`Runbook: docs/operations\.md, "((?:[^"\\]|\\.)*)"\.$`)
	for _, p := range panelsOf(t, generated(t)) {
		require.NotEmpty(t, p.Title)
		m := entry.FindStringSubmatch(p.Description)
		require.NotNil(t, m, "%q: the description ends with its runbook entry", p.Title)
		require.True(t, headings[m[1]], "%q: docs/operations.md has no heading %q", p.Title, m[1])
	}
}

// The checked-in files are what `make dashboard` generates.
func TestCheckedInFilesAreGenerated(t *testing.T) {
	t.Parallel()
	files, err := Files()
	require.NoError(t, err)
	require.Len(t, files, 2)
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(root, path))
		require.NoError(t, err, "run `make dashboard`")
		require.Equal(t, string(want), string(got), "%s is stale: run `make dashboard`", path)
	}
}
