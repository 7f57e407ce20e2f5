package ingest

import (
	"bytes"
	"strconv"
	"time"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// stamp is a payload timestamp read without ever failing the decode: GitHub writes them
// as RFC 3339 strings or, in some installation payloads, as Unix seconds. A clock that
// cannot be read must not turn a good delivery into a malformed one; it only makes the
// row fall back to queue order (see clockOf).
type stamp struct {
	// at is the instant in whole seconds, UTC; zero when absent or unreadable.
	at time.Time
	// unreadable is set when the key held something that is not a timestamp, or one too
	// far in the future to be a real clock (then ahead holds it).
	unreadable bool
	ahead      time.Time
}

// UnmarshalJSON reads a string or a number; null leaves the stamp absent, anything else
// marks it unreadable. It never returns an error.
func (s *stamp) UnmarshalJSON(b []byte) error {
	*s = stamp{}
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
	case b[0] == '"':
		text, err := strconv.Unquote(string(b))
		if err == nil {
			var t time.Time
			if t, err = time.Parse(time.RFC3339Nano, text); err == nil {
				s.at = t.UTC().Truncate(time.Second)
			}
		}
		s.unreadable = err != nil || s.at.IsZero()
	default:
		secs, err := strconv.ParseInt(string(b), 10, 64)
		if err == nil && secs > 0 {
			s.at = time.Unix(secs, 0).UTC()
		}
		s.unreadable = s.at.IsZero()
	}
	return nil
}

// time is the stamp as a column value, nil when absent or unreadable.
func (s *stamp) time() *time.Time {
	if s == nil || s.at.IsZero() {
		return nil
	}
	t := s.at
	return &t
}

// eventClock is the clock an event carries for the row its table keys on.
type eventClock struct {
	// table is the typed table whose rows follow this clock; "" for an event whose table
	// has none (push, create, delete: see clockOf).
	table string
	// at is the clock, nil when the payload has none that can be read.
	at *time.Time
	// fallback says why at is nil: metrics.ClockMissing, ClockUnparseable or ClockFuture.
	fallback string
}

// clockOf returns the entity clock ev carries. Each table's clock is the field GitHub
// moves on every change of that entity:
//   - pull requests: pull_request.updated_at; issues: issue.updated_at;
//   - comments: the comment's updated_at, a review's submitted_at (reviews have no
//     updated_at, so an edited or dismissed review ties with its submission);
//   - installations: installation.updated_at;
//   - repositories: repository.updated_at, for repository events only (installation
//     events list repositories without one, and those changes keep queue order).
//
// Pushes have no clock because each is its own row; branches and users have none in
// their payloads (a sender carries no timestamp), so they keep queue order.
func clockOf(ev Event) eventClock {
	table, s := clockField(ev)
	if s == nil {
		return eventClock{}
	}
	c := eventClock{table: table, at: s.time()}
	switch {
	case c.at != nil:
	case !s.ahead.IsZero():
		c.fallback = metrics.ClockFuture
	case s.unreadable:
		c.fallback = metrics.ClockUnparseable
	default:
		c.fallback = metrics.ClockMissing
	}
	return c
}

// distrustFuture makes ev's entity clock unreadable when it is after limit: one event
// stamped in the far future (a broken clock, or a forged payload) would otherwise make
// every later real event of its row older than it, and change nothing but the ledger, for
// good. Such an event is applied in queue order, as one without a clock. It returns the
// clock it refused, zero when it refused none.
func distrustFuture(ev Event, limit time.Time) time.Time {
	_, s := clockField(ev)
	if s == nil || s.at.IsZero() || !s.at.After(limit) {
		return time.Time{}
	}
	s.ahead, s.at, s.unreadable = s.at, time.Time{}, true
	return s.ahead
}

// clockField is the typed table whose rows follow ev's clock and the payload's field that
// holds it (see clockOf); nil when ev's table keeps queue order.
func clockField(ev Event) (string, *stamp) {
	if ev.Payload == nil {
		return "", nil
	}
	p := ev.Payload
	var s *stamp
	var table string
	switch ev.Type {
	case "pull_request":
		table, s = "github_pull_requests", &p.PullRequest.UpdatedAt
	case "issues":
		table, s = "github_issues", &p.Issue.UpdatedAt
	case "issue_comment", "commit_comment", "pull_request_review_comment":
		table, s = "github_comments", &p.Comment.UpdatedAt
	case "pull_request_review":
		table, s = "github_comments", &p.Review.SubmittedAt
	case "installation", "installation_repositories":
		table, s = "github_installations", &p.Installation.UpdatedAt
	case "repository":
		table, s = "github_repositories", &p.Repository.UpdatedAt
	default:
		return "", nil
	}
	return table, s
}

// clockOrder is how an event's clock compares with the clock of the row it changes.
type clockOrder int

const (
	// inQueueOrder means the clocks cannot tell: they are equal (GitHub's tick in whole
	// seconds), the event has none, or the row does not exist yet: the queue decides.
	inQueueOrder clockOrder = iota
	// eventNewer means the event happened after the payload the row holds, or the row has no
	// clock (it compares as older than anything).
	eventNewer
	// eventOlder means the row already holds a newer payload of the entity.
	eventOlder
)

// compareClocks is the order of an event with clock event against a row with clock row;
// exists is false when there is no row. A row without a clock compares as older than
// anything.
func compareClocks(event, row *time.Time, exists bool) clockOrder {
	switch {
	case !exists || event == nil:
		return inQueueOrder
	case row == nil || event.After(*row):
		return eventNewer
	case event.Before(*row):
		return eventOlder
	default:
		return inQueueOrder
	}
}

// laterClock is the clock a row keeps after an event that is not older than it: the
// newer of the two, so an event without a clock leaves the row's in place.
func laterClock(event, row *time.Time) *time.Time {
	if event == nil || (row != nil && row.After(*event)) {
		return row
	}
	return event
}
