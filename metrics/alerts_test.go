package metrics

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

// The suggested alert rules (docs/alerts.yml) name only metrics this package exports.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "docs", "alerts.yml"))
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &rules))

	exported := exportedNames(t)
	name := regexp.MustCompile(`brokerswitch_[a-z_]+`)
	count := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			count++
			require.NotEmpty(t, r.Alert)
			require.NotEmpty(t, r.Labels["severity"], r.Alert)
			for _, n := range name.FindAllString(r.Expr, -1) {
				require.True(t, exported[n], "%s uses %s, which is not exported", r.Alert, n)
			}
		}
	}
	require.GreaterOrEqual(t, count, 8)
}

// exportedNames are the series names the service exports, histogram suffixes included.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := New(reg)
	require.NoError(t, m.WatchState(func(context.Context) (StateReading, error) {
		return StateReading{PendingSince: time.Now(), PendingHops: 1,
			LastCheck: &DrainCheckReading{Counts: map[string]int{"q": 1}, At: time.Now()}, Consuming: map[string]int{"q": 1}}, nil
	}))
	m.Event("q", "e", OutcomeApplied)
	m.Routed("q", RouteError)
	m.Unreadable("q", UnreadableMoved)
	m.Oversize("q", OversizeMoved)
	m.LeftoverDrained("q", 1, 1)
	m.LeftoverUnreachable("q", 1)
	m.LeftoverFailed("q", 1)
	m.UnannouncedHeld("q", 1)
	m.UnannouncedRead("q", 1, 1)
	m.DrainCheck(0, DrainDrained)
	m.SwitchCommitted(time.Second, time.Second)
	m.Window("q", WindowElapsed, time.Second)
	m.Reconnected(0)
	m.DialFailed(0)
	m.ConnectionLost(0)
	m.Blocked(0, true)
	m.QuorumQueueRisk(0, "q", "delivery_limit", true)
	m.DeliveryLimited("q")
	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		n := f.GetName()
		names[n] = true
		if strings.HasSuffix(f.GetType().String(), "HISTOGRAM") {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
	}
	return names
}

// Every alert of docs/alerts.yml has a promtool unit test in docs/alerts_test.yml that
// fires it, and one that holds it back: a test where it must not fire, or a series beside
// the firing one that the exact expected set leaves out. promtool runs them (make test);
// this test keeps an alert from being added without them. Names follow one spelling.
func TestEveryAlertHasPromtoolTests(t *testing.T) {
	t.Parallel()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "alerts.yml", &rules)
	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []struct {
					ExpLabels map[string]string `yaml:"exp_labels"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "alerts_test.yml", &tests)
	require.Equal(t, []string{"alerts.yml"}, tests.RuleFiles)

	fires, holds := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
			if len(a.ExpAlerts) < len(tc.InputSeries) {
				holds[a.Alertname] = true
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.Regexp(t, `^Brokerswitch[A-Z]`, r.Alert, "one spelling of the prefix")
			require.True(t, fires[r.Alert], "%s: no test fires it", r.Alert)
			require.True(t, holds[r.Alert], "%s: no test holds it back", r.Alert)
		}
	}
}

func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", name))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, v))
}
