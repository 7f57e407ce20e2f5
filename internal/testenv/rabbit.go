package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// defaultRabbitAddr is the local RabbitMQ 3.10 the tests use, with guest/guest, managed
// with rabbitmqctl.
const defaultRabbitAddr = "127.0.0.1:5672"

// defaultRabbitAPI is the local 3.10's management API, which scripts/services.sh enables.
// NewVhost uses it when it answers: a request, where each rabbitmqctl boots an Erlang VM
// (about 0.9 s and half a CPU-second), three times a vhost, some 230 vhosts a make test.
const defaultRabbitAPI = "http://127.0.0.1:15672"

// RabbitEnv names another RabbitMQ for the tests: the URL of its management API, with
// guest/guest (scripts/rabbitmq4.sh's node: http://127.0.0.1:15673). Its AMQP listener is
// read from the API. Unset, the tests use the local 3.10 through rabbitmqctl.
const RabbitEnv = "BROKERSWITCH_TEST_RABBITMQ"

// QueueTypeEnv makes the tests that take it from QueueType declare queues of that type
// (classic when unset).
const QueueTypeEnv = "BROKERSWITCH_TEST_QUEUE_TYPE"

// QueueType is the queue type the tests declare: BROKERSWITCH_TEST_QUEUE_TYPE, else classic.
func QueueType() string {
	if t := os.Getenv(QueueTypeEnv); t != "" {
		return t
	}
	return "classic"
}

// RabbitAddr is the host:port of the RabbitMQ the tests use.
func RabbitAddr() string {
	api := os.Getenv(RabbitEnv)
	if api == "" {
		return defaultRabbitAddr
	}
	var overview struct {
		Listeners []struct {
			Protocol string `json:"protocol"`
			IP       string `json:"ip_address"`
			Port     int    `json:"port"`
		} `json:"listeners"`
	}
	if err := management(context.Background(), http.MethodGet, api, "/api/overview", nil, &overview); err != nil {
		panic(fmt.Sprintf("testenv: %s=%s: %v (start it with scripts/rabbitmq4.sh)", RabbitEnv, api, err))
	}
	for _, l := range overview.Listeners {
		if l.Protocol == "amqp" {
			ip := l.IP
			if ip == "::" || ip == "0.0.0.0" {
				ip = "127.0.0.1"
			}
			return net.JoinHostPort(ip, strconv.Itoa(l.Port))
		}
	}
	panic(fmt.Sprintf("testenv: %s=%s has no AMQP listener", RabbitEnv, api))
}

// NewVhost creates a fresh vhost on the local RabbitMQ, grants guest all
// permissions on it, deletes it when the test ends and returns its AMQP URL.
// It fails the test when RabbitMQ does not run (start it with
// `rabbitmq-server -detached`, or scripts/rabbitmq4.sh for RabbitMQ 4).
func NewVhost(t T) (amqpURL string) {
	t.Helper()
	addr := RabbitAddr()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s (start it with `make services`): %v", addr, err)
	}
	conn.Close()

	vhost := "bs-test-" + strings.ToLower(rand.Text()[:10])
	if api := vhostAPI(); api != "" {
		manage(t, api, http.MethodPut, "/api/vhosts/"+url.PathEscape(vhost), struct{}{})
		t.Cleanup(func() { manage(t, api, http.MethodDelete, "/api/vhosts/"+url.PathEscape(vhost), nil) })
		manage(t, api, http.MethodPut, "/api/permissions/"+url.PathEscape(vhost)+"/guest",
			map[string]string{"configure": ".*", "write": ".*", "read": ".*"})
	} else {
		rabbitmqctl(t, "add_vhost", vhost)
		t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", vhost) })
		rabbitmqctl(t, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
	}
	return "amqp://guest:guest@" + addr + "/" + url.PathEscape(vhost)
}

// CloseConnections makes RabbitMQ close every client connection to the vhost of
// amqpURL, as a broker restart would.
func CloseConnections(t T, amqpURL string) {
	t.Helper()
	vhost := VhostOf(t, amqpURL)
	api := os.Getenv(RabbitEnv)
	if api == "" {
		rabbitmqctl(t, "close_all_connections", "--vhost", vhost, "closed by test")
		return
	}
	var conns []struct {
		Name string `json:"name"`
	}
	// The management API lists a connection only once its stats arrived (every 5 s by
	// default): wait for those the test opened rather than close none.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := management(context.Background(), http.MethodGet, api, "/api/vhosts/"+url.PathEscape(vhost)+"/connections", nil, &conns); err != nil {
			t.Fatalf("list connections of %s: %v", vhost, err)
		}
		if len(conns) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range conns {
		manage(t, api, http.MethodDelete, "/api/connections/"+url.PathEscape(c.Name), nil)
	}
}

// Consumers lists, per queue, the consumer tags RabbitMQ reports on vhost.
func Consumers(t T, vhost string) map[string][]string {
	t.Helper()
	byQueue := map[string][]string{}
	if api := os.Getenv(RabbitEnv); api != "" {
		var list []struct {
			Tag   string `json:"consumer_tag"`
			Queue struct {
				Name string `json:"name"`
			} `json:"queue"`
		}
		if err := management(context.Background(), http.MethodGet, api, "/api/consumers/"+url.PathEscape(vhost), nil, &list); err != nil {
			t.Fatalf("list consumers of %s: %v", vhost, err)
		}
		for _, c := range list {
			byQueue[c.Queue.Name] = append(byQueue[c.Queue.Name], c.Tag)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "rabbitmqctl", "--quiet", "list_consumers", "-p", vhost,
			"queue_name", "consumer_tag", "channel_pid").Output()
		if err != nil {
			t.Fatalf("rabbitmqctl list_consumers: %v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			fields := strings.Split(sc.Text(), "\t")
			if len(fields) < 2 || fields[0] == "queue_name" {
				continue
			}
			byQueue[fields[0]] = append(byQueue[fields[0]], fields[1])
		}
	}
	for q := range byQueue {
		sort.Strings(byQueue[q])
	}
	return byQueue
}

// VhostOf is the vhost of an AMQP URL, unescaped.
func VhostOf(t T, amqpURL string) string {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatalf("parse AMQP URL: %v", err)
	}
	v, err := url.PathUnescape(strings.TrimPrefix(u.Path, "/"))
	if err != nil {
		t.Fatalf("parse AMQP URL: %v", err)
	}
	return v
}

// vhostAPI is the management API NewVhost makes vhosts through: RabbitEnv's, else the
// local 3.10's when it listens, else none (rabbitmqctl).
func vhostAPI() string {
	if api := os.Getenv(RabbitEnv); api != "" {
		return api
	}
	u, err := url.Parse(defaultRabbitAPI)
	if err != nil {
		return ""
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return ""
	}
	conn.Close()
	return defaultRabbitAPI
}

func rabbitmqctl(t T, args ...string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", append([]string{"--quiet"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func manage(t T, api, method, path string, body any) {
	t.Helper()
	if err := management(context.Background(), method, api, path, body, nil); err != nil {
		t.Fatalf("RabbitMQ management API: %v", err)
	}
}

// management calls RabbitMQ's management API at base with guest/guest, each request
// bounded in time (a loaded node answers slowly, but must answer).
func management(ctx context.Context, method, base, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path, rd)
	if err != nil {
		return err
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
