package quarantine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"testing/iotest"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
)

func frame(typ byte, ch uint16, payload []byte) []byte {
	f := rawamqp.Frame{Type: typ, Channel: ch, Size: len(payload)}.Append(nil)
	return append(append(f, payload...), rawamqp.FrameEnd)
}

// deliver is a basic.deliver on ch, its content header announcing a body of size bytes,
// and that body in frames of at most 100 bytes.
func deliver(ch uint16, size int) []byte {
	args := binary.BigEndian.AppendUint32(nil, rawamqp.BasicDeliver)
	args = binary.BigEndian.AppendUint64(append(append(args, 3), "tag"...), 7)
	head := binary.BigEndian.AppendUint64([]byte{0, 60, 0, 0}, uint64(size))
	b := append(frame(rawamqp.FrameMethod, ch, append(args, 0, 0, 0)), frame(rawamqp.FrameHeader, ch, append(head, 0, 0))...)
	for body := bytes.Repeat([]byte{'b'}, size); len(body) > 0; body = body[min(100, len(body)):] {
		b = append(b, frame(rawamqp.FrameBody, ch, body[:min(100, len(body))])...)
	}
	return b
}

// The guard hands the client every frame as it came but for a delivery whose body is over
// the limit: that one's content header announces the stand-in instead, which follows it in
// place of the real body, and Cut stops a batch there. It reads the same, byte by byte.
func TestTheGuardStandsInForABodyOverTheLimit(t *testing.T) {
	q := Quarantine{Limit: 150, Mark: NewMark()}
	small, commitOk := deliver(1, 150), frame(rawamqp.FrameMethod, 1, []byte{0, 90, 0, 21})
	stream := append(append(append(deliver(1, 1000), deliver(2, 40)...), small...), commitOk...)

	stand := binary.BigEndian.AppendUint64(append([]byte(nil), q.Mark...), 1000)
	want := deliver(1, 0)
	want = want[:len(want)-frameLen(14)] // the method frame alone
	head := binary.BigEndian.AppendUint64([]byte{0, 60, 0, 0}, uint64(len(stand)))
	want = append(want, frame(rawamqp.FrameHeader, 1, append(head, 0, 0))...)
	want = append(append(append(want, frame(rawamqp.FrameBody, 1, stand)...), deliver(2, 40)...), small...)
	want = append(want, commitOk...)

	for _, read := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
		broker, client := net.Pipe()
		go func() {
			_, _ = broker.Write(stream)
			broker.Close()
		}()
		got, err := io.ReadAll(read(q.Guard(client)))
		require.NoError(t, err)
		require.Equal(t, want, got)
	}

	batch := []amqp.Delivery{{Body: []byte("a")}, {MessageId: "big", Body: stand}, {Body: []byte("c")}}
	cut, err := q.Cut(batch)
	assert.Equal(t, batch[:1], cut)
	require.ErrorIs(t, err, ErrOversize)
	assert.Contains(t, err.Error(), "message big: body of 1000 bytes")
	for _, other := range []Quarantine{{Mark: NewMark()}, {}} {
		cut, err = other.Cut(batch)
		assert.NoError(t, err, "a mark of another pool, or none, is a body like any")
		assert.Equal(t, batch, cut)
	}
	_, err = q.Cut([]amqp.Delivery{{Body: append(stand, 0)}})
	assert.NoError(t, err, "the mark and a size, nothing more")
}

// frameLen is the size of a frame of a payload of n bytes.
func frameLen(n int) int { return 7 + n + 1 }

// Move takes only what a poison message ended: any other error comes back as it is, and
// nothing is dialed.
func TestMoveLeavesOtherErrorsAlone(t *testing.T) {
	q := Quarantine{Limit: 10, Mark: NewMark(), Logger: slog.New(slog.DiscardHandler)}
	tgt := Target{Queue: "q", ErrorQueue: "q-error", Dial: func(context.Context) (*rawamqp.Conn, error) {
		t.Error("dialed for an error that is no poison's")
		return nil, errors.New("no")
	}}
	for _, reason := range []*amqp.Error{
		{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED", Server: true},
		{Code: amqp.FrameError, Reason: "read tcp: connection reset by peer"},
		{Code: amqp.SyntaxError, Reason: amqp.ErrSyntax.Reason, Server: true},
	} {
		closed := make(chan *amqp.Error, 1)
		closed <- reason
		tgt.Closed = closed
		assert.Same(t, amqp.ErrClosed, q.Move(t.Context(), tgt, amqp.ErrClosed), "%s", reason)
	}
	err := errors.New("handle batch: database down")
	assert.Same(t, err, q.Move(t.Context(), tgt, err))
	assert.Same(t, err, q.Move(t.Context(), Target{}, err), "no close notifications")
}

// What amqp091-go shuts its connection down for is told from a broker's close and a
// network error, whether the call failed with the reason or with the closed channel.
func TestAnUnreadableCloseIsAmqp091GosOwnParseError(t *testing.T) {
	for _, e := range []*amqp.Error{amqp.ErrSyntax, amqp.ErrFrame, amqp.ErrFrameTooLarge,
		{Code: amqp.FrameError, Reason: "frame could not be parsed: " + amqp.ErrSyntax.Reason}} {
		assert.True(t, unreadableClose(closedBy(nil, e)), e.Reason)
		closed := make(chan *amqp.Error, 1)
		closed <- e
		assert.Same(t, e, closedBy(closed, errors.Join(errors.New("ack"), amqp.ErrClosed)))
	}
	assert.False(t, unreadableClose(nil))
	assert.False(t, unreadableClose(&amqp.Error{Code: amqp.FrameError, Reason: amqp.ErrSyntax.Reason, Server: true}), "the broker's")
	assert.Nil(t, closedBy(make(chan *amqp.Error, 1), amqp.ErrClosed), "no reason yet")
}

// header is a content header's payload: a body of 6 bytes, a content type, the header
// table and a message id.
func header(table []byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{0, 60, 0, 0}, 6)
	b = binary.BigEndian.AppendUint16(b, flagContentType|flagHeaders|flagMessageID)
	b = append(append(b, 4), "json"...)
	b = append(binary.BigEndian.AppendUint32(b, uint32(len(table))), table...)
	return append(append(b, 2), "id"...)
}

// A copy in -error keeps the original's table undecoded and appends its own headers; when
// that would not fit frame_max it carries its own alone, and says what it left out.
func TestACopysHeaderKeepsTheTableUnlessItWouldNotFit(t *testing.T) {
	table := append(append([]byte{1}, 'k'), 'S', 0, 0, 0, 1, 'v')
	copied, id := errorCopy(header(table), "too big", "issues", 4096)
	assert.Equal(t, "id", id)
	props, err := splitProperties(copied)
	require.NoError(t, err)
	assert.Equal(t, "\x04json", string(props[flagContentType]))
	assert.Equal(t, []byte{2}, props[flagDeliveryMode], "persistent")
	assert.True(t, bytes.HasPrefix(props[flagHeaders][4:], table), "the original's entries first, undecoded")
	assert.Contains(t, string(props[flagHeaders]), HeaderReason+"S\x00\x00\x00\x07too big")
	assert.NotContains(t, string(props[flagHeaders]), HeaderCut)
	assert.Empty(t, checkContentHeader(copied, 4096))

	large := append(append([]byte{1}, 'k'), 'S', 0, 0, 0x10, 0)
	large = append(large, strings.Repeat("v", 0x1000)...)
	copied, _ = errorCopy(header(large), "too big", "issues", 4096)
	props, err = splitProperties(copied)
	require.NoError(t, err)
	assert.NotContains(t, string(props[flagHeaders]), "vvvv")
	assert.Contains(t, string(props[flagHeaders]), "left out the original's header table (4103 bytes) to fit frame_max 4096")
	assert.LessOrEqual(t, len(copied)+8, 4096)
}
