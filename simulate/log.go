package simulate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Record kinds, the "kind" field of each log line.
const (
	KindPublish = "publish"
	KindRotate  = "rotate"
	KindNotify  = "notify"
)

// Record is one published message, a line of the log. Records are written once the broker
// confirmed the message, in publish order; Seq counts every publish of the producer from 1.
type Record struct {
	Kind string `json:"kind"`
	Seq  int64  `json:"seq"`
	// Queue is the logical queue; RoutingKey is set when the message went elsewhere (a
	// -retry queue, in tests).
	Queue      string `json:"queue"`
	RoutingKey string `json:"routingKey,omitempty"`
	// Broker is the index of the broker in the producer's list.
	Broker   int    `json:"broker"`
	Event    string `json:"event"`
	Action   string `json:"action"`
	Delivery string `json:"delivery"`
	Entity   string `json:"entity,omitempty"`
	// Clock is the entity's clock stamped in the payload (its updated_at), zero for an
	// event whose table has none; State is the payload's state of a pull request or issue.
	Clock time.Time `json:"clock,omitzero"`
	State string    `json:"state,omitempty"`
	// Poison is set for a message the consumer must reject to -error; PoisonKind says why.
	Poison     bool      `json:"poison"`
	PoisonKind string    `json:"poisonKind,omitempty"`
	At         time.Time `json:"at"`
}

// RotateRecord is a rotation of the producer to another broker.
type RotateRecord struct {
	Kind string `json:"kind"`
	// AfterSeq is the Seq of the last message published before the rotation.
	AfterSeq   int64     `json:"afterSeq"`
	From       int       `json:"from"`
	To         int       `json:"to"`
	SwitchedAt time.Time `json:"switchedAt"`
}

// NotifyRecord is one notification sent to brokerswitch.
type NotifyRecord struct {
	Kind string `json:"kind"`
	// Target is the broker index the notice names, -1 for an endpoint that is not configured.
	Target     int       `json:"target"`
	Host       string    `json:"host"`
	Vhost      string    `json:"vhost"`
	SwitchedAt time.Time `json:"switchedAt"`
	// Status is the HTTP status, 0 when the request failed; Outcome is the API's outcome
	// ("recorded", "stale", ...) when it said one.
	Status  int       `json:"status"`
	Outcome string    `json:"outcome,omitempty"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// Log is a parsed log.
type Log struct {
	Published     []Record
	Rotations     []RotateRecord
	Notifications []NotifyRecord
}

// ReadLog parses a log written by a Producer.
func ReadLog(r io.Reader) (Log, error) {
	var l Log
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return l, fmt.Errorf("simulate log line %d: %w", line, err)
		}
		var err error
		switch head.Kind {
		case KindPublish:
			var rec Record
			err = json.Unmarshal(b, &rec)
			l.Published = append(l.Published, rec)
		case KindRotate:
			var rec RotateRecord
			err = json.Unmarshal(b, &rec)
			l.Rotations = append(l.Rotations, rec)
		case KindNotify:
			var rec NotifyRecord
			err = json.Unmarshal(b, &rec)
			l.Notifications = append(l.Notifications, rec)
		default:
			err = fmt.Errorf("unknown kind %q", head.Kind)
		}
		if err != nil {
			return l, fmt.Errorf("simulate log line %d: %w", line, err)
		}
	}
	return l, sc.Err()
}
