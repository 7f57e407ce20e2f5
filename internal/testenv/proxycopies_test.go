package testenv

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// frame is one AMQP 0-9-1 frame: type, channel, size, payload, frame-end.
func frame(kind byte, payload []byte) []byte {
	b := []byte{kind, 0, 1}
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(append(b, payload...), 0xCE)
}

func method(class, id uint16, args ...byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, class)
	return frame(1, append(binary.BigEndian.AppendUint16(b, id), args...))
}

// classBasic is AMQP 0-9-1's basic class.
const classBasic = 60

// deliver is basic.deliver with a consumer tag, a delivery tag and the redelivered bit.
func deliver(redelivered bool) []byte {
	args := append([]byte{3}, "tag"...)
	args = binary.BigEndian.AppendUint64(args, 7)
	flag := byte(0)
	if redelivered {
		flag = 1
	}
	return method(classBasic, 60, append(args, flag, 0, 0)...)
}

// pieces reads b at most n bytes at a time.
type pieces struct {
	b []byte
	n int
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), p.n)], p.b)
	p.b = p.b[n:]
	return n, nil
}

// The counter counts the deliveries of a broker's stream cut anywhere, among other methods
// and past content bodies of any size.
func TestFrameCounterCountsMethodsAcrossReads(t *testing.T) {
	var stream []byte
	stream = append(stream, method(20, 10)...)
	stream = append(stream, method(50, 10)...)
	stream = append(stream, deliver(false)...)
	stream = append(stream, frame(3, make([]byte, 70_000))...) // a body frame: skipped
	stream = append(stream, deliver(true)...)
	stream = append(stream, method(classBasic, 71)...)
	stream = append(stream, method(classBasic, 72)...)
	stream = append(stream, method(classBasic, 80)...)
	stream = append(stream, method(classBasic, 120)...)
	stream = append(stream, frame(8, nil)...) // a heartbeat

	for _, cut := range []int{1, 3, 7, 4096, len(stream)} {
		var counts FrameCounts
		counts.count(&pieces{b: stream, n: cut})
		require.Equal(t, FrameSnapshot{Deliver: 2, Redelivered: 1, GetOK: 1},
			counts.Snapshot(), "read %d bytes at a time", cut)
		require.EqualValues(t, 3, counts.Snapshot().Deliveries(), "basic.deliver and basic.get-ok")
	}
}

// The counting copy passes the broker's bytes on as they are, a frame it cannot read and
// what follows it included.
func TestFrameCounterPassesEveryByteOn(t *testing.T) {
	stream := append(deliver(false), frame(3, make([]byte, 70_000))...)
	broken := frame(1, []byte{0, 60, 0, 60})
	broken[len(broken)-1] = 0 // no end octet
	stream = append(append(stream, broken...), deliver(false)...)

	broker, proxyIn := net.Pipe()
	proxyOut, client := net.Pipe()
	var counts FrameCounts
	go func() {
		counts.Copy(proxyOut, proxyIn, false)
		proxyOut.Close()
	}()
	go func() {
		_, _ = broker.Write(stream)
		broker.Close()
	}()
	got, err := io.ReadAll(client)
	require.NoError(t, err)
	require.Equal(t, stream, got)
	require.EqualValues(t, 1, counts.Snapshot().Deliver, "counted up to the frame it could not read")
}

// A URL or DSN goes through a delay proxy with the rest of it kept, and a round trip
// through the proxy takes at least the injected time.
func TestDelayProxyAddsTheRoundTrip(t *testing.T) {
	dsn := ThroughDelay(t, "postgres://postgres@127.0.0.1:5432/bs_1?sslmode=disable", 2*time.Millisecond)
	amqpURL := ThroughDelay(t, "amqp://guest:guest@127.0.0.1:5672/bs-test-x", 2*time.Millisecond)
	rtt := MeasureRTT(t, 5*time.Millisecond)
	require.Regexp(t, `^postgres://postgres@127\.0\.0\.1:\d+/bs_1\?sslmode=disable$`, dsn)
	require.NotContains(t, dsn, ":5432/")
	require.Regexp(t, `^amqp://guest:guest@127\.0\.0\.1:\d+/bs-test-x$`, amqpURL)
	require.GreaterOrEqual(t, rtt, 5*time.Millisecond)
	require.Less(t, rtt, time.Second)
}
