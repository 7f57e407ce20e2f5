package deploy

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

// prometheusConfig is what deploy/prometheus/prometheus.yml may set; a key outside it
// fails the strict decode.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName      string `yaml:"job_name"`
		DNSSDConfigs []struct {
			Names           []string `yaml:"names"`
			Type            string   `yaml:"type"`
			Port            int      `yaml:"port"`
			RefreshInterval string   `yaml:"refresh_interval"`
		} `yaml:"dns_sd_configs"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func decodeYAMLStrict(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(into), path)
}

// mounts are a service's bind mounts, container path -> host path relative to the root.
func mounts(t *testing.T, s types.ServiceConfig) map[string]string {
	t.Helper()
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	out := map[string]string{}
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		rel, err := filepath.Rel(abs, v.Source)
		require.NoError(t, err)
		_, err = os.Stat(v.Source)
		require.NoError(t, err, "%s mounts %s, which is not in the repository", s.Name, rel)
		require.True(t, v.ReadOnly, "%s mounts %s read-only", s.Name, rel)
		out[v.Target] = filepath.ToSlash(rel)
	}
	return out
}

// Prometheus and Grafana are off by default and come with `--profile monitoring`, from
// images pinned to a release.
func TestMonitoringIsAnOptInProfile(t *testing.T) {
	p := loadProject(t)
	require.NotContains(t, p.ServiceNames(), "prometheus")
	require.NotContains(t, p.ServiceNames(), "grafana")

	m := loadMonitoring(t)
	pinned := regexp.MustCompile(`^[a-z0-9./-]+:v?[0-9]+\.[0-9]+\.[0-9]+$`)
	for _, name := range []string{"prometheus", "grafana"} {
		s, ok := m.Services[name]
		require.True(t, ok, "%s is in the monitoring profile", name)
		require.Equal(t, []string{monitoring}, s.Profiles, name)
		require.Regexp(t, pinned, s.Image, "%s: the image is pinned to a release", name)
		require.NotNil(t, s.HealthCheck, name)
	}
	for _, name := range p.ServiceNames() {
		require.Empty(t, m.Services[name].Profiles, "%s runs without a profile", name)
	}
}

// Prometheus scrapes every brokerswitch process that stays up, every worker replica
// included, on the port its METRICS_ADDR sets, under the job names the alert rules and the
// dashboard select, and evaluates docs/alerts.yml.
func TestPrometheusScrapesEveryProcess(t *testing.T) {
	p := loadMonitoring(t)
	prom := p.Services["prometheus"]
	mnt := mounts(t, prom)
	var configPath string
	for _, arg := range prom.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configPath = v
		}
	}
	require.Equal(t, "deploy/prometheus/prometheus.yml", mnt[configPath], "Prometheus reads the checked-in configuration")
	var cfg prometheusConfig
	decodeYAMLStrict(t, filepath.Join(root, "deploy", "prometheus", "prometheus.yml"), &cfg)
	require.Len(t, cfg.RuleFiles, 1)
	require.Equal(t, "docs/alerts.yml", mnt[cfg.RuleFiles[0]], "the rules are docs/alerts.yml")

	targets := map[string][]string{} // job -> service:port
	for _, sc := range cfg.ScrapeConfigs {
		for _, dns := range sc.DNSSDConfigs {
			require.Equal(t, "A", dns.Type, "every replica's address")
			for _, n := range dns.Names {
				targets[sc.JobName] = append(targets[sc.JobName], n+":"+strconv.Itoa(dns.Port))
			}
		}
		for _, st := range sc.StaticConfigs {
			targets[sc.JobName] = append(targets[sc.JobName], st.Targets...)
		}
	}
	want := map[string][]string{}
	for _, name := range appServices {
		s := p.Services[name]
		if slices.Equal([]string(s.Command), []string{"migrate"}) {
			continue // a one-shot job serves no metrics for long
		}
		_, port, err := net.SplitHostPort(*s.Environment["METRICS_ADDR"])
		require.NoError(t, err)
		want["brokerswitch-"+name] = []string{name + ":" + port}
	}
	require.Equal(t, want, targets)
	require.Contains(t, targets, workerJob(t), "the job BrokerswitchWorkerDown selects")
}

// Grafana starts with Prometheus as its default data source and the checked-in dashboard.
func TestGrafanaIsProvisionedWithTheDashboard(t *testing.T) {
	p := loadMonitoring(t)
	g := p.Services["grafana"]
	mnt := mounts(t, g)
	require.Equal(t, "deploy/grafana/provisioning", mnt["/etc/grafana/provisioning"])
	var dashboardTarget string
	for target, src := range mnt {
		if src == "deploy/grafana/brokerswitch.json" {
			dashboardTarget = target
		}
	}
	require.NotEmpty(t, dashboardTarget, "the dashboard is mounted")

	var providers struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name            string            `yaml:"name"`
			Type            string            `yaml:"type"`
			DisableDeletion bool              `yaml:"disableDeletion"`
			AllowUIUpdates  bool              `yaml:"allowUiUpdates"`
			Options         map[string]string `yaml:"options"`
		} `yaml:"providers"`
	}
	decodeYAMLStrict(t, filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "brokerswitch.yaml"), &providers)
	require.Len(t, providers.Providers, 1)
	require.Equal(t, "file", providers.Providers[0].Type)
	require.Equal(t, filepath.Dir(dashboardTarget), providers.Providers[0].Options["path"], "the provider reads the mounted dashboard")

	var sources struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name      string `yaml:"name"`
			UID       string `yaml:"uid"`
			Type      string `yaml:"type"`
			Access    string `yaml:"access"`
			URL       string `yaml:"url"`
			IsDefault bool   `yaml:"isDefault"`
			Editable  bool   `yaml:"editable"`
		} `yaml:"datasources"`
	}
	decodeYAMLStrict(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yaml"), &sources)
	require.Len(t, sources.Datasources, 1)
	ds := sources.Datasources[0]
	require.Equal(t, "prometheus", ds.Type)
	require.True(t, ds.IsDefault, "the dashboard's data source variable takes the default")
	require.Equal(t, "proxy", ds.Access, "Grafana's server reaches Prometheus, not the browser")
	require.Equal(t, "http://prometheus:9090", ds.URL, "the prometheus service on its container port")
	require.Equal(t, uint32(9090), p.Services["prometheus"].Ports[0].Target)
	require.Contains(t, g.DependsOn, "prometheus")
}
