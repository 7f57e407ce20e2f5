package ingest

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/payloads"
)

func TestDecode(t *testing.T) {
	opened := example(t, "pull_request.opened.0")
	tests := []struct {
		name       string
		headers    amqp.Table
		body       []byte
		wantErr    string // substring of the error; empty means no error
		wantID     string
		wantAction string
		wantTyped  bool
	}{
		{
			name:    "string headers",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: "d-1"},
			body:    opened, wantID: "d-1", wantAction: "opened", wantTyped: true,
		},
		{
			name:    "byte headers",
			headers: amqp.Table{HeaderEvent: []byte("pull_request"), HeaderDelivery: []byte("d-2")},
			body:    opened, wantID: "d-2", wantAction: "opened", wantTyped: true,
		},
		{
			name:    "missing delivery header",
			headers: amqp.Table{HeaderEvent: "pull_request"},
			body:    opened, wantErr: "missing header x-github-delivery",
		},
		{
			name:    "missing event header",
			headers: amqp.Table{HeaderDelivery: "d-3"},
			body:    opened, wantErr: "missing header x-github-event", wantID: "d-3",
		},
		{
			name:    "empty delivery header",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: ""},
			body:    opened, wantErr: "empty header x-github-delivery",
		},
		{
			name:    "non-string header",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: int64(7)},
			body:    opened, wantErr: "header x-github-delivery is a int64, want a string",
		},
		{
			name:    "control character in delivery id",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: "d\x00"},
			body:    opened, wantErr: "non-printable",
		},
		{
			name:    "event name that is not GitHub's",
			headers: amqp.Table{HeaderEvent: "Pull Request", HeaderDelivery: "d-4"},
			body:    opened, wantErr: "is not a GitHub event name", wantID: "d-4",
		},
		{
			name:    "invalid JSON",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: "d-5"},
			body:    []byte(`{"action": "opened",`), wantErr: "body is not valid JSON: unexpected end of JSON input", wantID: "d-5",
		},
		{
			name:    "JSON that is not an object",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: "d-6"},
			body:    []byte(`[1, 2]`), wantErr: "body is not a JSON object", wantID: "d-6",
		},
		{
			name:    "payload of the wrong shape",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: "d-7"},
			body:    []byte(`{"action": "opened", "number": "seven"}`), wantErr: "body does not match the pull_request payload", wantID: "d-7",
		},
		{
			name:    "payload without the entity",
			headers: amqp.Table{HeaderEvent: "pull_request", HeaderDelivery: "d-8"},
			body:    example(t, "push.none.0"), wantErr: "pull_request event: no pull_request.node_id", wantID: "d-8",
		},
		{
			name:    "event unknown to go-github is not malformed",
			headers: amqp.Table{HeaderEvent: "brand_new_event", HeaderDelivery: "d-9"},
			body:    []byte(`{"action": "happened", "sender": {"id": 5, "login": "someone"}}`), wantID: "d-9", wantAction: "happened",
		},
		{
			name:    "event without a table: only its action and sender are read",
			headers: amqp.Table{HeaderEvent: "check_run", HeaderDelivery: "d-10"},
			body:    example(t, "check_run.created.0"), wantID: "d-10", wantAction: "created",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Decode(amqp.Delivery{Headers: tt.headers, Body: tt.body})
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrMalformed)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Equal(t, tt.wantID, ev.DeliveryID, "delivery id kept for the ledger")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantID, ev.DeliveryID)
			assert.Equal(t, tt.wantAction, ev.Action)
			assert.Equal(t, tt.wantTyped, ev.Payload != nil)
			assert.NotNil(t, ev.Sender)
		})
	}
}

func TestDecodeOptionalHeadersAndTypedPayload(t *testing.T) {
	d := delivery("push", "d-1", example(t, "push.none.0"))
	d.Headers[headerHookID] = "123"
	d.Headers[headerHookTargetID] = []byte("456")
	d.Headers[headerHookTargetType] = "repository"
	ev, err := Decode(d)
	require.NoError(t, err)
	assert.Equal(t, "123", ev.HookID)
	assert.Equal(t, "456", ev.HookTargetID)
	assert.Equal(t, "repository", ev.HookTargetType)
	assert.Empty(t, ev.Action, "push has no action")
	require.NotNil(t, ev.Payload)
	assert.Equal(t, "refs/tags/simple-tag", ev.Payload.Ref)
	assert.Equal(t, "Codertocat", ev.Sender.login())
}

func TestDecodeEveryVendoredPayload(t *testing.T) {
	for _, e := range payloads.All() {
		ev, err := Decode(delivery(e.Event, "d-"+e.Name, e.Body))
		require.NoError(t, err, e.Name)
		assert.Equal(t, e.Action, ev.Action, e.Name)
		assert.Equal(t, appliers[e.Event] != nil, ev.Payload != nil, "%s: decoded in full when it has a table", e.Name)
	}
}

func TestRetryCycles(t *testing.T) {
	tests := []struct {
		name   string
		deaths any
		want   int
	}{
		{"no header", nil, 0},
		{"first trip", []any{amqp.Table{"queue": "issues", "reason": "rejected", "count": int64(1)}}, 1},
		{"retry sibling entry is not a cycle", []any{
			amqp.Table{"queue": "issues-retry", "reason": "expired", "count": int64(3)},
			amqp.Table{"queue": "issues", "reason": "rejected", "count": int64(2)},
		}, 2},
		{"other queue", []any{amqp.Table{"queue": "pushes", "reason": "rejected", "count": int64(4)}}, 0},
		{"other reason", []any{amqp.Table{"queue": "issues", "reason": "expired", "count": int64(4)}}, 0},
		{"byte strings and int32", []any{amqp.Table{"queue": []byte("issues"), "reason": []byte("rejected"), "count": int32(3)}}, 3},
		{"typed table slice", []amqp.Table{{"queue": "issues", "reason": "rejected", "count": int64(5)}}, 5},
		{"garbage is ignored", "not a list", 0},
		{"entry without count is ignored", []any{amqp.Table{"queue": "issues", "reason": "rejected"}}, 0},
		// Forged or odd counts neither retry forever nor wrap around: they read as used up.
		{"negative count", []any{amqp.Table{"queue": "issues", "reason": "rejected", "count": int64(-5)}}, maxRetryCount},
		{"huge count", []any{amqp.Table{"queue": "issues", "reason": "rejected", "count": int64(1) << 62}}, maxRetryCount},
		{"count past int64", []any{amqp.Table{"queue": "issues", "reason": "rejected", "count": uint64(1) << 63}}, maxRetryCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := delivery("issues", "d-1", example(t, "issues.opened.0"))
			if tt.deaths != nil {
				d.Headers["x-death"] = tt.deaths
			}
			ev, err := Decode(d)
			require.NoError(t, err)
			assert.Equal(t, tt.want, ev.retryCycles("issues"))
		})
	}
}

func TestRetryCyclesSurviveMalformed(t *testing.T) {
	d := withDeaths(delivery("issues", "d-1", []byte("{")), "issues", 2)
	ev, err := Decode(d)
	require.ErrorIs(t, err, ErrMalformed)
	assert.Equal(t, 2, ev.retryCycles("issues"))
}

// A message moved back from -error keeps its count through our own header, also where the
// broker ignores the x-death a client publishes (RabbitMQ 4.x): the larger one counts.
func TestRetryCyclesFallBackToOurHeader(t *testing.T) {
	d := delivery("issues", "d-1", example(t, "issues.opened.0"))
	d.Headers[broker.HeaderRetryCycles] = int64(10)
	ev, err := Decode(d)
	require.NoError(t, err)
	assert.Equal(t, 10, ev.retryCycles("issues"), "no x-death (4.x dropped the client's): our header counts")

	d = withDeaths(d, "issues", 12)
	ev, err = Decode(d)
	require.NoError(t, err)
	assert.Equal(t, 12, ev.retryCycles("issues"), "the broker's count where it is larger")

	d.Headers[broker.HeaderRetryCycles] = int64(-1)
	ev, err = Decode(d)
	require.NoError(t, err)
	assert.Equal(t, maxRetryCount, ev.retryCycles("issues"), "a forged header of ours is used up too")
}
