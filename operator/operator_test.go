package operator

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// api is a stand-in for brokerswitch's API that records what the commands ask and
// answers from answers, keyed by "METHOD path".
type api struct {
	t        *testing.T
	answers  map[string]string
	requests []string
	bodies   []map[string]any
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	require.Equal(a.t, "Bearer op-token", r.Header.Get("Authorization"))
	a.requests = append(a.requests, r.Method+" "+r.URL.RequestURI())
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			a.bodies = append(a.bodies, m)
		}
	}
	body, ok := a.answers[r.Method+" "+r.URL.Path]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		body = `{"error":"no such message in the -error queues: \"zz\""}`
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, body)
}

func run(t *testing.T, a *api, cmd func(args []string, getenv Getenv, out, errOut io.Writer) error, args ...string) (string, error) {
	t.Helper()
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	env := map[string]string{"BROKERSWITCH_API": srv.URL, "OPERATOR_TOKEN": "op-token"}
	var out, errOut bytes.Buffer
	err := cmd(args, func(k string) string { return env[k] }, &out, &errOut)
	return out.String(), err
}

func errorsCmd(t *testing.T) func([]string, Getenv, io.Writer, io.Writer) error {
	return func(args []string, getenv Getenv, out, errOut io.Writer) error {
		return Errors(t.Context(), args, getenv, out, errOut)
	}
}

const listing = `{"filter":"reason=\"malformed\"","queues":[
 {"broker":0,"queue":"issues","held":3,"matched":1,"oldest":"2026-12-01T10:00:00Z","newest":"2026-12-01T10:00:00Z","reasons":[{"kind":"malformed","count":1,"example":"malformed delivery"}]},
 {"broker":1,"queue":"issues","held":0,"matched":0,"reasons":[],"error":"broker 1 (#1 b.example:5671/vh) cannot be reached: connection refused"}],
 "messages":[{"id":"d1","broker":0,"queue":"issues","position":2,"event":"issues","action":"opened","reason":"malformed delivery","reasonKind":"malformed","errorAt":"2026-12-01T10:00:00Z","size":12,"appliedSince":true}],
 "matched":1,"truncated":false}`

// list sends the filter in the query and prints the counts, the unreachable broker by
// name and each message; -o json prints the API's answer as it is.
func TestListPrintsCountsMessagesAndTheUnreachableBroker(t *testing.T) {
	a := &api{t: t, answers: map[string]string{"GET /api/v1/errors": listing}}
	out, err := run(t, a, errorsCmd(t), "list", "-reason", "malformed", "-broker", "0", "-since", "2026-12-01T00:00:00Z")
	require.NoError(t, err)
	require.Equal(t, []string{"GET /api/v1/errors?broker=0&limit=100&reason=malformed&since=2026-12-01T00%3A00%3A00Z"}, a.requests)
	require.Regexp(t, `0\s+issues-error\s+3\s+1\s+2026-12-01T10:00:00Z\s+2026-12-01T10:00:00Z\s+malformed 1`, out)
	require.Contains(t, out, "NOT READ: broker 1 (#1 b.example:5671/vh) cannot be reached")
	require.Regexp(t, `d1\s+0\s+issues\s+issues\s+opened\s+12\s+2026-12-01T10:00:00Z\s+yes\s+malformed delivery`, out)

	out, err = run(t, a, errorsCmd(t), "list", "-o", "json")
	require.NoError(t, err)
	require.JSONEq(t, listing, out)

	_, err = run(t, a, errorsCmd(t), "list", "-since", "yesterday")
	require.ErrorContains(t, err, "RFC 3339")
}

// show takes the id, flags after it too; an unknown id is the API's 404, said.
func TestShowAndAnUnknownID(t *testing.T) {
	a := &api{t: t, answers: map[string]string{"GET /api/v1/errors/d1": `{"messages":[{"id":"d1","broker":0,"queue":"issues","position":0,
		"reason":"r","reasonKind":"other","size":5000,"appliedSince":false,"headers":{"x-github-event":"issues"},"body":"{\"a\"","bodyCut":true,"ledger":null}]}`}}
	out, err := run(t, a, errorsCmd(t), "show", "d1", "-body-bytes", "4")
	require.NoError(t, err)
	require.Equal(t, "GET /api/v1/errors/d1?bodyBytes=4", a.requests[0])
	require.Contains(t, out, "body (first 4 of 5000 bytes)")
	require.Contains(t, out, "x-github-event: issues")
	require.Contains(t, out, "ledger:   no row")

	_, err = run(t, a, errorsCmd(t), "show", "zz")
	require.ErrorContains(t, err, `the API answered 404: no such message in the -error queues: "zz"`)
}

// requeue needs a filter or -all and sends the options; a queue not done fails the
// command after the counts are printed. purge needs -yes.
func TestRequeueAndPurgeAskForWhatTheyMove(t *testing.T) {
	run1 := `{"filter":"id=\"d1\"","dryRun":false,"matched":2,"outcomes":[{"queue":"issues","broker":0,"kind":"retries","requeued":1,"skipped":1,"purged":0,"alreadyCopied":0}],
		"skipped":[{"id":"d2","broker":0,"queue":"issues","position":1,"reason":"r","reasonKind":"retries","size":1,"appliedSince":true}],
		"errors":["copy message d3 to issues on broker 0: copy refused by the broker: returned 312 NO_ROUTE"]}`
	a := &api{t: t, answers: map[string]string{"POST /api/v1/errors/requeue": run1, "POST /api/v1/errors/purge": run1}}
	_, err := run(t, a, errorsCmd(t), "requeue")
	require.ErrorContains(t, err, "no filter given")
	require.Empty(t, a.requests)

	out, err := run(t, a, errorsCmd(t), "requeue", "-all", "-rate", "5", "-purge-applied")
	require.ErrorContains(t, err, "1 queue(s) not done")
	require.Equal(t, map[string]any{"rate": 5.0, "purgeApplied": true, "dryRun": false}, a.bodies[0])
	require.Regexp(t, `0\s+issues\s+retries\s+1\s+0\s+1\s+0`, out)
	require.Contains(t, out, "skipped d2")
	require.Contains(t, out, "NOT DONE: copy message d3")

	_, err = run(t, a, errorsCmd(t), "purge", "-reason", "malformed")
	require.ErrorContains(t, err, "say -yes")
	_, _ = run(t, a, errorsCmd(t), "purge", "-reason", "malformed", "-yes")
	require.Equal(t, map[string]any{"reason": "malformed", "confirm": true}, a.bodies[1])
}

// status reads the broker state and the -error counts and prints them at a glance.
func TestStatusPrintsTheStateAtAGlance(t *testing.T) {
	a := &api{t: t, answers: map[string]string{
		"GET /api/v1/broker": `{"brokers":[{"index":0,"host":"a.example","port":5671,"vhost":"vh","active":true},{"index":1,"host":"b.example","port":5671,"vhost":"vh"}],
			"activeIndex":0,"pendingSwitch":{"route":[{"index":1,"host":"b.example","vhost":"vh","switchedAt":"2026-12-01T10:00:00Z"}],"recordedAt":"2026-12-01T10:00:01Z"},
			"lastSwitch":{"from":1,"to":0,"completedAt":"2026-11-30T09:00:00Z","checks":3,"forced":true},
			"workflow":{"status":"Running","waiting":"Switch 0 → 1 waits: broker 0 is not drained yet map[issues:12]"},
			"windows":[{"workflowId":"queue-window-issues","activity":"Consume","attempt":1,"queue":"issues","broker":0,"worker":"w-1","since":"2026-12-01T10:00:00Z"}]}`,
		"GET /api/v1/errors": listing,
	}}
	out, err := run(t, a, func(args []string, getenv Getenv, o, e io.Writer) error {
		return Status(t.Context(), args, getenv, o, e)
	})
	require.NoError(t, err)
	for _, want := range []string{
		"active broker:  0 (a.example:5671/vh)",
		"pending switch: 0 → 1, recorded 2026-12-01T10:00:01Z",
		"waits for:    Switch 0 → 1 waits: broker 0 is not drained yet map[issues:12]",
		"last switch:    1 → 0 at 2026-11-30T09:00:00Z (forced)",
	} {
		require.Contains(t, out, want)
	}
	require.Regexp(t, `issues\s+0\s+Consume\s+w-1`, out)
	require.Regexp(t, `0\s+issues-error\s+3\s+2026-12-01T10:00:00Z`, out)
	require.True(t, strings.Contains(out, "NOT READ: broker 1"), out)
}
