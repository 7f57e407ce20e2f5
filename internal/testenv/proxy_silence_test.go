package testenv

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A silenced proxy holds what either side sends without closing anything, and delivers it
// once it speaks again.
func TestASilencedProxyHoldsTrafficWithoutClosing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, _ = io.Copy(c, c) // echo
		}
	}()
	p := NewProxy(t, l.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	echo := func(within time.Duration) (string, error) {
		buf := make([]byte, 2)
		_ = c.SetReadDeadline(time.Now().Add(within))
		_, err := io.ReadFull(c, buf)
		return string(buf), err
	}

	_, err = c.Write([]byte("a1"))
	require.NoError(t, err)
	got, err := echo(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "a1", got)

	p.Silence()
	_, err = c.Write([]byte("b2"))
	require.NoError(t, err, "the link is silent, not closed")
	_, err = echo(300 * time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "nothing comes back, and nothing closes: %v", err)

	p.Speak()
	got, err = echo(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "b2", got)
}
