// Package rawamqp is the least of an AMQP 0-9-1 client: it handles a message as bytes,
// never decodes a header table and never holds a body, so that it can move the messages
// amqp091-go cannot take (see broker/quarantine). Its frame reader is the one this module
// reads AMQP frames with.
package rawamqp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
)

// Frame types, and the octet that ends every frame.
const (
	FrameMethod    = 1
	FrameHeader    = 2 // a content header: a message's properties and body size
	FrameBody      = 3
	frameHeartbeat = 8
	FrameEnd       = 0xCE
)

// Methods the readers of frames look for, as class<<16 | method.
const (
	BasicDeliver = 60<<16 | 60
	BasicGetOk   = 60<<16 | 71
)

// Frame is what comes before a frame's payload: its type, channel and payload size. The
// payload and the end octet follow it.
type Frame struct {
	Type    byte
	Channel uint16
	Size    int
}

// Append appends the frame's first 7 bytes, as they go on the wire, to b.
func (f Frame) Append(b []byte) []byte {
	b = append(b, f.Type)
	b = binary.BigEndian.AppendUint16(b, f.Channel)
	return binary.BigEndian.AppendUint32(b, uint32(f.Size))
}

// Reader reads frames off a stream. It holds no more of a frame than its caller reads
// whole: a payload is read past (Skip), read whole (Payload) or read on as bytes.
type Reader struct{ *bufio.Reader }

// NewReader reads frames off r through a buffer of size bytes.
func NewReader(r io.Reader, size int) Reader { return Reader{bufio.NewReaderSize(r, size)} }

var errNoEnd = errors.New("frame without its end octet")

// Next reads the first 7 bytes of the next frame.
func (r Reader) Next() (Frame, error) {
	var h [7]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	return Frame{Type: h[0], Channel: binary.BigEndian.Uint16(h[1:]), Size: int(binary.BigEndian.Uint32(h[3:]))}, nil
}

// Payload reads the payload of f whole, and its end octet.
func (r Reader) Payload(f Frame) ([]byte, error) {
	p := make([]byte, f.Size+1)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, err
	}
	if p[f.Size] != FrameEnd {
		return nil, errNoEnd
	}
	return p[:f.Size], nil
}

// Skip reads the payload of f past, holding none of it, and its end octet.
func (r Reader) Skip(f Frame) error {
	if _, err := r.Discard(f.Size); err != nil {
		return err
	}
	if end, err := r.ReadByte(); err != nil || end != FrameEnd {
		return errors.Join(errNoEnd, err)
	}
	return nil
}

// MethodID is the class and method of a method frame's payload, as class<<16 | method, or
// 0 when the payload is too short to hold them.
func MethodID(payload []byte) uint32 {
	if len(payload) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(payload)
}
