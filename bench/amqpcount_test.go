package main

import (
	"encoding/binary"
	"testing"

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

// The parser counts the methods of a stream cut anywhere, past the client's protocol
// header and content bodies of any size.
func TestFrameParserCountsMethodsAcrossReads(t *testing.T) {
	var stream []byte
	stream = append(stream, "AMQP\x00\x00\x09\x01"...)
	stream = append(stream, method(classChannel, 10)...)
	stream = append(stream, method(classQueue, 10)...)
	stream = append(stream, deliver(false)...)
	stream = append(stream, frame(3, make([]byte, 70_000))...) // a body frame: skipped
	stream = append(stream, deliver(true)...)
	stream = append(stream, method(classBasic, 71)...)
	stream = append(stream, method(classBasic, 72)...)
	stream = append(stream, method(classBasic, 80)...)
	stream = append(stream, method(classBasic, 120)...)
	stream = append(stream, frame(8, nil)...) // a heartbeat

	for _, cut := range []int{1, 3, 7, 4096, len(stream)} {
		var counts frameCounts
		fp := &frameParser{counts: &counts, skipHeader: 8}
		for b := stream; len(b) > 0; b = b[min(cut, len(b)):] {
			fp.feed(b[:min(cut, len(b))])
		}
		require.Equal(t, snapshot{Deliver: 2, Redelivered: 1, GetOK: 1, GetEmpty: 1, Ack: 1, Nack: 1, Declare: 1, ChannelOpen: 1},
			counts.snapshot(), "read %d bytes at a time", cut)
		require.EqualValues(t, 3, counts.snapshot().deliveries(), "basic.deliver and basic.get-ok")
	}
}
