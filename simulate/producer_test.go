//go:build integration

package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// fakeAPI records the notifications it receives and answers like brokerswitch.
type fakeAPI struct {
	mu       sync.Mutex
	bodies   []map[string]string
	auth     []string
	answered []int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var body map[string]string
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	status, outcome := http.StatusAccepted, "recorded"
	if body["host"] == UnknownHost {
		status = http.StatusNotFound
	}
	f.answered = append(f.answered, status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"outcome": outcome})
}

func (f *fakeAPI) hosts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.bodies {
		out = append(out, b["vhost"]+"@"+b["switchedAt"])
	}
	return out
}

// vhosts makes n brokers, each a fresh vhost.
func vhosts(t *testing.T, n int) []broker.Endpoint {
	t.Helper()
	var urls []string
	for range n {
		urls = append(urls, testenv.NewVhost(t))
	}
	eps, err := broker.ParseEndpoints(strings.Join(urls, ","))
	require.NoError(t, err)
	return eps
}

func newProducer(t *testing.T, brokers int, modify func(*Config)) (*Producer, []broker.Endpoint, *fakeAPI, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	return newProducerOn(t, vhosts(t, brokers), modify)
}

func newProducerOn(t *testing.T, eps []broker.Endpoint, modify func(*Config)) (*Producer, []broker.Endpoint, *fakeAPI, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	var logBuf, out bytes.Buffer
	cfg := Config{
		Brokers: eps, RetryTTL: 2 * time.Second, APIURL: srv.URL, Token: "tok-secret", Log: &logBuf,
		Logger: slog.New(slog.NewTextHandler(&out, nil)),
	}
	if modify != nil {
		modify(&cfg)
	}
	p, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, eps, api, &logBuf, &out
}

// TestProducerPublishesTheMessageContract: the queues are declared with RETRY_TTL, and
// each message is persistent JSON with both headers, on the active broker.
func TestProducerPublishesTheMessageContract(t *testing.T) {
	p, eps, _, logBuf, out := newProducer(t, 1, nil)
	ctx := context.Background()
	msgs, err := Workload{PullRequests: 1, Issues: 1, Pushes: 1, Installations: 1, Poison: 3, Seed: 3}.Messages()
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, msgs...))

	pool := broker.NewPool(eps, nil, broker.PoolSettings{})
	defer pool.Close()
	// The same topology declares again; another RETRY_TTL is a mismatch.
	require.NoError(t, pool.DeclareTopology(ctx, 0, broker.Topology{Queues: DefaultQueues, RetryTTL: 2 * time.Second}))
	require.ErrorIs(t, pool.DeclareTopology(ctx, 0, broker.Topology{Queues: DefaultQueues, RetryTTL: time.Second}), broker.ErrTopologyMismatch)

	ch, err := pool.Channel(ctx, 0)
	require.NoError(t, err)
	defer ch.Close()
	byQueue := map[string][]Message{}
	for _, m := range msgs {
		byQueue[m.Queue] = append(byQueue[m.Queue], m)
	}
	for q, want := range byQueue {
		for _, m := range want {
			d, ok, err := ch.Get(q, true)
			require.NoError(t, err)
			require.True(t, ok, "%s holds %s", q, m.DeliveryID)
			require.Equal(t, m.DeliveryID, d.MessageId, "queue order is publish order")
			require.Equal(t, "application/json", d.ContentType)
			require.EqualValues(t, 2, d.DeliveryMode, "persistent")
			require.Equal(t, m.Body, d.Body)
			if m.Poison != PoisonMissingEvent {
				require.Equal(t, m.Event, d.Headers[HeaderEvent])
			} else {
				require.NotContains(t, d.Headers, HeaderEvent)
			}
			if m.Poison != PoisonMissingDelivery {
				require.Equal(t, m.DeliveryID, d.Headers[HeaderDelivery])
			} else {
				require.NotContains(t, d.Headers, HeaderDelivery)
			}
		}
	}

	l, err := ReadLog(logBuf)
	require.NoError(t, err)
	require.Equal(t, p.Records(), l.Published)
	require.Len(t, l.Published, len(msgs))
	for i, r := range l.Published {
		require.EqualValues(t, i+1, r.Seq)
		require.Equal(t, msgs[i].DeliveryID, r.Delivery)
		require.Equal(t, msgs[i].Poison != "", r.Poison)
		require.Equal(t, 0, r.Broker)
	}
	require.NotContains(t, out.String(), "guest:guest")
}

// TestProducerNamesItsConnectionsAndAddsHeaders: ConnectionName is what RabbitMQ lists for
// the producer's connection, and a message's Extra headers travel beside the contract's.
func TestProducerNamesItsConnectionsAndAddsHeaders(t *testing.T) {
	if os.Getenv(testenv.RabbitEnv) != "" {
		t.Skip("lists connections with rabbitmqctl, which manages the local RabbitMQ only")
	}
	p, eps, _, _, _ := newProducer(t, 1, func(c *Config) { c.ConnectionName = "simulate-test" })
	ctx := context.Background()
	msgs, err := Workload{Pushes: 1}.Messages()
	require.NoError(t, err)
	msgs[0].Extra = amqp.Table{broker.HeaderRetryCycles: int64(2)}
	require.NoError(t, p.Publish(ctx, msgs...))

	out, err := exec.Command("rabbitmqctl", "--quiet", "list_connections", "vhost", "client_properties", "--formatter", "json").Output()
	require.NoError(t, err)
	var conns []struct {
		Vhost            string          `json:"vhost"`
		ClientProperties json.RawMessage `json:"client_properties"`
	}
	require.NoError(t, json.Unmarshal(out, &conns))
	var names []string
	for _, c := range conns {
		if c.Vhost == eps[0].Vhost {
			names = append(names, string(c.ClientProperties))
		}
	}
	require.Len(t, names, 1, "one connection on the producer's vhost")
	require.Contains(t, names[0], `"simulate-test"`)
	require.NotContains(t, names[0], `"brokerswitch"`)

	pool := broker.NewPool(eps, nil, broker.PoolSettings{})
	defer pool.Close()
	ch, err := pool.Channel(ctx, 0)
	require.NoError(t, err)
	defer ch.Close()
	d, ok, err := ch.Get(msgs[0].Queue, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 2, d.Headers[broker.HeaderRetryCycles])
	require.Equal(t, msgs[0].Event, d.Headers[HeaderEvent])
	require.Equal(t, msgs[0].DeliveryID, d.Headers[HeaderDelivery])
}

// TestProducerRotatesAndNotifies: after RotateAfter messages the producer moves to the
// next broker and tells brokerswitch, with the token, the host and vhost it went to.
func TestProducerRotatesAndNotifies(t *testing.T) {
	p, eps, api, logBuf, out := newProducer(t, 3, func(c *Config) { c.RotateAfter = 4; c.NotifyUnknown = true })
	ctx := context.Background()
	msgs, err := Workload{Pushes: 10}.Messages()
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, msgs[:3]...))
	require.NoError(t, p.Publish(ctx, msgs[3:]...))
	require.Equal(t, 2, p.Active())

	var brokers []int
	for _, r := range p.Records() {
		brokers = append(brokers, r.Broker)
	}
	require.Equal(t, []int{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}, brokers)
	l, err := ReadLog(logBuf)
	require.NoError(t, err)
	require.Len(t, l.Rotations, 2)
	require.EqualValues(t, 4, l.Rotations[0].AfterSeq)
	require.Equal(t, 1, l.Rotations[0].To)

	hosts := api.hosts()
	require.Len(t, hosts, 4, "each rotation is notified, and an unknown endpoint after it")
	require.True(t, strings.HasPrefix(hosts[0], eps[1].Vhost+"@"))
	require.True(t, strings.HasPrefix(hosts[1], "nowhere@"))
	require.True(t, strings.HasPrefix(hosts[2], eps[2].Vhost+"@"))
	for _, a := range api.auth {
		require.Equal(t, "Bearer tok-secret", a)
	}
	require.Equal(t, []int{202, 404, 202, 404}, api.answered)
	require.Len(t, l.Notifications, 4)
	require.Equal(t, "recorded", l.Notifications[0].Outcome)
	require.Empty(t, l.Notifications[1].Error, "404 is the expected answer for an unknown endpoint")
	require.NotContains(t, out.String(), "tok-secret")
	require.NotContains(t, logBuf.String(), "tok-secret")
}

// TestProducerNotifyModes: twice, late and reverse change when notifications go out.
func TestProducerNotifyModes(t *testing.T) {
	ctx := context.Background()
	shared := vhosts(t, 3)
	for _, tc := range []struct {
		mode NotifyMode
		// after the two rotations, then after Flush: the vhost index of each notification
		afterRotations, afterFlush []int
	}{
		{NotifyTwice, []int{1, 1, 2, 2}, []int{1, 1, 2, 2}},
		{NotifyLate, []int{1}, []int{1, 2}},
		{NotifyReverse, nil, []int{2, 1}},
		{NotifyNone, nil, nil},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			p, eps, api, _, _ := newProducerOn(t, shared, func(c *Config) { c.Notify = tc.mode })
			vhostIndex := func() []int {
				var out []int
				for _, h := range api.hosts() {
					for i, ep := range eps {
						if strings.HasPrefix(h, ep.Vhost+"@") {
							out = append(out, i)
						}
					}
				}
				return out
			}
			n1, err := p.Rotate(ctx, 1)
			require.NoError(t, err)
			n2, err := p.Rotate(ctx, 2)
			require.NoError(t, err)
			require.True(t, n2.SwitchedAt.After(n1.SwitchedAt) || n2.SwitchedAt.Equal(n1.SwitchedAt))
			require.Equal(t, tc.afterRotations, vhostIndex())
			require.NoError(t, p.Flush(ctx))
			require.Equal(t, tc.afterFlush, vhostIndex())
		})
	}
}

func TestParseNotifyMode(t *testing.T) {
	for _, s := range []string{"now", "twice", "late", "reverse", "none"} {
		m, err := ParseNotifyMode(s)
		require.NoError(t, err)
		require.Equal(t, NotifyMode(s), m)
	}
	_, err := ParseNotifyMode("sometimes")
	require.Error(t, err)
}

// TestMainRunsAgainstABroker: the subcommand publishes the workload and writes its log;
// its output never shows the password.
func TestMainRunsAgainstABroker(t *testing.T) {
	url := testenv.NewVhost(t)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	env := map[string]string{"RABBITMQ_CONNECTION_STRINGS": url, "RETRY_TTL": "3s"}
	err := Main(context.Background(), []string{"-pull-requests", "2", "-issues", "1", "-pushes", "3", "-branches", "1",
		"-installations", "1", "-ignored", "1", "-poison", "2", "-log", dir + "/run.jsonl"},
		func(k string) string { return env[k] }, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	require.NotContains(t, stderr.String(), "guest:guest")
	require.Contains(t, stderr.String(), "done")

	f, err := openFile(dir + "/run.jsonl")
	require.NoError(t, err)
	defer f.Close()
	l, err := ReadLog(f)
	require.NoError(t, err)
	want := Workload{PullRequests: 2, Issues: 1, Pushes: 3, Branches: 1, Installations: 1, Ignored: 1, Poison: 2}.Total()
	require.Len(t, l.Published, want)

	var help bytes.Buffer
	require.NoError(t, Main(context.Background(), []string{"-h"}, func(string) string { return url }, &stdout, &help))
	require.Contains(t, help.String(), "-rotate-after")
	require.NotContains(t, help.String(), "guest:guest", "the help never prints the configured URLs")
	require.Error(t, Main(context.Background(), []string{"-api", "http://127.0.0.1:1"}, func(k string) string { return env[k] }, &stdout, io.Discard),
		"notifying needs a token")
}

func openFile(path string) (*os.File, error) { return os.Open(path) }
