// Package deploy checks the deployment files at the repository root: docker-compose.yml,
// loaded with compose-go (the loader Docker Compose itself uses), and the Dockerfile.
// No Docker is needed.
package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/config"
)

const root = ".."

// appServices run the brokerswitch image.
var appServices = []string{"migrate", "worker", "api"}

// loadProject loads the file with the development profile (compose.dev.env), then env.
func loadProject(t *testing.T, env ...string) *types.Project {
	t.Helper()
	p, err := tryLoadProject(t, append(devProfile(t), env...)...)
	require.NoError(t, err, "docker compose would refuse the file")
	return p
}

func tryLoadProject(t *testing.T, env ...string) (*types.Project, error) {
	t.Helper()
	return tryLoadProfiles(t, nil, env...)
}

// monitoring is the Compose profile that adds Prometheus and Grafana.
const monitoring = "monitoring"

// loadMonitoring loads the file as loadProject does, with the monitoring profile on.
func loadMonitoring(t *testing.T) *types.Project {
	t.Helper()
	p, err := tryLoadProfiles(t, []string{monitoring}, devProfile(t)...)
	require.NoError(t, err, "docker compose --profile monitoring would refuse the file")
	return p
}

func tryLoadProfiles(t *testing.T, profiles []string, env ...string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithEnv(env), // not the test's own environment: the file's defaults are checked
		cli.WithName("brokerswitch"),
		cli.WithProfiles(profiles),
	)
	require.NoError(t, err)
	return opts.LoadProject(t.Context())
}

// devProfile is compose.dev.env as KEY=VALUE lines, as --env-file passes it.
func devProfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "compose.dev.env"))
	require.NoError(t, err)
	var env []string
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	return env
}

func TestComposeBringsUpTheWholeStack(t *testing.T) {
	p := loadProject(t)
	require.ElementsMatch(t,
		[]string{"postgres", "rabbitmq-a", "rabbitmq-b", "temporal", "migrate", "worker", "api"},
		p.ServiceNames())

	pinned := regexp.MustCompile(`^[a-z0-9./-]+:[0-9][0-9A-Za-z.-]*(@sha256:[0-9a-f]{64})?$`)
	for name, s := range p.Services {
		if slices.Contains(appServices, name) {
			require.NotNil(t, s.Build, "%s is built from the Dockerfile", name)
			require.Equal(t, "Dockerfile", s.Build.Dockerfile, name)
			abs, err := filepath.Abs(root)
			require.NoError(t, err)
			require.Equal(t, abs, s.Build.Context, name)
			continue
		}
		require.Regexp(t, pinned, s.Image, "%s: the image tag is pinned to a version", name)
	}
	for _, name := range appServices {
		args := p.Services[name].Build.Args
		require.Contains(t, args, "VERSION", "%s: the image is stamped with its version", name)
		require.Contains(t, args, "REVISION", "%s: the image is stamped with its commit", name)
	}
	require.Equal(t, types.ShellCommand{"migrate"}, p.Services["migrate"].Command)
	require.Equal(t, types.ShellCommand{"worker"}, p.Services["worker"].Command)
	require.Equal(t, types.ShellCommand{"api"}, p.Services["api"].Command)
}

// Every long-running service has a health check, and each service starts only once what it
// needs is healthy; the app waits for the migration to have completed.
func TestServicesWaitForHealthyDependencies(t *testing.T) {
	p := loadProject(t)
	for name, s := range p.Services {
		if name == "migrate" {
			require.Nil(t, s.HealthCheck, "a one-shot job is gated by its exit code")
			continue
		}
		require.NotNil(t, s.HealthCheck, "%s has a health check", name)
		require.False(t, s.HealthCheck.Disable, name)
		require.NotEmpty(t, s.HealthCheck.Test, name)
	}

	healthy, completed := types.ServiceConditionHealthy, types.ServiceConditionCompletedSuccessfully
	want := map[string]map[string]string{
		"postgres":   {},
		"rabbitmq-a": {},
		"rabbitmq-b": {},
		"temporal":   {},
		"migrate":    {"postgres": healthy},
		"worker": {"migrate": completed, "postgres": healthy, "rabbitmq-a": healthy, "rabbitmq-b": healthy,
			"temporal": healthy},
		"api": {"migrate": completed, "postgres": healthy, "temporal": healthy},
	}
	for name, deps := range want {
		got := map[string]string{}
		for dep, cfg := range p.Services[name].DependsOn {
			got[dep] = cfg.Condition
		}
		require.Equal(t, deps, got, "%s depends_on", name)
	}
	// The probes hit what the binary serves: /readyz on HTTP_ADDR and on METRICS_ADDR.
	require.Contains(t, strings.Join(p.Services["api"].HealthCheck.Test, " "), "127.0.0.1:8080/readyz")
	require.Contains(t, strings.Join(p.Services["worker"].HealthCheck.Test, " "), "127.0.0.1:9090/readyz")
}

// Temporal runs from an image that is still published: the CLI's dev server, reachable
// from the other containers, with its Web UI; temporalio/auto-setup is deprecated.
func TestTemporalIsTheCLIDevServer(t *testing.T) {
	p := loadProject(t)
	s := p.Services["temporal"]
	require.True(t, strings.HasPrefix(s.Image, "temporalio/temporal:"), s.Image)
	require.Equal(t, []string{"server", "start-dev", "--ip", "0.0.0.0"}, []string(s.Command[:4]))
	require.Equal(t, []string{"7233", "8233"}, publishedPorts(s))
	for name, svc := range p.Services {
		require.NotContains(t, svc.Image, "auto-setup", name)
	}
}

// The worker's /metrics is reachable from the host, on the loopback interface, so the
// rotation example in docs/deployment.md can read brokerswitch_switches_total, which only the worker
// counts; a port range lets scaled replicas each have one.
func TestWorkerMetricsArePublishedOnLoopback(t *testing.T) {
	p := loadProject(t)
	ports := p.Services["worker"].Ports
	require.Len(t, ports, 1)
	require.Equal(t, uint32(9090), ports[0].Target, "METRICS_ADDR is :9090")
	require.Equal(t, "127.0.0.1", ports[0].HostIP)
	require.True(t, strings.HasPrefix(ports[0].Published, "9090"), ports[0].Published)
	require.Equal(t, ":9090", *p.Services["worker"].Environment["METRICS_ADDR"])
}

// The API's /metrics is on METRICS_ADDR, published on loopback apart from the API's port.
func TestAPIMetricsArePublishedApartFromTheAPI(t *testing.T) {
	p := loadProject(t)
	api := p.Services["api"]
	targets := map[uint32]string{}
	for _, port := range api.Ports {
		require.Equal(t, "127.0.0.1", port.HostIP)
		targets[port.Target] = port.Published
	}
	require.Equal(t, map[uint32]string{8080: "8080", 9090: "9100"}, targets)
	require.Equal(t, ":9090", *api.Environment["METRICS_ADDR"])
}

// Postgres and RabbitMQ run supported, patched releases, pinned by digest:
// postgres:16.4 lacks the fixes of CVE-2024-10976..10979 and CVE-2025-1094
// (16.7 has them), and RabbitMQ 3.13 is out of community support.
func TestComposeImagesAreSupportedAndPinnedByDigest(t *testing.T) {
	p := loadProject(t)
	image := regexp.MustCompile(`^([a-z0-9./-]+):([0-9]+)\.([0-9]+)[0-9A-Za-z.-]*@sha256:[0-9a-f]{64}$`)
	for name, floor := range map[string][2]int{"postgres": {16, 7}, "rabbitmq-a": {4, 0}, "rabbitmq-b": {4, 0}} {
		m := image.FindStringSubmatch(p.Services[name].Image)
		require.NotNil(t, m, "%s: %s is pinned by digest", name, p.Services[name].Image)
		major, _ := strconv.Atoi(m[2])
		minor, _ := strconv.Atoi(m[3])
		require.True(t, major > floor[0] || (major == floor[0] && minor >= floor[1]),
			"%s: %s is older than %d.%d", name, p.Services[name].Image, floor[0], floor[1])
	}
}

func publishedPorts(s types.ServiceConfig) []string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, p.Published)
	}
	return out
}

// configVariables are the variables config.FromEnv reads, recorded by asking it.
func configVariables(t *testing.T) map[string]bool {
	t.Helper()
	read := map[string]bool{}
	_, _ = config.FromEnv(func(name string) string { read[name] = true; return "" })
	require.Contains(t, read, "RABBITMQ_CONNECTION_STRINGS", "the recording works")
	return read
}

// makeDevVariables are the variables scripts/dev.sh exports to `brokerswitch serve`.
func makeDevVariables(t *testing.T) []string {
	t.Helper()
	script, err := os.ReadFile(filepath.Join(root, "scripts", "dev.sh"))
	require.NoError(t, err)
	for line := range strings.Lines(string(script)) {
		if rest, ok := strings.CutPrefix(line, "export "); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatal("scripts/dev.sh exports nothing")
	return nil
}

// The app's environment names only variables the config package reads, covers what
// `make dev` sets, and is accepted by config as it stands.
func TestAppEnvironmentMatchesConfigAndMakeDev(t *testing.T) {
	p := loadProject(t)
	known := configVariables(t)
	devVars := makeDevVariables(t)
	for _, name := range appServices {
		env := p.Services[name].Environment
		for k := range env {
			require.True(t, known[k], "%s: %s is not a variable the config package reads", name, k)
		}
		for _, k := range devVars {
			require.Contains(t, env, k, "%s: make dev sets %s", name, k)
		}

		cfg, err := config.FromEnv(func(k string) string {
			if v := env[k]; v != nil {
				return *v
			}
			return ""
		})
		require.NoError(t, err, name)
		require.NoError(t, cfg.ValidateAPIAuth(), name)
		require.Len(t, cfg.Brokers, 2, "two brokers, as make dev")
		require.Equal(t, "bs-dev-a", cfg.Brokers[0].Vhost)
		require.Equal(t, "bs-dev-b", cfg.Brokers[1].Vhost)
		require.Equal(t, "dev-operator-token", cfg.OperatorToken)
		require.Equal(t, "dev-producer-token", cfg.ProducerToken)
		require.Equal(t, "temporal:7233", cfg.TemporalAddress)
		require.Equal(t, ":9090", cfg.MetricsAddr)
	}

	// The brokers' vhosts are the ones the app is configured with.
	require.Equal(t, "bs-dev-a", *p.Services["rabbitmq-a"].Environment["RABBITMQ_DEFAULT_VHOST"])
	require.Equal(t, "bs-dev-b", *p.Services["rabbitmq-b"].Environment["RABBITMQ_DEFAULT_VHOST"])

	// Tokens can be overridden from the shell, as with make dev.
	p = loadProject(t, "OPERATOR_TOKEN=from-the-shell")
	require.Equal(t, "from-the-shell", *p.Services["api"].Environment["OPERATOR_TOKEN"])
}

// The image is built in stages, without cgo, and runs as a non-root user.
func TestDockerfileBuildsASmallNonRootImage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	df := string(b)
	var froms, users []string
	for line := range strings.Lines(df) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			froms = append(froms, fields[1])
		case "USER":
			users = append(users, fields[1])
		}
	}
	require.GreaterOrEqual(t, len(froms), 2, "multi-stage")
	for _, from := range froms {
		// A tag can be pushed again; the digest names the bytes (docs/deployment.md, "Images": refreshing them).
		require.Regexp(t, `^[a-z0-9./-]+:[0-9][0-9A-Za-z.-]*@sha256:[0-9a-f]{64}$`, from, "the base image is pinned by digest")
	}
	require.Contains(t, df, "CGO_ENABLED=0")
	require.Contains(t, df, "./cmd/brokerswitch")
	require.NotEmpty(t, users)
	last := users[len(users)-1]
	require.NotContains(t, []string{"root", "0", "0:0", "root:root"}, last, "the final image runs as a non-root user")
	for _, from := range froms {
		require.NotContains(t, from, ":latest", "base images are pinned")
	}
	// Alpine releases get two years of support: 3.20 ended in April 2026.
	require.Regexp(t, `^(alpine:3\.(2[2-9])|gcr\.io/distroless/static)`, froms[len(froms)-1],
		"the final image is a supported base")

	// The binary knows its build, and the image says what it is.
	require.Contains(t, df, "-X main.version=${VERSION}")
	require.Contains(t, df, "-X main.revision=${REVISION}")
	for _, label := range []string{"title", "source", "licenses", "version", "revision"} {
		require.Contains(t, df, "org.opencontainers.image."+label+"=", "OCI label %s", label)
	}
}

// Outside the development profile the tokens have no default, and every published port,
// the API's included, listens on 127.0.0.1 only.
func TestTokensHaveNoSilentDefaultAndPortsStayLocal(t *testing.T) {
	_, err := tryLoadProject(t)
	require.ErrorContains(t, err, "OPERATOR_TOKEN", "without tokens or the dev profile Compose refuses to start")
	_, err = tryLoadProject(t, "OPERATOR_TOKEN=operator-from-the-shell")
	require.ErrorContains(t, err, "PRODUCER_TOKEN")

	p, err := tryLoadProject(t, "OPERATOR_TOKEN=operator-from-the-shell", "PRODUCER_TOKEN=producer-from-the-shell")
	require.NoError(t, err)
	require.Equal(t, "producer-from-the-shell", *p.Services["api"].Environment["PRODUCER_TOKEN"])

	for name, s := range loadMonitoring(t).Services {
		for _, port := range s.Ports {
			require.Equal(t, "127.0.0.1", port.HostIP, "%s publishes %s beyond this machine", name, port.Published)
		}
	}
}
