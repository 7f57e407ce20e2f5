package brokerstate

import (
	"fmt"
	"time"
)

// CheckSwitchedAt refuses a switchedAt more than maxSkew (NOTIFICATION_MAX_CLOCK_SKEW)
// ahead of now; the error says why, for the producer. The mark
// of notifications taken only rises, so one dated far ahead would make every real
// notification stale until then.
func CheckSwitchedAt(at, now time.Time, maxSkew time.Duration) error {
	if ahead := at.Sub(now); ahead > maxSkew {
		return fmt.Errorf("switchedAt %s is %s ahead of this server's clock (%s), more than the %s allowed (NOTIFICATION_MAX_CLOCK_SKEW): check the producer's clock",
			at.UTC().Format(time.RFC3339), ahead.Round(time.Second), now.UTC().Format(time.RFC3339), maxSkew)
	}
	return nil
}

// Notification is the producer's word that it now publishes to the broker at Index.
type Notification struct {
	Index      int       `json:"index"`
	Host       string    `json:"host"`
	Vhost      string    `json:"vhost"`
	SwitchedAt time.Time `json:"switchedAt"`
	// From is the broker the producer left for this one, when it says: with it the
	// trail is a chain, and a hop whose word has not come yet is seen at once.
	From *Hop `json:"from,omitempty"`
}

// Notification outcomes, as the API reports them.
const (
	NotificationRecorded      = "recorded"
	NotificationStale         = "stale"
	NotificationAlreadyActive = "already-active"
	NotificationRouteCanceled = "route-canceled"
)
