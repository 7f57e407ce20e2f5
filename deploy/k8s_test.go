package deploy

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/brokerswitch/brokerswitch/config"
)

var k8sDir = filepath.Join(root, "deploy", "k8s")

// temporalEnvconfig are the Temporal SDK's envconfig variables (go.temporal.io/sdk/contrib/envconfig)
// that the client settings follow; the manifests may set them.
var temporalEnvconfig = []string{
	"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY",
	"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH",
	"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_NAME",
}

// manifests are the objects of the kustomize base, decoded strictly: a field the
// Kubernetes API does not know (a typo, a wrong indentation) fails the test.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	policies    map[string]*networkingv1.NetworkPolicy
	monitors    map[string]*serviceMonitor
}

// serviceMonitor is what the sample sets of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor, decoded as strictly as the Kubernetes objects:
// a field it does not list fails the test (the operator's Go types are no dependency here).
type serviceMonitor struct {
	APIVersion        string `json:"apiVersion"`
	Kind              string `json:"kind"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel  string               `json:"jobLabel"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Labels     []struct {
			Pairs map[string]string `json:"pairs"`
		} `json:"labels"`
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
			Digest  string `json:"digest"`
		} `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &kust))
	require.Equal(t, "Kustomization", kust.Kind)
	// The image is pinned by digest, not by a tag that can move (dev, latest).
	for _, img := range kust.Images {
		require.Empty(t, img.NewTag, "%s: pinned by a tag", img.Name)
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, img.Digest, "%s: pinned by digest", img.Name)
	}

	// Every manifest in the directory is in the base, and every resource exists.
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	require.NoError(t, err)
	var onDisk []string
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			onDisk = append(onDisk, base)
		}
	}
	require.ElementsMatch(t, onDisk, kust.Resources, "kustomization.yaml lists every manifest")

	m := manifests{
		deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		services: map[string]*corev1.Service{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		policies: map[string]*networkingv1.NetworkPolicy{}, monitors: map[string]*serviceMonitor{},
	}
	for _, name := range kust.Resources {
		b, err := os.ReadFile(filepath.Join(k8sDir, name))
		require.NoError(t, err)
		for doc := range strings.SplitSeq(string(b), "\n---\n") {
			js, err := yaml.YAMLToJSON([]byte(doc))
			require.NoError(t, err, name)
			var head struct{ APIVersion, Kind string }
			require.NoError(t, json.Unmarshal(js, &head), name)
			var name2 string
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				name2 = decodeNamed(t, name, js, m.deployments)
			case "batch/v1 Job":
				name2 = decodeNamed(t, name, js, m.jobs)
			case "v1 ConfigMap":
				name2 = decodeNamed(t, name, js, m.configMaps)
			case "v1 Secret":
				name2 = decodeNamed(t, name, js, m.secrets)
			case "v1 Service":
				name2 = decodeNamed(t, name, js, m.services)
			case "policy/v1 PodDisruptionBudget":
				name2 = decodeNamed(t, name, js, m.pdbs)
			case "networking.k8s.io/v1 NetworkPolicy":
				name2 = decodeNamed(t, name, js, m.policies)
			case "monitoring.coreos.com/v1 ServiceMonitor":
				name2 = decodeNamed(t, name, js, m.monitors)
			default:
				t.Fatalf("%s: unexpected %s %s", name, head.APIVersion, head.Kind)
			}
			require.NotEmpty(t, name2, "%s: every object has a name", name)
		}
	}
	return m
}

// decodeNamed decodes one object strictly and files it under its name.
func decodeNamed[T any, P interface {
	*T
	GetName() string
}](t *testing.T, file string, js []byte, into map[string]P) string {
	t.Helper()
	o := P(new(T))
	decodeStrict(t, file, js, o)
	into[o.GetName()] = o
	return o.GetName()
}

func decodeStrict(t *testing.T, file string, js []byte, into any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(into), "%s: Kubernetes would reject or ignore a field", file)
}

func TestKubernetesBaseHasEveryPart(t *testing.T) {
	m := loadManifests(t)
	require.Contains(t, m.jobs, "brokerswitch-migrate")
	require.Equal(t, []string{"migrate"}, m.jobs["brokerswitch-migrate"].Spec.Template.Spec.Containers[0].Args)
	require.Contains(t, m.configMaps, "brokerswitch-config")
	require.Contains(t, m.secrets, "brokerswitch-secrets")
	require.Contains(t, m.secrets, "brokerswitch-temporal-tls")
	// The sample checks the database's certificate and host name, not only that TLS is on.
	dsn, err := url.Parse(m.secrets["brokerswitch-secrets"].StringData["DATABASE_URL"])
	require.NoError(t, err)
	require.Equal(t, "verify-full", dsn.Query().Get("sslmode"))

	worker := m.deployments["brokerswitch-worker"]
	require.NotNil(t, worker)
	require.EqualValues(t, 2, *worker.Spec.Replicas)
	require.Equal(t, []string{"worker"}, worker.Spec.Template.Spec.Containers[0].Args)
	// Longer than the worker waits for its windows to settle (WORKER_STOP_TIMEOUT).
	stop, err := time.ParseDuration(m.configMaps["brokerswitch-config"].Data["WORKER_STOP_TIMEOUT"])
	require.NoError(t, err)
	grace := time.Duration(*worker.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, stop+10*time.Second, "the grace period outlasts WORKER_STOP_TIMEOUT")

	api := m.deployments["brokerswitch-api"]
	require.NotNil(t, api)
	require.Equal(t, []string{"api"}, api.Spec.Template.Spec.Containers[0].Args)
	svc := m.services["brokerswitch-api"]
	require.NotNil(t, svc)
	require.Equal(t, api.Spec.Template.Labels, withOnly(api.Spec.Template.Labels, svc.Spec.Selector), "the Service selects the api pods")
	require.Len(t, svc.Spec.Ports, 1, "the Service exposes the API only, not its metrics")
	require.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())

	// One disruption budget per Deployment, selecting exactly its pods.
	for _, d := range []*appsv1.Deployment{worker, api} {
		pdb := m.pdbs[d.Name]
		require.NotNil(t, pdb, "%s has a PodDisruptionBudget", d.Name)
		require.Equal(t, d.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels, d.Name)
		require.Equal(t, 1, pdb.Spec.MinAvailable.IntValue(), d.Name)
	}
}

// withOnly keeps the labels of want that sel names, so a selector can be compared to the
// pod labels it must match.
func withOnly(labels, sel map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range sel {
		if labels[k] == v {
			out[k] = v
		} else {
			out[k] = "<" + v + " does not match>"
		}
	}
	for k, v := range labels {
		if _, ok := sel[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// The probes and scrape annotations point at what the binary serves on the ports config
// sets: every process's /metrics on METRICS_ADDR, the worker's /readyz there too, the
// api's /readyz on HTTP_ADDR, which serves only the API.
func TestKubernetesProbesAndScrapingMatchTheBinary(t *testing.T) {
	m := loadManifests(t)
	cm := m.configMaps["brokerswitch-config"].Data
	portOf := func(key string) string { return strings.TrimPrefix(cm[key], ":") }
	for name, want := range map[string]struct{ ports, probe string }{
		"brokerswitch-worker": {ports: "metrics=METRICS_ADDR", probe: "metrics"},
		"brokerswitch-api":    {ports: "http=HTTP_ADDR metrics=METRICS_ADDR", probe: "http"},
	} {
		d := m.deployments[name]
		c := d.Spec.Template.Spec.Containers[0]
		var ports []string
		for _, p := range c.Ports {
			for key := range strings.FieldsSeq(want.ports) {
				if n, k, _ := strings.Cut(key, "="); n == p.Name && portOf(k) == strconv.Itoa(int(p.ContainerPort)) {
					ports = append(ports, key)
				}
			}
		}
		require.Equal(t, want.ports, strings.Join(ports, " "), "%s listens on the ports config sets", name)

		require.NotNil(t, c.ReadinessProbe, name)
		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, name)
		require.Equal(t, want.probe, c.ReadinessProbe.HTTPGet.Port.String(), name)
		require.NotNil(t, c.LivenessProbe, name)
		require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, name)
		require.Equal(t, want.probe, c.LivenessProbe.HTTPGet.Port.String(), name)
		// A probe waits longer than one readiness round (3 s).
		require.Greater(t, c.ReadinessProbe.TimeoutSeconds, int32(3), name)

		ann := d.Spec.Template.Annotations
		require.Equal(t, "true", ann["prometheus.io/scrape"], name)
		require.Equal(t, portOf("METRICS_ADDR"), ann["prometheus.io/port"], name)
		require.Equal(t, "/metrics", ann["prometheus.io/path"], name)

		sc := c.SecurityContext
		require.False(t, *sc.AllowPrivilegeEscalation, name)
		require.True(t, *sc.ReadOnlyRootFilesystem, name)
		require.True(t, *d.Spec.Template.Spec.SecurityContext.RunAsNonRoot, name)
	}
}

// Every variable a pod gets, set directly or through envFrom, is one the config package
// reads (or one of the Temporal SDK's envconfig names); every reference resolves to a
// ConfigMap or Secret of the base, and secrets come from Secrets, not the ConfigMap.
func TestKubernetesEnvironmentIsWhatConfigReads(t *testing.T) {
	m := loadManifests(t)
	known := configVariables(t)
	for _, k := range temporalEnvconfig {
		known[k] = true
	}
	secretVars := []string{"RABBITMQ_CONNECTION_STRINGS", "DATABASE_URL", "OPERATOR_TOKEN", "PRODUCER_TOKEN",
		"TEMPORAL_API_KEY", "HEALTHCHECKS_PING_URL", "WEBHOOK_SECRET"}
	for k := range m.configMaps["brokerswitch-config"].Data {
		require.True(t, known[k], "ConfigMap: %s is not a variable the config package reads", k)
		require.NotContains(t, secretVars, k, "ConfigMap: %s is a secret", k)
	}
	for k := range m.secrets["brokerswitch-secrets"].StringData {
		require.True(t, known[k], "Secret: %s is not a variable the config package reads", k)
	}

	pods := map[string]corev1.PodSpec{"job/brokerswitch-migrate": m.jobs["brokerswitch-migrate"].Spec.Template.Spec}
	for name, d := range m.deployments {
		pods[name] = d.Spec.Template.Spec
	}
	for pod, spec := range pods {
		for _, c := range spec.Containers {
			for _, from := range c.EnvFrom {
				require.NotNil(t, from.ConfigMapRef, "%s: envFrom only the ConfigMap (secrets are named one by one)", pod)
				require.Contains(t, m.configMaps, from.ConfigMapRef.Name, pod)
			}
			for _, e := range c.Env {
				require.True(t, known[e.Name], "%s: %s is not a variable the config package reads", pod, e.Name)
				if secret, ok := strings.CutSuffix(e.Name, "_FILE"); ok {
					requireMountedSecretFile(t, pod, spec, c, m, e.Value, secret)
					continue
				}
				require.NotNil(t, e.ValueFrom, "%s: %s comes from the ConfigMap or a Secret", pod, e.Name)
				switch {
				case e.ValueFrom.SecretKeyRef != nil:
					t.Fatalf("%s: %s comes from a Secret into the environment; mount the Secret and set %s_FILE", pod, e.Name, e.Name)
				case e.ValueFrom.ResourceFieldRef != nil:
					require.Equal(t, "MEMORY_LIMIT", e.Name, "%s: only MEMORY_LIMIT comes from the container's resources", pod)
					require.Equal(t, "limits.memory", e.ValueFrom.ResourceFieldRef.Resource, pod)
					require.Equal(t, c.Name, e.ValueFrom.ResourceFieldRef.ContainerName, pod)
				case e.ValueFrom.ConfigMapKeyRef != nil:
					ref := e.ValueFrom.ConfigMapKeyRef
					require.Contains(t, m.configMaps[ref.Name].Data, ref.Key, pod)
					if e.Name == "RABBITMQ_CONNECTION_STRINGS" {
						requireNoPasswords(t, pod, m.configMaps[ref.Name].Data[ref.Key])
						continue
					}
					require.NotContains(t, secretVars, e.Name, "%s: %s is a secret", pod, e.Name)
				default:
					t.Fatalf("%s: %s has an unexpected source", pod, e.Name)
				}
			}
			for _, mount := range c.VolumeMounts {
				require.True(t, mount.ReadOnly, "%s: %s", pod, mount.Name)
				require.True(t, slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name }), pod)
			}
		}
	}

	// The worker and the api get what they need: both the brokers and Postgres, the api its tokens.
	has := func(name string, vars ...string) {
		c := m.deployments[name].Spec.Template.Spec.Containers[0]
		for _, v := range vars {
			require.True(t, slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v }), "%s gets %s", name, v)
		}
	}
	has("brokerswitch-worker", "RABBITMQ_CONNECTION_STRINGS_FILE", "DATABASE_URL_FILE")
	has("brokerswitch-api", "RABBITMQ_CONNECTION_STRINGS", "DATABASE_URL_FILE", "OPERATOR_TOKEN_FILE", "PRODUCER_TOKEN_FILE")

	// The API pod holds no broker password: its brokers come without credentials, in the
	// order of the workers' list, and no Secret it mounts or reads holds them.
	api := m.deployments["brokerswitch-api"].Spec.Template.Spec
	for _, v := range api.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "brokerswitch-secrets" {
			require.NotEmpty(t, v.Secret.Items, "the api mounts chosen keys of brokerswitch-secrets, not all")
			for _, it := range v.Secret.Items {
				require.NotEqual(t, "RABBITMQ_CONNECTION_STRINGS", it.Key, "the api pod mounts the broker passwords")
			}
		}
	}
	for _, e := range api.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			require.NotEqual(t, "RABBITMQ_CONNECTION_STRINGS", e.ValueFrom.SecretKeyRef.Key, "the api pod reads the broker passwords")
		}
	}
	brokersOf := func(urls string) []string {
		cfg, err := config.FromEnv(func(k string) string {
			return map[string]string{"RABBITMQ_CONNECTION_STRINGS": urls}[k]
		})
		require.NoError(t, err)
		var out []string
		for _, ep := range cfg.Brokers {
			out = append(out, ep.String())
		}
		return out
	}
	require.Equal(t, brokersOf(m.secrets["brokerswitch-secrets"].StringData["RABBITMQ_CONNECTION_STRINGS"]),
		brokersOf(m.configMaps["brokerswitch-api-brokers"].Data["RABBITMQ_CONNECTION_STRINGS"]),
		"the api and the worker see the same brokers in the same order")
}

// optionalSecrets may be missing from the Secret: their files are left out, and config
// leaves them unset.
var optionalSecrets = []string{"TEMPORAL_API_KEY", "HEALTHCHECKS_PING_URL", "WEBHOOK_SECRET"}

// requireMountedSecretFile checks that path, the value of secret's _FILE variable, is a
// file of a Secret volume the container mounts, holding that secret's key.
func requireMountedSecretFile(t *testing.T, pod string, spec corev1.PodSpec, c corev1.Container, m manifests, path, secret string) {
	t.Helper()
	for _, mount := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, mount.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != mount.Name || v.Secret == nil {
				continue
			}
			require.Contains(t, m.secrets, v.Secret.SecretName, pod)
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					require.Equal(t, secret, it.Key, "%s: %s_FILE reads the Secret's key %s", pod, secret, secret)
					if v.Secret.Optional != nil && *v.Secret.Optional {
						require.Contains(t, optionalSecrets, secret, "%s: only an optional secret comes from an optional volume", pod)
						return
					}
					require.Contains(t, m.secrets[v.Secret.SecretName].StringData, it.Key, pod)
					return
				}
			}
		}
	}
	t.Fatalf("%s: %s_FILE=%s is no file of a mounted Secret", pod, secret, path)
}

// requireNoPasswords checks that broker URLs carry no password.
func requireNoPasswords(t *testing.T, pod, urls string) {
	t.Helper()
	for raw := range strings.SplitSeq(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		require.NoError(t, err, pod)
		_, hasPassword := u.User.Password()
		require.False(t, hasPassword, "%s: a broker URL from a ConfigMap carries a password", pod)
	}
}

// Every pod is selected by one NetworkPolicy that lets in only the ports it serves, from
// chosen namespaces, and lets out only chosen ports.
func TestKubernetesNetworkPoliciesAdmitOnlyServedPorts(t *testing.T) {
	m := loadManifests(t)
	pods := map[string]corev1.PodTemplateSpec{"job/brokerswitch-migrate": m.jobs["brokerswitch-migrate"].Spec.Template}
	for name, d := range m.deployments {
		pods[name] = d.Spec.Template
	}
	for name, pod := range pods {
		var selecting []*networkingv1.NetworkPolicy
		for _, p := range m.policies {
			sel := p.Spec.PodSelector.MatchLabels
			if len(sel) > 0 && selects(sel, pod.Labels) {
				selecting = append(selecting, p)
			}
		}
		require.Len(t, selecting, 1, "%s: one NetworkPolicy selects it", name)
		p := selecting[0]
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, p.Spec.PolicyTypes, name)
		for _, rule := range p.Spec.Egress {
			require.NotEmpty(t, rule.Ports, "%s: an egress rule without ports lets out every port", name)
		}
		require.NotEmpty(t, p.Spec.Egress, "%s: egress to DNS and what it dials at least", name)
		var admitted []string
		for _, rule := range p.Spec.Ingress {
			require.NotEmpty(t, rule.Ports, "%s: a rule without ports admits every port", name)
			require.NotEmpty(t, rule.From, "%s: a rule without sources admits everyone", name)
			for _, from := range rule.From {
				require.NotNil(t, from.NamespaceSelector, name)
				require.NotEmpty(t, from.NamespaceSelector.MatchLabels, "%s: an empty namespace selector admits every namespace", name)
			}
			for _, port := range rule.Ports {
				admitted = append(admitted, port.Port.String())
			}
		}
		var served []string
		for _, c := range pod.Spec.Containers {
			for _, port := range c.Ports {
				served = append(served, port.Name)
			}
		}
		require.ElementsMatch(t, served, admitted, "%s: the policy admits exactly the ports it serves", name)
	}
}

// selects reports whether every label of sel is on the pod.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The worker's settings fit its memory limit's 90%, the Go runtime's soft limit: config
// refuses them at start otherwise, as
// it refuses the defaults (19.5 GiB in flight) against 512Mi.
func TestKubernetesWorkerFitsItsMemoryLimit(t *testing.T) {
	m := loadManifests(t)
	c := m.deployments["brokerswitch-worker"].Spec.Template.Spec.Containers[0]
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	require.True(t, ok, "the worker has a memory limit")
	vars := maps.Clone(m.configMaps["brokerswitch-config"].Data)
	vars["MEMORY_LIMIT"] = strconv.FormatInt(limit.Value(), 10) // as the downward API gives it
	require.True(t, slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "MEMORY_LIMIT" }))
	cfg, err := config.FromEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	worst, arithmetic := cfg.WorstCaseMemory()
	require.LessOrEqual(t, worst, cfg.SoftMemoryLimit(), arithmetic)
	t.Log(arithmetic)
}

// The sample ships the dashboard for kube-prometheus-stack's Grafana sidecar, the same JSON
// as deploy/grafana/brokerswitch.json, and a ServiceMonitor that scrapes the metrics port of
// every Deployment's pods under the job names the alert rules and the dashboard select.
func TestKubernetesShipsTheDashboardAndAServiceMonitor(t *testing.T) {
	m := loadManifests(t)
	cm := m.configMaps["brokerswitch-grafana-dashboard"]
	require.NotNil(t, cm, "the dashboard's ConfigMap")
	require.Equal(t, "1", cm.Labels["grafana_dashboard"], "the label the Grafana sidecar watches")
	want, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "brokerswitch.json"))
	require.NoError(t, err)
	require.Equal(t, string(want), cm.Data["brokerswitch.json"], "the ConfigMap holds the dashboard: run `make dashboard`")
	require.Len(t, cm.Data, 1)

	require.Len(t, m.monitors, 1)
	sm := m.monitors["brokerswitch"]
	require.NotNil(t, sm)
	require.NotEmpty(t, sm.Labels["release"], "kube-prometheus-stack selects ServiceMonitors by its release label")
	require.Empty(t, sm.Spec.Selector.MatchExpressions)
	require.Len(t, sm.Spec.Endpoints, 1)
	ep := sm.Spec.Endpoints[0]
	require.Equal(t, "/metrics", ep.Path)
	_, err = time.ParseDuration(ep.Interval)
	require.NoError(t, err)

	cfg := m.configMaps["brokerswitch-config"].Data
	metricsPort := strings.TrimPrefix(cfg["METRICS_ADDR"], ":")
	jobs := map[string]string{} // Deployment -> job label of the Service that selects its pods
	for _, svc := range m.services {
		if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
			continue
		}
		require.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, "%s: headless, one target per pod", svc.Name)
		var port *corev1.ServicePort
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].Name == ep.Port {
				port = &svc.Spec.Ports[i]
			}
		}
		require.NotNil(t, port, "%s has the port %q the ServiceMonitor scrapes", svc.Name, ep.Port)
		require.Len(t, svc.Spec.Ports, 1, "%s: the metrics port only", svc.Name)
		var selected []string
		for name, d := range m.deployments {
			if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
				continue
			}
			selected = append(selected, name)
			c := d.Spec.Template.Spec.Containers[0]
			require.True(t, slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
				return p.Name == port.TargetPort.String() && strconv.Itoa(int(p.ContainerPort)) == metricsPort
			}), "%s: the Service's target port is the container's METRICS_ADDR", svc.Name)
			jobs[name] = svc.Labels[sm.Spec.JobLabel]
		}
		require.Len(t, selected, 1, "%s selects the pods of one Deployment", svc.Name)
	}
	require.Equal(t, map[string]string{
		"brokerswitch-worker": workerJob(t),
		"brokerswitch-api":    "brokerswitch-api",
	}, jobs, "every Deployment is scraped, under its job name")
	require.Len(t, m.deployments, 2)
}

// workerJob is the job name docs/alerts.yml's BrokerswitchWorkerDown selects.
func workerJob(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "alerts.yml"))
	require.NoError(t, err)
	m := regexp.MustCompile(`up\{job="([^"]+)"\}`).FindSubmatch(b)
	require.NotNil(t, m, "BrokerswitchWorkerDown selects up{job=...}")
	return string(m[1])
}
