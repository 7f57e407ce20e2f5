package ingest

import (
	"strings"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/brokerswitch/brokerswitch/models"
)

// repoRef is the repository identity every typed row carries.
type repoRef struct {
	ID    int64
	Owner string
	Name  string
}

func refOf(r *repository) repoRef {
	return repoRef{ID: r.ID, Owner: ownerOf(r.Owner.Login, r.FullName), Name: r.Name}
}

// ownerOf falls back to full_name because installation events list repositories without
// their owner object.
func ownerOf(login, fullName string) string {
	if login != "" {
		return login
	}
	owner, _, _ := strings.Cut(fullName, "/")
	return owner
}

// lastAction is what last_action records: the action, or the event name for events
// without one (push, create, delete), so the column always says what happened.
func lastAction(ev Event) string {
	if ev.Action != "" {
		return ev.Action
	}
	return ev.Type
}

// newTracking is the tracking of a row the event creates.
func newTracking(ev Event, now time.Time) models.Tracking {
	return models.Tracking{
		DeliveryID:        ev.DeliveryID,
		LastDeliveryID:    ev.DeliveryID,
		LastAction:        lastAction(ev),
		ProcessingState:   models.StateNew,
		ProcessingDate:    now,
		ProcessingVersion: 1,
		CreatedAt:         now,
		UpdatedAt:         now,
	}
}

// optionalID stores GitHub's absent ids (0) as NULL.
func optionalID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

func optionalInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func timeOf(ts *github.Timestamp) *time.Time {
	if ts == nil || ts.IsZero() {
		return nil
	}
	t := ts.Time
	return &t
}

// payloadState is the state a new row takes from its payload. Some actions (issues pinned,
// unpinned) ship the entity without its state; closed_at then tells.
func payloadState(state string, closedAt *github.Timestamp) string {
	switch {
	case state != "":
		return state
	case timeOf(closedAt) != nil:
		return stateClosed
	default:
		return stateOpen
	}
}
