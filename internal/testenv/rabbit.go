// Package testenv is test support: it gives tests their own RabbitMQ vhost on
// the local broker. Production code never imports it.
package testenv

import (
	"crypto/rand"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// RabbitAddr is the local RabbitMQ the tests use, with guest/guest.
const RabbitAddr = "127.0.0.1:5672"

// NewVhost creates a fresh vhost on the local RabbitMQ, grants guest all
// permissions on it, deletes it when the test ends and returns its AMQP URL.
// It fails the test when RabbitMQ does not run (start it with
// `rabbitmq-server -detached`).
func NewVhost(t testing.TB) (amqpURL string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", RabbitAddr, 2*time.Second)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s (start it with `rabbitmq-server -detached`): %v", RabbitAddr, err)
	}
	conn.Close()

	vhost := "bs-test-" + strings.ToLower(rand.Text()[:10])
	rabbitmqctl(t, "add_vhost", vhost)
	t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", vhost) })
	rabbitmqctl(t, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
	return "amqp://guest:guest@" + RabbitAddr + "/" + url.PathEscape(vhost)
}

// CloseConnections makes RabbitMQ close every client connection to the vhost of
// amqpURL, as a broker restart would.
func CloseConnections(t testing.TB, amqpURL string) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatalf("parse AMQP URL: %v", err)
	}
	rabbitmqctl(t, "close_all_connections", "--vhost", strings.TrimPrefix(u.Path, "/"), "closed by test")
}

func rabbitmqctl(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", append([]string{"--quiet"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
