//go:build integration

package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	validatorconfig "github.com/pb33f/libopenapi-validator/config"
	validationerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/errorqueue"
	"github.com/brokerswitch/brokerswitch/metrics"
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
	r := Router(Deps{Settings: Settings{OperatorToken: "x"}})

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
			require.Equal(t, path == "/healthz" || path == "/readyz", public, "%s %s: security", method, path)
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
		PendingSwitch:  &brokerstate.PendingSwitch{Route: []brokerstate.Hop{{Index: 1, SwitchedAt: now}}, RecordedAt: now},
		LastSwitch:     &brokerstate.LastSwitch{SwitchedAt: now, CompletedAt: now, Forced: true},
		LastDrainCheck: &brokerstate.DrainCheck{Error: "x", Counts: map[string]int{"q": 1}, HeldBy: []brokerstate.Held{{Broker: 2}}, Idle: []string{"q"}},
		SeenUntil:      &now,
	}
	checks := 1
	for schema, value := range map[string]any{
		"NotificationAnswer":  notificationAnswer{Ignored: "stale"},
		"NotificationRequest": notificationRequest{},
		"OrderAnswer":         orderAnswer{Outcome: "refused", Reason: "r", stateView: state},
		"BrokerStatus":        brokerStatus{stateView: state},
		"Broker":              brokerView{LeftoverOrder: 1, AheadOfActive: true},
		"Workflow":            workflowView{RunID: "r", StartTime: &now, Waiting: "w", Checks: &checks, Error: "e"},
		"Readiness":           metrics.ReadinessAnswer{},
		"PendingSwitch":       state.PendingSwitch,
		"Hop":                 brokerstate.Hop{From: brokerstate.Ref{Host: "h"}, Implied: true},
		"LastSwitch":          state.LastSwitch,
		"DrainCheck":          state.LastDrainCheck,
		"Error":               errorBody{},
		"ErrorListing":        errorqueue.Listing{},
		"ErrorQueueSummary":   errorqueue.QueueSummary{Oldest: &now, Newest: &now, Error: "e"},
		"ErrorMessage":        errorqueue.Message{MessageID: "m", Event: "e", Action: "a", ErrorAt: now},
		"ReasonCount":         errorqueue.ReasonCount{},
		"ErrorMessageDetail":  errorqueue.Detail{Message: errorqueue.Message{MessageID: "m", Event: "e", Action: "a", ErrorAt: now}},
		"LedgerRow":           errorqueue.LedgerRow{ErrorReason: "r", AppliedAt: &now},
		"ErrorShown":          errorqueue.Shown{Unread: []string{"q"}},
		"ErrorOutcome":        errorqueue.Outcome{},
		"ErrorRun":            errorqueue.Run{Errors: []string{"e"}},
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
		"post /api/v1/broker/pending-switch":   {"200", "202", "400", "401", "404", "413", "422", "429", "502", "503"},
		"delete /api/v1/broker/pending-switch": {"200", "202", "401", "403", "409", "502", "504"},
		"post /api/v1/broker/switch/{index}":   {"200", "400", "401", "403", "404", "409", "502", "503", "504"},
		"get /api/v1/broker":                   {"200", "401", "403", "503"},
		"get /api/v1/errors":                   {"200", "400", "401", "403", "503"},
		"get /api/v1/errors/{id}":              {"200", "400", "401", "403", "404", "503"},
		"post /api/v1/errors/requeue":          {"200", "400", "401", "403", "404", "413", "503"},
		"post /api/v1/errors/purge":            {"200", "400", "401", "403", "404", "413", "503"},
		"get /healthz":                         {"200"},
		"get /readyz":                          {"200", "503"},
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

// openAPIValidator checks exchanges against openapi.yaml with libopenapi-validator, built
// once per test binary: the document does not change while the tests run.
var openAPIValidator = sync.OnceValues(func() (validator.Validator, error) {
	b, err := os.ReadFile(filepath.Join("..", "openapi.yaml"))
	if err != nil {
		return nil, err
	}
	doc, err := libopenapi.NewDocument(b)
	if err != nil {
		return nil, err
	}
	// Authentication is checked by the auth tests: the document's bearer scheme cannot
	// say that "token <t>" is accepted too, or that API_INSECURE_NO_AUTH needs none.
	v, errs := validator.NewValidator(doc, validatorconfig.WithoutSecurityValidation())
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ok, docErrs := v.ValidateDocument(); !ok {
		var all []error
		for _, e := range docErrs {
			all = append(all, errors.New(e.Message+": "+e.Reason))
		}
		return nil, errors.Join(all...)
	}
	return v, nil
})

// requireMatchesOpenAPI checks one exchange with the real router against openapi.yaml:
// every answer, errors included, must be declared for its route with its status, content
// type and schema; a request the API accepted (2xx) must be one the document allows. A
// request the API refused is not checked: tests send invalid ones on purpose.
func requireMatchesOpenAPI(t *testing.T, req *http.Request, reqBody []byte, res *http.Response, resBody []byte) {
	t.Helper()
	v, err := openAPIValidator()
	require.NoError(t, err, "openapi.yaml")
	// The validator reads the bodies; hand it fresh copies.
	fresh := req.Clone(context.WithoutCancel(req.Context()))
	fresh.Body = io.NopCloser(bytes.NewReader(reqBody))
	answer := *res
	answer.Body = io.NopCloser(bytes.NewReader(resBody))

	where := req.Method + " " + req.URL.RequestURI()
	if ok, errs := v.ValidateHttpResponse(fresh, &answer); !ok {
		if unroutable(res.StatusCode, errs) {
			return // the document's description covers these: 404 and 405 on any path
		}
		t.Errorf("%s answered %d %s, which openapi.yaml does not describe:%s", where, res.StatusCode, resBody, describe(errs))
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		fresh.Body = io.NopCloser(bytes.NewReader(reqBody))
		if ok, errs := v.ValidateHttpRequest(fresh); !ok {
			t.Errorf("%s was accepted, but openapi.yaml does not allow it:%s", where, describe(errs))
		}
	}
}

// unroutable says whether an answer is the router's 404 (no such path) or 405 (no such
// method on the path): the document describes them once, in info.description, as they
// are answered for paths and methods it does not list.
func unroutable(status int, errs []*validationerrors.ValidationError) bool {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
		return false
	}
	for _, e := range errs {
		if e.ValidationType != "path" && !strings.Contains(e.Message, "response code") {
			return false
		}
	}
	return len(errs) > 0
}

func describe(errs []*validationerrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n  - %s: %s", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s: %s", s.FieldPath, s.Reason)
		}
	}
	return b.String()
}

// Go's HTTP server answers some requests before the router sees them, in plain text; the
// document says which (info.description), and the server answers them as it says.
func TestServerLevelAnswersAreDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "openapi.yaml"))
	require.NoError(t, err)
	var doc struct {
		Info struct {
			Description string `yaml:"description"`
		} `yaml:"info"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	require.Contains(t, doc.Info.Description, "`431 Request Header Fields Too Large`")
	require.Contains(t, doc.Info.Description, "`400 Bad Request`")
	require.Contains(t, doc.Info.Description, "exceed 16 KiB")

	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, e.deps, ln) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	raw := func(request string) (status, contentType string) {
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(conn, request)
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		defer res.Body.Close()
		return res.Status, res.Header.Get("Content-Type")
	}
	big := strings.Repeat("x", 20<<10)
	status, ct := raw("GET /api/v1/broker HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n")
	require.Equal(t, "431 Request Header Fields Too Large", status)
	require.Equal(t, "text/plain; charset=utf-8", ct)
	status, ct = raw("GET /api/v1/broker HTTP/1.1\r\nHost: x\r\nbad header line\r\n\r\n")
	require.Equal(t, "400 Bad Request", status)
	require.Equal(t, "text/plain; charset=utf-8", ct)
}
