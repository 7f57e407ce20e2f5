package ingest

import (
	"github.com/brokerswitch/brokerswitch/models"
)

// addSender records the event's sender in github_users. An existing row changes (and
// becomes UPDATED) only when the account itself changed, so readers are not woken by every
// event a user sends.
func (w *writes) addSender(ev Event) {
	u := ev.Sender
	if u == nil || u.ID == 0 {
		return
	}
	incoming := models.User{
		ID:        u.ID,
		NodeID:    u.NodeID,
		Login:     u.Login,
		Type:      u.Type,
		SiteAdmin: u.SiteAdmin,
		HTMLURL:   u.HTMLURL,
	}
	now := w.now
	w.users.add(incoming.ID, func(cur *models.User) *models.User {
		row := incoming
		if cur == nil {
			row.Tracking = newTracking(ev, now)
			return &row
		}
		if cur.NodeID == row.NodeID && cur.Login == row.Login && cur.Type == row.Type &&
			cur.SiteAdmin == row.SiteAdmin && cur.HTMLURL == row.HTMLURL {
			return nil
		}
		row.Tracking = cur.Tracking
		touch(&row.Tracking, ev, now, models.StateUpdated)
		return &row
	})
}
