package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/models"
)

// openAPI is the part of openapi.yaml the tests compare with the code.
type openAPI struct {
	Paths      map[string]map[string]openAPIOperation `yaml:"paths"`
	Components struct {
		Schemas map[string]openAPISchema `yaml:"schemas"`
	} `yaml:"components"`
}

type openAPIOperation struct {
	Security  *[]map[string][]string `yaml:"security"`
	Responses map[string]any         `yaml:"responses"`
}

type openAPISchema struct {
	Ref        string                   `yaml:"$ref"`
	AllOf      []openAPISchema          `yaml:"allOf"`
	Properties map[string]openAPISchema `yaml:"properties"`
}

func loadOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "openapi.yaml"))
	require.NoError(t, err)
	var doc openAPI
	require.NoError(t, yaml.Unmarshal(b, &doc))
	return doc
}

// ginParam is a gin path parameter, :name, which OpenAPI writes {name}.
var ginParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	r := Router(Deps{Config: config.Config{OperatorToken: "x"}})

	var inCode []string
	for _, route := range r.Routes() {
		inCode = append(inCode, route.Method+" "+ginParam.ReplaceAllString(route.Path, "{$1}"))
	}
	var inDoc []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				inDoc = append(inDoc, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(inCode)
	slices.Sort(inDoc)
	require.Equal(t, inCode, inDoc, "every route is in openapi.yaml and every path there is a route")

	// Routes without authentication say so; all others answer 401 and declare it.
	for path, ops := range doc.Paths {
		for method, op := range ops {
			public := op.Security != nil && len(*op.Security) == 0
			require.Equal(t, path == "/healthz" || path == "/readyz" || path == "/metrics", public, "%s %s: security", method, path)
			if !public {
				require.Contains(t, op.Responses, "401", "%s %s", method, path)
			}
		}
	}
}

func TestOpenAPISchemasMatchAnswers(t *testing.T) {
	doc := loadOpenAPI(t)
	now := time.Now()
	state := stateView{
		ActiveIndex:    1,
		PendingSwitch:  &models.PendingSwitch{Route: []models.Hop{{Index: 1, SwitchedAt: now}}, RecordedAt: now},
		LastSwitch:     &models.LastSwitch{SwitchedAt: now, CompletedAt: now, Forced: true},
		LastDrainCheck: &models.DrainCheck{Error: "x", Counts: map[string]int{"q": 1}},
		SeenUntil:      &now,
	}
	checks := 1
	for schema, value := range map[string]any{
		"NotificationAnswer":  notificationAnswer{Ignored: "stale"},
		"NotificationRequest": notificationRequest{},
		"OrderAnswer":         orderAnswer{Outcome: "refused", Reason: "r", stateView: state},
		"BrokerStatus":        brokerStatus{stateView: state},
		"Broker":              brokerView{},
		"Workflow":            workflowView{RunID: "r", StartTime: &now, Waiting: "w", Checks: &checks, Error: "e"},
		"Readiness":           readinessAnswer{},
		"PendingSwitch":       state.PendingSwitch,
		"Hop":                 models.Hop{},
		"LastSwitch":          state.LastSwitch,
		"DrainCheck":          state.LastDrainCheck,
		"Error":               errorBody{},
	} {
		b, err := json.Marshal(value)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		require.ElementsMatch(t, sortedKeys(fields), doc.properties(t, schema), "schema %s", schema)
	}
}

// properties lists a schema's property names, through $ref and allOf.
func (d openAPI) properties(t *testing.T, name string) []string {
	t.Helper()
	s, ok := d.Components.Schemas[name]
	require.True(t, ok, "schema %s", name)
	var out []string
	var walk func(openAPISchema)
	walk = func(s openAPISchema) {
		if s.Ref != "" {
			ref, ok := d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
			require.True(t, ok, "ref %s", s.Ref)
			walk(ref)
		}
		for _, sub := range s.AllOf {
			walk(sub)
		}
		for p := range s.Properties {
			out = append(out, p)
		}
	}
	walk(s)
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// The statuses the handlers answer are declared for their routes, and no others.
func TestOpenAPIDeclaresStatuses(t *testing.T) {
	doc := loadOpenAPI(t)
	want := map[string][]string{
		"post /api/v1/broker/pending-switch":   {"200", "202", "400", "401", "404", "413", "422", "502", "503"},
		"delete /api/v1/broker/pending-switch": {"200", "202", "401", "403", "409", "502", "504"},
		"post /api/v1/broker/switch/{index}":   {"200", "400", "401", "403", "404", "409", "502", "503", "504"},
		"get /api/v1/broker":                   {"200", "401", "403", "503"},
		"get /healthz":                         {"200"},
		"get /readyz":                          {"200", "503"},
		"get /metrics":                         {"200"},
	}
	for key, statuses := range want {
		method, path, _ := strings.Cut(key, " ")
		op, ok := doc.Paths[path][method]
		require.True(t, ok, key)
		got := make([]string, 0, len(op.Responses))
		for code := range op.Responses {
			got = append(got, code)
		}
		require.ElementsMatch(t, statuses, got, key)
	}
}
