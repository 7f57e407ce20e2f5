package ingest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/brokerswitch/brokerswitch/models"
)

// senders collects the senders of a batch, so they are written in one statement per
// batch instead of one per event: the same few accounts send most events.
type senders map[int64]models.User

// add keeps the latest view of the event's sender; later events in queue order win.
func (s senders) add(ev Event, now time.Time) {
	u := ev.Sender
	if u.GetID() == 0 {
		return
	}
	row := models.User{
		ID:        u.GetID(),
		NodeID:    u.GetNodeID(),
		Login:     u.GetLogin(),
		Type:      u.GetType(),
		SiteAdmin: u.GetSiteAdmin(),
		HTMLURL:   u.GetHTMLURL(),
		Tracking:  newTracking(ev, now),
	}
	if prev, ok := s[row.ID]; ok {
		// Still one row: it was created by the batch's first event from this sender.
		row.DeliveryID = prev.DeliveryID
	}
	s[row.ID] = row
}

// upsert writes the collected senders. An existing row changes (and becomes UPDATED) only
// when the account itself changed, so readers are not woken by every event a user sends.
func (s senders) upsert(ctx context.Context, tx *gorm.DB) error {
	if len(s) == 0 {
		return nil
	}
	// Sorted by id so concurrent consumers lock rows in the same order.
	rows := slices.SortedFunc(maps.Values(s), func(a, b models.User) int { return cmp.Compare(a.ID, b.ID) })
	upsert := refreshOnConflict([]string{"id"}, "node_id", "login", "type", "site_admin", "html_url")
	upsert.Where = clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: "(github_users.node_id, github_users.login, github_users.type, github_users.site_admin, github_users.html_url)" +
		" IS DISTINCT FROM (excluded.node_id, excluded.login, excluded.type, excluded.site_admin, excluded.html_url)"}}}
	if err := tx.WithContext(ctx).Clauses(upsert).CreateInBatches(&rows, maxRowsPerStatement).Error; err != nil {
		return fmt.Errorf("upsert %d senders: %w", len(rows), err)
	}
	return nil
}
