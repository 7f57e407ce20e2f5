package testenv

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Held ports are outside the kernel's ephemeral range, distinct, refuse a client as a
// stopped server does, and are nobody else's until released.
func TestHeldPortsAreNobodyElsesUntilReleased(t *testing.T) {
	lo, hi := ephemeralRange()
	held, err := holdPorts(3)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, h := range held {
		require.False(t, h.port >= lo && h.port <= hi, "port %d is in the ephemeral range %d-%d", h.port, lo, hi)
		require.False(t, seen[h.port], "port %d held twice", h.port)
		seen[h.port] = true
		addr := "127.0.0.1:" + strconv.Itoa(h.port)
		_, err := net.Listen("tcp", addr)
		require.ErrorIs(t, err, syscall.EADDRINUSE, "a listener took held port %d", h.port)
		_, err = holdPort(h.port, false)
		require.ErrorIs(t, err, syscall.EADDRINUSE, "another hold took held port %d", h.port)
		_, err = net.Dial("tcp", addr)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
	releasePorts(held)
	for _, h := range held {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(h.port))
		require.NoError(t, err, "released port %d", h.port)
		require.NoError(t, l.Close())
	}
}

// A server's port is held again as soon as it stops, although its closed connections
// linger there in TIME_WAIT; held so, it still refuses clients and another binary's hold.
func TestAPortIsHeldAgainPastTheConnectionsItsServerClosed(t *testing.T) {
	held, err := holdPorts(1)
	require.NoError(t, err)
	port := held[0].port
	addr := "127.0.0.1:" + strconv.Itoa(port)
	releasePorts(held)

	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	client, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	accepted, err := l.Accept()
	require.NoError(t, err)
	require.NoError(t, accepted.Close()) // the server closes first: its side waits in TIME_WAIT
	_, err = client.Read(make([]byte, 1))
	require.Error(t, err)
	require.NoError(t, client.Close())
	require.NoError(t, l.Close())

	_, err = holdPort(port, false)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "the closed connection should linger in TIME_WAIT")
	again, err := holdPort(port, true)
	require.NoError(t, err)
	defer releasePorts([]portHold{again})
	_, err = net.Dial("tcp", addr)
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial a held port: %v", err)
	_, err = holdPort(port, false)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "another hold took the port held again")
}
