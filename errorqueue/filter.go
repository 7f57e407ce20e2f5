package errorqueue

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Filter selects messages of the -error queues; its zero value selects all of them.
type Filter struct {
	// Broker is a broker's index; nil means every configured broker.
	Broker *int `json:"broker,omitempty"`
	// Queue is a logical queue (its {q}-error is read); empty means every queue.
	Queue string `json:"queue,omitempty"`
	// Event is an x-github-event, exactly.
	Event string `json:"event,omitempty"`
	// Reason is a part of x-error-reason, or one of the kinds classifyReason gives; any case.
	Reason string `json:"reason,omitempty"`
	// ID is a delivery id or, for a message without one, its message id.
	ID string `json:"id,omitempty"`
	// Since and Until bound x-error-at: Since <= x-error-at < Until.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
}

// ErrBadFilter is wrapped into the error of a filter that names what is not configured.
var ErrBadFilter = errors.New("bad filter")

// check refuses a broker or a queue that is not configured: matching nothing there
// would read as "no errors" rather than as a typo.
func (f Filter) check(brokers int, queues []string) error {
	if f.Broker != nil && (*f.Broker < 0 || *f.Broker >= brokers) {
		return fmt.Errorf("%w: broker %d: the configured brokers are 0 to %d", ErrBadFilter, *f.Broker, brokers-1)
	}
	if f.Queue != "" && !slices.Contains(queues, f.Queue) {
		return fmt.Errorf("%w: queue %q is not one of QUEUES (%s); name the logical queue, not its -error", ErrBadFilter, f.Queue, strings.Join(queues, ", "))
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("%w: since %s is not before until %s", ErrBadFilter, f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	}
	return nil
}

// String is the filter as a log line or a report names it.
func (f Filter) String() string {
	var parts []string
	if f.Broker != nil {
		parts = append(parts, fmt.Sprintf("broker=%d", *f.Broker))
	}
	for _, kv := range [][2]string{{"queue", f.Queue}, {"event", f.Event}, {"reason", f.Reason}, {"id", f.ID}} {
		if kv[1] != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", kv[0], kv[1]))
		}
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since="+f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "until="+f.Until.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

// brokers are the broker indexes the filter reads, of n configured.
func (f Filter) brokers(n int) []int {
	if f.Broker != nil {
		return []int{*f.Broker}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// queues are the logical queues the filter reads, of those configured.
func (f Filter) queues(configured []string) []string {
	if f.Queue != "" {
		return []string{f.Queue}
	}
	return configured
}

// matches tells whether m is selected; the broker and queue were chosen before.
func (f Filter) matches(m Message) bool {
	switch {
	case f.Event != "" && m.Event != f.Event:
		return false
	case f.ID != "" && m.ID != f.ID:
		return false
	case f.Reason != "" && !strings.EqualFold(m.ReasonKind, f.Reason) &&
		!strings.Contains(strings.ToLower(m.Reason), strings.ToLower(f.Reason)):
		return false
	case !f.Since.IsZero() && m.ErrorAt.Before(f.Since):
		return false
	case !f.Until.IsZero() && !m.ErrorAt.Before(f.Until):
		return false
	}
	return true
}
