package e2e

import (
	"github.com/brokerswitch/brokerswitch/payloads"
)

// expectedRow is what the typed table must hold for an entity after its events were
// applied in publish order. It is computed from the published events alone, with the
// Processing State rules written out again here, independently of the handlers.
type expectedRow struct {
	LastDeliveryID  string
	LastAction      string
	State           string
	ProcessingState string
}

// expectRows replays the events of pull requests and issues in publish order.
func expectRows(events []payloads.Event) map[string]expectedRow {
	rows := map[string]expectedRow{}
	for _, ev := range events {
		if ev.Entity == "" {
			continue
		}
		row, exists := rows[ev.Entity]
		row.LastDeliveryID, row.LastAction = ev.DeliveryID, ev.Action
		switch {
		case ev.Action == "opened" && exists:
			row.State, row.ProcessingState = "open", "RE_REQUESTED"
		case ev.Action == "opened":
			row.State, row.ProcessingState = "open", "NEW"
		case ev.Action == "reopened":
			row.State, row.ProcessingState = "open", "RE_REQUESTED"
		case ev.Action == "closed":
			row.State, row.ProcessingState = "closed", "UPDATED"
		case row.State == "closed":
			// Another action after closed leaves state and processing state alone.
		default:
			row.ProcessingState = "UPDATED"
			if !exists {
				row.State = "open"
			}
		}
		rows[ev.Entity] = row
	}
	return rows
}
