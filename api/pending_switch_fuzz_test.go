package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
)

// memStore is a StateStore in memory: Update applies fn under a lock, as the
// Postgres store does in a transaction.
type memStore struct {
	mu sync.Mutex
	st brokerstate.State
}

func (m *memStore) LoadAllowingRemoved(context.Context) (brokerstate.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st, nil
}

func (m *memStore) Update(_ context.Context, fn func(brokerstate.State) (brokerstate.State, error)) (brokerstate.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	next, err := fn(m.st)
	if err != nil {
		return m.st, err
	}
	m.st = next
	return next, nil
}

// Now is the test's clock: there is no database's.
func (m *memStore) Now(context.Context) (time.Time, error) { return time.Now(), nil }

// okTemporal accepts every signal and answers every other call with nothing.
type okTemporal struct{}

func (okTemporal) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, nil
}

func (okTemporal) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{}, nil
}

func (okTemporal) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return nil, nil
}

func (okTemporal) UpdateWorkflow(context.Context, client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return nil, serviceerror.NewNotFound("no workflow")
}

func (okTemporal) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	return &client.CheckHealthResponse{}, nil
}

// FuzzPendingSwitchBody posts arbitrary bodies to POST /api/v1/broker/pending-switch
// through the real router, with the producer's token: whatever the body, the answer is a
// JSON object and never a 5xx, and the handler never panics.
func FuzzPendingSwitchBody(f *testing.F) {
	now := time.Now().UTC()
	for _, seed := range []string{
		`{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "` + now.Add(-time.Minute).Format(time.RFC3339) + `"}`,
		`{"host": "RABBIT-B.example.com", "vhost": "prod%2Fone", "switchedAt": "` + now.Format(time.RFC3339Nano) + `"}`,
		`{"host": "rabbit-b.example.com", "vhost": "prod/one", "switchedAt": "2026-01-02T03:04:05+02:00"}`,
		`{"host": "rabbit-a.example.com", "switchedAt": "2026-01-02T03:04:05Z"}`,
		`{"host": "elsewhere.example.com", "vhost": "x", "switchedAt": "2026-01-02T03:04:05Z"}`,
		`{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "9999-12-31T23:59:59Z"}`,
		`{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "` + now.Add(4*time.Minute).Format(time.RFC3339) + `"}`,
		`{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "` + now.Add(59*time.Minute).Format(time.RFC3339) + `"}`,
		`{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "0001-01-01T00:00:00Z"}`,
		`{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "yesterday"}`,
		`{"host": "", "vhost": "", "switchedAt": ""}`,
		`{"host": null, "vhost": null, "switchedAt": null}`,
		`{"host": 1, "vhost": [], "switchedAt": {}}`,
		`{"host": "rabbit-a.example.com", "vhost": "vh-a", "switchedAt": "2026-01-02T03:04:05Z", "index": 1}`,
		`{"host": "rabbit-a.example.com"}{"host": "rabbit-b.example.com"}`,
		`[]`, `null`, `"x"`, `{`, ``, "\xff\xfe", `{"host": "\u0000"}`,
		strings.Repeat(`{"host": "a",`, 10000),
	} {
		f.Add([]byte(seed))
	}
	eps, err := broker.ParseEndpoints(fakeBrokers)
	if err != nil {
		f.Fatal(err)
	}
	store := &memStore{}
	router := Router(Deps{
		Settings: Settings{Brokers: eps, TaskQueue: "fuzz", ProducerToken: producerToken, OperatorToken: operatorToken,
			NotificationMaxClockSkew: 5 * time.Minute},
		Temporal: okTemporal{},
		Store:    store,
		Ping:     func(context.Context) error { return nil },
		Logger:   slog.New(slog.DiscardHandler),
	})

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/broker/pending-switch", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+producerToken)
		rec := httptest.NewRecorder()
		router.ServeHTTP(rec, req)
		res := rec.Result()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 500 {
			t.Fatalf("body %q answered %d: %s", body, res.StatusCode, b)
		}
		var answer map[string]any
		if err := json.Unmarshal(b, &answer); err != nil {
			t.Fatalf("body %q answered %d with no JSON object: %q", body, res.StatusCode, b)
		}
		switch res.StatusCode {
		case http.StatusOK, http.StatusAccepted:
			if _, ok := answer["outcome"].(string); !ok {
				t.Fatalf("a %d without an outcome: %s", res.StatusCode, b)
			}
		case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusTooManyRequests:
			if msg, ok := answer["error"].(string); !ok || msg == "" {
				t.Fatalf("a %d without an error: %s", res.StatusCode, b)
			}
		default:
			t.Fatalf("body %q answered the unexpected %d: %s", body, res.StatusCode, b)
		}
		if strings.Contains(string(b), brokerPass) {
			t.Fatalf("the answer shows a broker password: %s", b)
		}
		st, _ := store.LoadAllowingRemoved(context.Background())
		if limit := time.Now().Add(5 * time.Minute); st.SeenUntil.After(limit) {
			t.Fatalf("the mark of notifications %s lies beyond the clock skew allowed", st.SeenUntil)
		}
		if st.Pending != nil && (st.Pending.Target().Index < 0 || st.Pending.Target().Index >= len(eps)) {
			t.Fatalf("a pending switch to an unconfigured broker: %+v", st.Pending)
		}
	})
}
