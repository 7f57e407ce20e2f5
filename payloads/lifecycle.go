package payloads

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Event is one webhook delivery as the producer publishes it.
type Event struct {
	Queue      string
	Event      string // the x-github-event header
	Action     string
	DeliveryID string // the x-github-delivery header
	// Entity names what the event changes ("pull_request:PR_3"), or is empty for an event
	// with a row of its own (a push).
	Entity string
	Body   []byte
}

// QueueFor is the logical queue the producer routes an event type to.
func QueueFor(event string) string {
	switch event {
	case "pull_request", "pull_request_review", "pull_request_review_comment", "pull_request_review_thread":
		return "pull_requests"
	case "issues", "issue_comment":
		return "issues"
	case "installation", "installation_repositories":
		return "installations"
	default:
		return "pushes"
	}
}

// Lifecycle builds events, in the order the producer would publish them, that change
// real vendored payloads into n distinct pull requests, n issues and n pushes, each
// entity going through a lifecycle whose order matters: opened, synchronize, closed,
// a synchronize that arrives after closed, reopened, closed. Each payload carries the
// entity's true clock (updated_at), a minute apart in lifecycle order; the late event's
// is just before the close it arrives after.
func Lifecycle(n int) ([]Event, error) {
	var out []Event
	prActions := []string{"opened", "synchronize", "closed", "synchronize", "reopened", "closed"}
	issueActions := []string{"opened", "edited", "closed", "edited", "reopened"}
	for k := 1; k <= n; k++ {
		for i, action := range prActions {
			ev, err := entityEvent("pull_request", action, "pull_request", k, lifecycleClock(i, i == 3))
			if err != nil {
				return nil, err
			}
			out = append(out, ev)
		}
		for i, action := range issueActions {
			ev, err := entityEvent("issues", action, "issue", k, lifecycleClock(i, i == 3))
			if err != nil {
				return nil, err
			}
			out = append(out, ev)
		}
		push, err := Build("push", "", nil)
		if err != nil {
			return nil, err
		}
		out = append(out, push)
	}
	return out, nil
}

// lifecycleClock is the clock of step i of a lifecycle; a late step happened 30 seconds
// before the step it is published after.
func lifecycleClock(i int, late bool) string {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute)
	if late {
		at = at.Add(-90 * time.Second)
	}
	return at.Format(time.RFC3339)
}

// entityEvent makes event/action for entity number k out of the vendored example of
// that action (or the "opened" one, with its action changed), stamped with clock.
func entityEvent(event, action, objectKey string, k int, clock string) (Event, error) {
	nodeID := fmt.Sprintf("%s_bs_%d", objectKey, k)
	ev, err := Build(event, action, func(p map[string]any) {
		p["action"] = action
		obj, _ := p[objectKey].(map[string]any)
		if obj == nil {
			return
		}
		obj["node_id"] = nodeID
		obj["id"] = json.Number(fmt.Sprint(9_000_000 + k))
		obj["number"] = json.Number(fmt.Sprint(k))
		obj["title"] = fmt.Sprintf("%s %d", objectKey, k)
		obj["updated_at"] = clock
		switch action {
		case "closed":
			obj["state"] = "closed"
			obj["merged"] = false
		case "opened", "reopened":
			obj["state"] = "open"
		}
	})
	ev.Entity = event + ":" + nodeID
	return ev, err
}

// Build makes one event from the vendored example of event/action (falling back to any
// example of the event), lets change edit the decoded payload, and gives it a fresh
// delivery id.
func Build(event, action string, change func(p map[string]any)) (Event, error) {
	examples := Find(event, action)
	if len(examples) == 0 {
		examples = Find(event, "")
	}
	if len(examples) == 0 {
		return Event{}, fmt.Errorf("payloads: no vendored example of %s", event)
	}
	body := examples[0].Body
	if change != nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber() // ids survive unchanged
		var p map[string]any
		if err := dec.Decode(&p); err != nil {
			return Event{}, fmt.Errorf("payloads: decode %s: %w", examples[0].Name, err)
		}
		change(p)
		var err error
		if body, err = json.Marshal(p); err != nil {
			return Event{}, fmt.Errorf("payloads: encode %s: %w", examples[0].Name, err)
		}
	}
	return Event{
		Queue:      QueueFor(event),
		Event:      event,
		Action:     action,
		DeliveryID: NewDeliveryID(),
		Body:       body,
	}, nil
}

// NewDeliveryID makes a GUID as GitHub's X-GitHub-Delivery is: a version-1 (time-based)
// UUID, such as the 72d3162e-cc78-11e3-81ab-4c9367dc0958 of GitHub's documentation. The
// ledger's key orders these by time (migration 0008), so the shape matters to what the
// benchmarks measure.
func NewDeliveryID() string {
	id, err := uuid.NewUUID()
	if err != nil {
		// No clock to read: a random GUID is still a unique one.
		return uuid.NewString()
	}
	return id.String()
}

// RepositoryList is an installation (action created, listing "repositories") or
// installation_repositories (action removed, listing "repositories_removed") event of at
// most size bytes that lists as many repositories as a body of that size can (one per 64
// bytes, the decoder's bound), each with the columns an installation payload carries:
// the costliest body to apply per byte, since every element becomes a row.
func RepositoryList(event string, size int) (Event, error) {
	var head, list, action string
	switch event {
	case "installation":
		head, list, action = `{"action":"created","installation":{"id":1,"account":{"login":"o"}}`, "repositories", "created"
	case "installation_repositories":
		head, list, action = `{"action":"removed","installation":{"id":1,"account":{"login":"o"}}`, "repositories_removed", "removed"
	default:
		return Event{}, fmt.Errorf("payloads: %s lists no repositories", event)
	}
	var b strings.Builder
	b.WriteString(head + `,"` + list + `":[`)
	for i := 1; b.Len() < size-64; i++ {
		if i > 1 {
			b.WriteByte(',')
		}
		e := fmt.Sprintf(`{"id":%d,"node_id":"R%d","name":"r","full_name":"o/r"}`, i, i)
		b.WriteString(e + strings.Repeat(" ", max(0, 63-len(e))))
	}
	b.WriteString(`]}`)
	return Event{Queue: QueueFor(event), Event: event, Action: action, DeliveryID: NewDeliveryID(), Body: []byte(b.String())}, nil
}
