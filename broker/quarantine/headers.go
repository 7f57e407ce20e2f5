package quarantine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The limits amqp091-go's frame reader enforces on a header table (its maxFieldDepth and
// maxContainerElements): past them it closes the connection.
const (
	clientMaxDepth    = 32
	clientMaxElements = 8192
)

// checkContentHeader says why amqp091-go would refuse a content header frame's payload
// on a connection of frame_max frameMax, or "" when it would read it. It walks the header
// table as the library reads it, without building it.
func checkContentHeader(header []byte, frameMax int) string {
	if frameMax > 0 && len(header)+8 > frameMax {
		return fmt.Sprintf("a header frame of %d bytes, over the frame_max of %d its consumer negotiated", len(header)+8, frameMax)
	}
	props, err := splitProperties(header)
	if err != nil {
		return "a content header that does not parse: " + err.Error()
	}
	if t, ok := props[flagHeaders]; ok {
		if why := checkTable(t[4:], 0); why != "" {
			return "headers amqp091-go refuses: " + why
		}
	}
	return ""
}

// checkTable walks the entries of a field table (without its length) at depth.
func checkTable(b []byte, depth int) string {
	if depth > clientMaxDepth {
		return fmt.Sprintf("tables or arrays nested more than %d deep", clientMaxDepth)
	}
	keys := map[string]struct{}{}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n {
			return "a table key past its table's end"
		}
		rest, why := checkField(b[1+n:], depth)
		if why != "" {
			return why
		}
		if len(keys) >= clientMaxElements {
			return fmt.Sprintf("a table of more than %d entries", clientMaxElements)
		}
		keys[string(b[1:1+n])] = struct{}{}
		b = rest
	}
	return ""
}

func checkArray(b []byte, depth int) string {
	if depth > clientMaxDepth {
		return fmt.Sprintf("tables or arrays nested more than %d deep", clientMaxDepth)
	}
	for n := 0; len(b) > 0; n++ {
		if n >= clientMaxElements {
			return fmt.Sprintf("an array of more than %d entries", clientMaxElements)
		}
		rest, why := checkField(b, depth)
		if why != "" {
			return why
		}
		b = rest
	}
	return ""
}

// checkField walks one field value, returning what follows it.
func checkField(b []byte, depth int) ([]byte, string) {
	const past = "a field past its table's end"
	if len(b) < 1 {
		return nil, "a field without its type"
	}
	typ, b := b[0], b[1:]
	n := 0
	switch typ {
	case 'V':
	case 't', 'B', 'b':
		n = 1
	case 's', 'u':
		n = 2
	case 'I', 'i', 'f':
		n = 4
	case 'D':
		n = 5
	case 'l', 'd', 'T':
		n = 8
	case 'S', 'x', 'A', 'F':
		if len(b) < 4 {
			return nil, past
		}
		n = 4 + int(binary.BigEndian.Uint32(b))
	default:
		return nil, fmt.Sprintf("a field of unknown type %q", typ)
	}
	if n < 0 || len(b) < n {
		return nil, past
	}
	why := ""
	switch typ {
	case 'A':
		why = checkArray(b[4:n], depth+1)
	case 'F':
		why = checkTable(b[4:n], depth+1)
	}
	return b[n:], why
}

// Content header property flags, in the order the properties follow them.
const (
	flagContentType     = 0x8000
	flagContentEncoding = 0x4000
	flagHeaders         = 0x2000
	flagDeliveryMode    = 0x1000
	flagPriority        = 0x0800
	flagCorrelationID   = 0x0400
	flagMessageID       = 0x0080
	flagTimestamp       = 0x0040
	flagType            = 0x0020
	flagAppID           = 0x0008
)

// splitProperties returns each property of a content header's payload as its encoded
// bytes (a short string with its length, a table with its length), by flag.
func splitProperties(header []byte) (map[uint16][]byte, error) {
	if len(header) < 14 {
		return nil, errors.New("too short")
	}
	flags := binary.BigEndian.Uint16(header[12:])
	b := header[14:]
	props := map[uint16][]byte{}
	for bit := uint16(0x8000); bit > 0x0004; bit >>= 1 {
		if flags&bit == 0 {
			continue
		}
		var n int
		switch bit {
		case flagHeaders:
			if len(b) < 4 {
				return nil, errors.New("headers past the frame's end")
			}
			n = 4 + int(binary.BigEndian.Uint32(b))
		case flagDeliveryMode, flagPriority:
			n = 1
		case flagTimestamp:
			n = 8
		default:
			if len(b) < 1 {
				return nil, errors.New("a property past the frame's end")
			}
			n = 1 + int(b[0])
		}
		if n < 0 || len(b) < n {
			return nil, errors.New("a property past the frame's end")
		}
		props[bit], b = b[:n], b[n:]
	}
	return props, nil
}

// errorCopy builds the content header of a copy to -error of the message whose content
// header is original, with reason in HeaderReason: its properties as they were (but
// reply-to, expiration, priority and user-id, as a Reject's copy), persistent, with the
// -error headers appended to its header table, undecoded. When that would not fit
// frameMax, the copy carries the -error headers alone and says so in HeaderCut. It returns
// the header and the message id.
func errorCopy(original []byte, reason, queue string, frameMax int) ([]byte, string) {
	props, _ := splitProperties(original) // the move's check parsed it already
	id := ""
	if v, ok := props[flagMessageID]; ok {
		id = string(v[1:])
	}
	ours := func(table []byte, cut string) []byte {
		for _, kv := range [][2]string{
			{HeaderReason, reason}, {HeaderAt, time.Now().UTC().Format(time.RFC3339)}, {HeaderQueue, queue}, {HeaderCut, cut},
		} {
			if kv[1] != "" {
				table = append(append(table, byte(len(kv[0]))), kv[0]...)
				table = append(binary.BigEndian.AppendUint32(append(table, 'S'), uint32(len(kv[1]))), kv[1]...)
			}
		}
		return table
	}
	build := func(table []byte) []byte {
		b := append([]byte(nil), original[:12]...) // class, weight, body size
		flags := uint16(flagHeaders | flagDeliveryMode)
		for _, f := range []uint16{flagContentType, flagContentEncoding, flagCorrelationID, flagMessageID, flagTimestamp, flagType, flagAppID} {
			if _, ok := props[f]; ok {
				flags |= f
			}
		}
		b = binary.BigEndian.AppendUint16(b, flags)
		for bit := uint16(0x8000); bit > 0x0004; bit >>= 1 {
			switch {
			case flags&bit == 0:
			case bit == flagHeaders:
				b = append(binary.BigEndian.AppendUint32(b, uint32(len(table))), table...)
			case bit == flagDeliveryMode:
				b = append(b, 2)
			default:
				b = append(b, props[bit]...)
			}
		}
		return b
	}
	var table []byte
	if t, ok := props[flagHeaders]; ok {
		table = t[4:]
	}
	whole := build(ours(append([]byte(nil), table...), ""))
	if len(whole)+8 <= frameMax {
		return whole, id
	}
	cut := fmt.Sprintf("left out the original's header table (%d bytes) to fit frame_max %d", len(table), frameMax)
	return build(ours(nil, cut)), id
}
