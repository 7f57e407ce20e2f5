//go:build integration

package ingest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/models"
)

// An event that sets a processing state replaces a reader's PROCESSING and counts a new
// version, so the reader's finish at the old version is refused; an event older than the
// row by GitHub's clock changes nothing and leaves the reader's claim standing.
func TestEventOverAReadersClaim(t *testing.T) {
	e := newEnv(t)
	life := prLifecycle(t)
	claim := func() int64 {
		t.Helper()
		pr := e.pullRequest(t)
		require.NoError(t, e.db.Exec("UPDATE github_pull_requests SET processing_state = 'PROCESSING' WHERE node_id = ?", prNode).Error)
		return pr.ProcessingVersion
	}

	e.handle(t, life[0]) // opened
	require.Positive(t, e.pullRequest(t).ProcessingVersion)
	claimed := claim()
	e.handle(t, life[1]) // synchronize
	pr := e.pullRequest(t)
	require.Equal(t, models.StateUpdated, pr.ProcessingState, "the event's state replaces PROCESSING")
	require.Equal(t, claimed+1, pr.ProcessingVersion)

	e.handle(t, life[2]) // closed
	claimed = claim()
	e.handle(t, life[3]) // a late synchronize, older than the close by its clock
	pr = e.pullRequest(t)
	require.Equal(t, models.StateProcessing, pr.ProcessingState, "no state to set: the claim stands")
	require.Equal(t, claimed, pr.ProcessingVersion)
	require.Equal(t, "pr-3", pr.LastDeliveryID, "an older event changes nothing, last_* included")
}
