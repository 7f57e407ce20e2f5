package broker

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Limits of a copy cut to fit frame_max.
const (
	// maxCutReason is the longest reason a cut copy keeps, in bytes.
	maxCutReason = 512
	// maxKeptHeader is the largest encoded producer header a copy keeps once its other
	// headers did not fit.
	maxKeptHeader = 300
)

// errorHeaders are what a copy to {q}-error adds to the message.
type errorHeaders struct {
	reason      string
	at          time.Time
	queue       string
	retryCycles int
}

// errorCopy builds the copy of d for {q}-error. AMQP carries all of a message's properties
// and headers in one header frame, which must fit frame_max (128 KiB on RabbitMQ unless
// set otherwise): a producer's message whose headers nearly filled it does not fit once
// the copy adds its own, and RabbitMQ answers a frame too large by closing the connection,
// after which the same message came back at the head of its queue, for good.
//
// So the copy is cut, in steps, until its header frame fits: first the reason is cut to
// maxCutReason bytes; then producer headers are dropped one by one (see dropOrder) until
// the rest fits; then the string properties but the message id. The header that says what
// was cut is counted before it is written, and the size is checked once more when the copy
// is complete: should it still not fit, the copy is a stub (see stubCopy). The body is
// never cut (the library splits it into frames), so the operator can still move the
// message back. cut says what was left out, "" when nothing was; the copy then carries it
// in HeaderErrorCut. frameMax <= 0 means no limit.
func errorCopy(d amqp.Delivery, e errorHeaders, frameMax int) (msg amqp.Publishing, cut string) {
	headers := maps.Clone(d.Headers)
	if headers == nil {
		headers = amqp.Table{}
	}
	producer := dropOrder(headers)
	headers[HeaderErrorReason] = e.reason
	headers[HeaderErrorAt] = e.at.UTC().Format(time.RFC3339)
	headers[HeaderErrorQueue] = e.queue
	headers[HeaderRetryCycles] = int64(e.retryCycles)
	msg = amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		CorrelationId:   d.CorrelationId,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
	if fits(msg, frameMax) {
		return msg, ""
	}
	var left []string
	if len(e.reason) > maxCutReason {
		headers[HeaderErrorReason] = truncate(e.reason, maxCutReason)
		left = append(left, fmt.Sprintf("the reason past %d bytes", maxCutReason))
	}
	// The cut header is not written yet: reserve the most it can take.
	reserve := fieldSize(HeaderErrorCut, cutText(frameMax, append(left, fmt.Sprintf("%d producer headers", len(producer)), cutProperties)))
	size := headerFrameSize(msg)
	dropped := 0
	for _, k := range producer {
		if size+reserve <= frameMax {
			break
		}
		size -= fieldSize(k, headers[k])
		delete(headers, k)
		dropped++
	}
	if dropped > 0 {
		left = append(left, fmt.Sprintf("%d producer headers", dropped))
	}
	if size+reserve > frameMax {
		msg.ContentType, msg.ContentEncoding, msg.CorrelationId, msg.Type, msg.AppId = "", "", "", "", ""
		left = append(left, cutProperties)
	}
	cut = cutText(frameMax, left)
	headers[HeaderErrorCut] = cut
	if !fits(msg, frameMax) {
		return stubCopy(d, e, frameMax)
	}
	return msg, cut
}

// cutProperties is what HeaderErrorCut says when the string properties were left out.
const cutProperties = "the string properties but the message id"

func cutText(frameMax int, left []string) string {
	return fmt.Sprintf("cut to fit frame_max %d: left out %s", frameMax, strings.Join(left, ", "))
}

// fits tells whether msg's header frame fits frameMax; frameMax <= 0 means no limit.
func fits(msg amqp.Publishing, frameMax int) bool {
	return frameMax <= 0 || headerFrameSize(msg) <= frameMax
}

// maxStubReason is the longest reason a stub copy keeps, in bytes.
const maxStubReason = 128

// stubCopy is the copy of last resort, when even d's copy without its producer headers
// does not fit frameMax: the body, the message id (a short string, at most 255 bytes),
// the reason cut to maxStubReason and the sizes of what was left out, so that the
// operator knows which message it was and that its original headers are lost. A
// frame_max of at least 4096, the protocol's least, always holds it.
func stubCopy(d amqp.Delivery, e errorHeaders, frameMax int) (amqp.Publishing, string) {
	original := headerFrameSize(amqp.Publishing{
		Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		CorrelationId: d.CorrelationId, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId,
	})
	cut := fmt.Sprintf("stub to fit frame_max %d: left out every producer header and property but the message id "+
		"(the original's header frame was %d bytes), and the reason past %d bytes; the body (%d bytes) is whole",
		frameMax, original, maxStubReason, len(d.Body))
	return amqp.Publishing{
		Headers: amqp.Table{
			HeaderErrorReason: truncate(e.reason, maxStubReason),
			HeaderErrorAt:     e.at.UTC().Format(time.RFC3339),
			HeaderErrorQueue:  e.queue,
			HeaderRetryCycles: int64(e.retryCycles),
			HeaderErrorCut:    cut,
		},
		DeliveryMode: amqp.Persistent,
		MessageId:    d.MessageId,
		Timestamp:    d.Timestamp,
		Body:         d.Body,
	}, cut
}

// dropOrder is the order in which a copy that does not fit drops the producer's headers:
// first those it least needs (any but x-github-* and x-death, or larger than
// maxKeptHeader), then x-death (the copy counts the cycles in HeaderRetryCycles), then the
// x-github-* headers, largest first; x-github-delivery and x-github-event, which name the
// event, go last. Ties go by name, so that a copy is cut the same way every time.
func dropOrder(headers amqp.Table) []string {
	sizes := make(map[string]int, len(headers))
	for k, v := range headers {
		sizes[k] = fieldSize(k, v)
	}
	rank := func(k string) int {
		switch {
		case sizes[k] > maxKeptHeader:
			return 0
		case k == "x-github-delivery" || k == "x-github-event":
			return 4
		case strings.HasPrefix(k, "x-github-"):
			return 3
		case k == "x-death":
			return 2
		default:
			return 1
		}
	}
	keys := slices.Collect(maps.Keys(headers))
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(sizes[b], sizes[a]), strings.Compare(a, b))
	})
	return keys
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// headerFrameSize is the size of the header frame amqp091-go writes for msg: the frame's
// own 8 bytes, class, weight, body size and property flags (14), then each property set.
func headerFrameSize(msg amqp.Publishing) int {
	size := 8 + 14
	for _, s := range []string{msg.ContentType, msg.ContentEncoding, msg.CorrelationId, msg.ReplyTo,
		msg.Expiration, msg.MessageId, msg.Type, msg.UserId, msg.AppId} {
		if s != "" {
			size += 1 + len(s)
		}
	}
	if msg.DeliveryMode != 0 {
		size++
	}
	if msg.Priority != 0 {
		size++
	}
	if !msg.Timestamp.IsZero() {
		size += 8
	}
	if len(msg.Headers) > 0 {
		size += tableSize(msg.Headers)
	}
	return size
}

// tableSize is the encoded size of an AMQP field table: its length, then each key as a
// short string and each value with its type byte.
func tableSize(t amqp.Table) int {
	size := 4
	for k, v := range t {
		size += fieldSize(k, v)
	}
	return size
}

func fieldSize(key string, v any) int {
	return 1 + len(key) + valueSize(v)
}

// valueSize follows amqp091-go's writeField.
func valueSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 1
	case bool, int8, uint8:
		return 2
	case int16, uint16:
		return 3
	case int32, uint32, float32:
		return 5
	case int, int64, uint64, float64, time.Time:
		return 9
	case amqp.Decimal:
		return 6
	case string:
		return 5 + len(v)
	case []byte:
		return 5 + len(v)
	case amqp.Table:
		return 1 + tableSize(v)
	case []any:
		size := 5
		for _, e := range v {
			size += valueSize(e)
		}
		return size
	case []amqp.Table:
		size := 5
		for _, e := range v {
			size += 1 + tableSize(e)
		}
		return size
	default:
		// A type the library cannot write fails the publish anyway; count it as large.
		return 1 << 20
	}
}
