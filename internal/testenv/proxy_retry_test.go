//go:build integration

package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// A client that retries through a silent link (amqp091-go redialing, pgx's pool, a health
// probe) opens a connection, says its first words, waits a while for an answer and gives
// up. A silent link carries none of it to the server, so once each attempt gave up the
// proxy holds nothing for it, however many attempts there were; and a client still
// waiting when the link speaks again is answered.
func TestAClientRetryingThroughASilentLinkLeavesNothingOpen(t *testing.T) {
	for _, svc := range []struct {
		name, target string
		hello        []byte // the client's first words, which the server answers at once
	}{
		{"RabbitMQ", RabbitAddr(), []byte("AMQP\x00\x00\x09\x01")},
		{"Postgres", postgresAddr(), []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}}, // SSLRequest
	} {
		t.Run(svc.name, func(t *testing.T) {
			p := NewProxy(t, svc.target)
			answer := func(within time.Duration) error {
				c, err := net.DialTimeout("tcp", p.Addr(), within)
				if err != nil {
					return err
				}
				defer c.Close()
				return hello(c, svc.hello, within)
			}
			if err := answer(5 * time.Second); err != nil {
				t.Fatalf("%s does not answer through the proxy: %v", svc.name, err)
			}
			// That connection's close must have passed before the silence, which would
			// hold it.
			if err := WaitUntil(context.Background(), 10*time.Second, "the first connection closed", func() (bool, error) {
				return proxyHolds(p) == 0, nil
			}); err != nil {
				t.Fatal(err)
			}

			p.Silence()
			before := countDescriptors("self")
			const attempts = 40
			for i := 1; i <= attempts; i++ {
				if err := answer(100 * time.Millisecond); !isTimeout(err) {
					t.Fatalf("attempt %d through the silent link: %v, want a timeout", i, err)
				}
				if i%10 == 0 {
					t.Logf("%s: %d attempts through the silent link, %d descriptors (%+d): %s",
						svc.name, i, countDescriptors("self"), countDescriptors("self")-before, DescribeDescriptors("self"))
				}
			}
			err := WaitUntil(context.Background(), 10*time.Second, "the proxy to let go of the attempts", func() (bool, error) {
				n := countDescriptors("self")
				return n <= before+4, fmt.Errorf("%d descriptors, %d before the attempts: %s", n, before, DescribeDescriptors("self"))
			})
			if err != nil {
				t.Fatal(err)
			}

			waiting := make(chan error, 1)
			go func() { waiting <- answer(30 * time.Second) }()
			err = WaitUntil(context.Background(), 10*time.Second, "the waiting client to be accepted", func() (bool, error) {
				return proxyHolds(p) == 1, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			p.Speak()
			if err := <-waiting; err != nil {
				t.Fatalf("a client waiting through the silence is not answered once the link speaks: %v", err)
			}
		})
	}
}

// hello sends a protocol's first words on c and reads the start of the answer within.
func hello(c net.Conn, words []byte, within time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(within)); err != nil {
		return err
	}
	if _, err := c.Write(words); err != nil {
		return err
	}
	_, err := io.ReadFull(c, make([]byte, 1))
	return err
}

// postgresAddr is the host:port of the Postgres the tests use (pgConnectAdmin's).
func postgresAddr() string {
	if u, err := url.Parse(os.Getenv(PostgresAdminDSNEnv)); err == nil && u.Host != "" {
		return u.Host
	}
	return "127.0.0.1:5432"
}
