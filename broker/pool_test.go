//go:build integration

package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

func TestPoolSharesOneConnectionPerBroker(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	ctx := context.Background()

	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			ch, err := r.pool.Channel(ctx, 0)
			if err != nil {
				errs <- err
				return
			}
			_, err = ch.QueueDeclarePassive("amq.rabbitmq.trace", true, false, false, false, nil)
			if isCode(err, amqp.NotFound) {
				err = nil
			}
			errs <- errors.Join(err, ch.Close())
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for range 20 {
		ch, err := r.pool.Channel(ctx, 0)
		require.NoError(t, err)
		require.NoError(t, ch.Close())
	}
	assert.Equal(t, 1, r.connections())
	assert.NotContains(t, r.logs.String(), "guest:guest")
}

func TestPoolRedialsAfterTheBrokerClosedTheConnection(t *testing.T) {
	t.Parallel()
	r := newRabbit(t)
	ctx := context.Background()
	r.declare(Topology{Queues: []string{"issues"}, RetryTTL: time.Minute})
	require.Equal(t, 1, r.connections())

	// A consumer in progress must end with an error when the connection goes.
	done := r.consume(ctx, "issues", ConsumeOptions{Prefetch: testPrefetch}, &recorder{})
	require.Eventually(t, func() bool { return consumers(r, "issues") == 1 }, waitFor, 20*time.Millisecond)

	testenv.CloseConnections(t, r.url)
	err := waitDone(t, done)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "consume issues on #0 "+testenv.RabbitAddr()+"/bs-test-")
	assert.NotContains(t, err.Error(), "guest:guest")

	require.Eventually(t, func() bool {
		ch, err := r.pool.Channel(ctx, 0)
		if err != nil {
			return false
		}
		ch.Close()
		return r.connections() == 2
	}, waitFor, 20*time.Millisecond)
	r.publish("issues", "after-restart")
	assert.Equal(t, 1, r.count("issues"))
	// The pool's watcher logs the loss on its own goroutine, maybe after the redial.
	require.Eventually(t, func() bool { return strings.Contains(r.logs.String(), "broker connection lost") },
		waitFor, 20*time.Millisecond, "the lost connection was never logged:\n%s", r.logs)
}

// consumers returns the consumer count of queue, or -1 when it cannot tell.
// It runs inside require.Eventually, so it must not fail the test itself.
func consumers(r *rabbit, queue string) int {
	ch, err := r.pool.Channel(context.Background(), 0)
	if err != nil {
		return -1
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return -1
	}
	return q.Consumers
}

func TestPoolDialErrorHidesThePassword(t *testing.T) {
	t.Parallel()
	url := testenv.NewVhost(t)
	eps, err := ParseEndpoints(strings.Replace(url, "guest:guest", "guest:wrongpassword", 1))
	require.NoError(t, err)
	pool := NewPool(eps, nil, PoolSettings{})
	defer pool.Close()

	_, err = pool.Channel(context.Background(), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connect to #0 "+testenv.RabbitAddr()+"/bs-test-")
	assert.NotContains(t, err.Error(), "wrongpassword")

	_, err = pool.Channel(context.Background(), 7)
	assert.ErrorContains(t, err, "broker #7 is not configured")

	require.NoError(t, pool.Close())
	_, err = pool.Channel(context.Background(), 0)
	assert.ErrorIs(t, err, ErrPoolClosed)
}

func TestPoolChannelHonorsContext(t *testing.T) {
	t.Parallel()
	eps, err := ParseEndpoints("amqp://u:p@127.0.0.1:5672/")
	require.NoError(t, err)
	pool := NewPool(eps, nil, PoolSettings{})
	defer pool.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = pool.Channel(ctx, 0)
	assert.ErrorIs(t, err, context.Canceled)
}

// A broker that offers no SASL mechanism the client speaks (here only EXTERNAL) fails the
// dial; the socket must close with it, not stay open until the dial's deadline: a worker
// that redials a misconfigured broker would otherwise hold one more socket every try.
func TestPoolClosesTheSocketOfAFailedHandshake(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	closed := make(chan time.Duration, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		header := make([]byte, 8) // "AMQP" 0 0 9 1
		if _, err := io.ReadFull(c, header); err != nil {
			return
		}
		if _, err := c.Write(connectionStart("EXTERNAL")); err != nil {
			return
		}
		answered := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, _ = io.Copy(io.Discard, c) // until the client closes
		closed <- time.Since(answered)
	}()
	eps, err := ParseEndpoints("amqp://guest:guest@" + l.Addr().String() + "/")
	require.NoError(t, err)
	pool := NewPool(eps, nil, PoolSettings{})
	defer pool.Close()

	_, err = pool.Channel(context.Background(), 0)
	require.ErrorContains(t, err, "SASL")
	select {
	case after := <-closed:
		require.Less(t, after, 2*time.Second, "the socket closed only at the dial's deadline")
	case <-time.After(dialTimeout + 5*time.Second):
		t.Fatal("the socket of the failed handshake stayed open")
	}
}

// connectionStart is an AMQP 0-9-1 connection.start frame offering mechanisms.
func connectionStart(mechanisms string) []byte {
	var payload []byte
	payload = binary.BigEndian.AppendUint16(payload, 10) // class connection
	payload = binary.BigEndian.AppendUint16(payload, 10) // method start
	payload = append(payload, 0, 9)                      // version 0-9
	payload = binary.BigEndian.AppendUint32(payload, 0)  // server properties: an empty table
	payload = binary.BigEndian.AppendUint32(payload, uint32(len(mechanisms)))
	payload = append(payload, mechanisms...)
	payload = binary.BigEndian.AppendUint32(payload, 5)
	payload = append(payload, "en_US"...)
	frame := []byte{1, 0, 0} // a method frame on channel 0
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
	frame = append(frame, payload...)
	return append(frame, 0xCE)
}

// Once connected, the heartbeat is the one the broker agreed to: the URL's parameter over
// PoolSettings.Heartbeat, the lower of the two offers.
func TestPoolKnowsTheHeartbeatItNegotiated(t *testing.T) {
	t.Parallel()
	url := testenv.NewVhost(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	eps, err := ParseEndpoints(url + "," + testenv.NewVhost(t) + sep + "heartbeat=7")
	require.NoError(t, err)
	pool := NewPool(eps, nil, PoolSettings{Heartbeat: 4 * time.Second})
	t.Cleanup(func() { _ = pool.Close() })
	for i := range eps {
		ch, err := pool.Channel(context.Background(), i)
		require.NoError(t, err)
		require.NoError(t, ch.Close())
	}
	require.Equal(t, 4*time.Second, pool.NegotiatedHeartbeat(0))
	require.Equal(t, 7*time.Second, pool.NegotiatedHeartbeat(1), "the URL's")
}
