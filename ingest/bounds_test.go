package ingest

import (
	"math"
	"runtime"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nested wraps inner in depth levels of open (and its closing bracket).
func nested(open string, depth int, inner string) string {
	closing := map[string]string{"[": "]", `{"a":`: "}"}[open]
	return strings.Repeat(open, depth) + inner + strings.Repeat(closing, depth)
}

func decodeBody(event string, body []byte) (Event, error) {
	return Decode(amqp.Delivery{Headers: amqp.Table{HeaderEvent: event, HeaderDelivery: "d-1"}, Body: body})
}

// Bodies that nest deeper than maxNesting, as the review's 6 MB of "[" did, are refused
// before the decoder sees them: before, they overflowed the goroutine stack and killed
// the process. A body at the limit still decodes.
func TestDeepNestingIsRefused(t *testing.T) {
	const tooDeep = "body nests arrays and objects deeper than 64 levels"
	for _, tc := range []struct {
		name, event, body, wantErr string
	}{
		{"arrays in a typed field", "issues", `{"action":"opened","issue":` + nested("[", 3_000_000, "") + `}`, tooDeep},
		{"objects in a typed field", "issues", `{"action":"opened","issue":` + nested(`{"a":`, 1_000_000, "1") + `}`, tooDeep},
		{"arrays in a skipped field", "pull_request", `{"action":"opened","x":` + nested("[", 3_000_000, "") + `}`, tooDeep},
		{"arrays of an event without a table", "brand_new_event", `{"x":` + nested("[", 3_000_000, "") + `}`, tooDeep},
		{"arrays at the root", "issues", nested("[", 3_000_000, ""), tooDeep},
		{"unterminated arrays", "issues", `{"x":` + strings.Repeat("[", 3_000_000), tooDeep},
		{"brackets inside a string do not count", "brand_new_event", `{"x":"` + strings.Repeat(`[\"`, 1000) + `"}`, ""},
		{"at the limit", "brand_new_event", `{"x":` + nested("[", maxNesting-1, "") + `}`, ""},
		{"one past the limit", "brand_new_event", `{"x":` + nested("[", maxNesting, "") + `}`, tooDeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeBody(tc.event, []byte(tc.body))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestInvalidUTF8IsRefused(t *testing.T) {
	body := []byte(`{"action":"opened","issue":{"title":"caf` + "\xe9" + `"}}`)
	_, err := decodeBody("issues", body)
	require.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), "body is not valid UTF-8 (first invalid byte at offset 40)")
}

// allocated returns the bytes allocated while decoding body: the least of three decodes,
// since TotalAlloc also counts what the process's other goroutines (the package's
// descriptor watch, its connection pools) allocate meanwhile, and they only ever add.
func allocated(t *testing.T, event string, body []byte) uint64 {
	t.Helper()
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _ = decodeBody(event, body)
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// allocationBound is the most a decode may allocate, in bodies. The short repositories
// take the most: 3.36 bodies, and 3.73 to 4.05 under the race detector, where sync.Pool
// drops what it would have handed back (make test runs under it), so the bound is 4.5
// there: a small multiple either way, where the shape that took 150 would still fail.
func allocationBound() float64 {
	if raceDetector {
		return 4.5
	}
	return 4
}

// Decoding allocates a small multiple of the body, whatever its shape: a list of empty
// repositories took 150 times its size before, 3.8 GB for a 25 MB message.
func TestDecodingMemoryIsBoundedByTheBody(t *testing.T) {
	const n = 500_000
	install := `{"action":"created","installation":{"id":1},"repositories":[`
	for _, tc := range []struct {
		name, event, body string
		wantErr           string
	}{
		{"empty repositories", "installation", install + strings.Repeat(`{},`, n) + `{}]}`, "more than one per 64 bytes"},
		{"repositories with only an id", "installation", install + strings.Repeat(`{"id":1},`, n) + `{}]}`, "more than one per 64 bytes"},
		{"repositories padded with spaces", "installation", install + strings.Repeat(`{"id":1}`+strings.Repeat(" ", 56)+`,`, n/10) + `{}]}`, ""},
		{"short repositories", "installation_repositories",
			`{"action":"added","installation":{"id":1},"repositories_added":[` +
				strings.Repeat(`{"id":12,"node_id":"R_1","name":"a","full_name":"o/a","private":false},`, n/10) + `{}]}`, ""},
		{"wide array of commits", "push", `{"ref":"r","repository":{"id":1},"commits":[` + strings.Repeat(`{},`, n) + `{}]}`, ""},
		{"wide skipped array", "push", `{"ref":"r","repository":{"id":1},"x":[` + strings.Repeat(`[],`, n) + `[]]}`, ""},
		{"one long string", "push", `{"ref":"` + strings.Repeat("a", 3*n) + `","repository":{"id":1}}`, ""},
		{"escapes", "push", `{"ref":"` + strings.Repeat(`\u00e9`, n) + `","repository":{"id":1}}`, ""},
		{"repeated keys", "push", `{` + strings.Repeat(`"ref":"abcdefgh",`, n/4) + `"repository":{"id":1}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeBody(tc.event, []byte(tc.body))
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrMalformed)
				assert.Contains(t, err.Error(), tc.wantErr)
			}
			got := allocated(t, tc.event, []byte(tc.body))
			// 176/64 for a kept repository, and the decoder's copies of strings.
			assert.LessOrEqual(t, got, uint64(allocationBound()*float64(len(tc.body)))+1<<16, "allocated %d bytes for a body of %d", got, len(tc.body))
		})
	}
}

// A list keeps the elements that have an id, in order, and reads null as none.
func TestRepositoryListKeepsElementsWithAnID(t *testing.T) {
	body := `{"action":"added","installation":{"id":9},"repositories_added":[` +
		`{"id":1,"node_id":"R_kgDOAAAAAQ","name":"a","full_name":"octocat/a","private":true,"html_url":"https://github.com/octocat/a"}, {}, ` +
		`{"id":2,"node_id":"R_kgDOAAAAAg","name":"b","full_name":"octocat/b","private":false,"html_url":"https://github.com/octocat/b"}],"repositories_removed":null}`
	ev, err := decodeBody("installation_repositories", []byte(body))
	require.NoError(t, err)
	require.Len(t, ev.Payload.RepositoriesAdded, 2)
	assert.Equal(t, int64(1), ev.Payload.RepositoriesAdded[0].ID)
	assert.True(t, ev.Payload.RepositoriesAdded[0].Private)
	assert.Equal(t, "octocat/b", ev.Payload.RepositoriesAdded[1].FullName)
	assert.Nil(t, ev.Payload.RepositoriesRemoved)

	_, err = decodeBody("installation_repositories", []byte(`{"installation":{"id":9},"repositories_added":{"id":1}}`))
	require.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), "body does not match the installation_repositories payload")
}
