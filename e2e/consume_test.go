//go:build integration

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// TestRedeliveryHasNoSecondEffect republishes the last delivery of a pull request once it
// was applied: applying it again would write the row again.
func TestRedeliveryHasNoSecondEffect(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, nil)
	events, err := payloads.Lifecycle(1)
	require.NoError(t, err)
	s.Publish(0, events...)
	s.StartWorker()
	s.waitFor("the lifecycle applied", time.Minute, func() bool { return s.deliveries() == int64(len(events)) })
	before := loadPR(t, s, events[0].Entity)
	require.Equal(t, "closed", before.State)

	// The last event of the pull request: its clock equals the row's, so only the ledger
	// can tell that it was applied already (an older one would be stale by its clock).
	closed := events[5]
	require.Equal(t, "closed", closed.Action)
	require.Equal(t, events[0].Entity, closed.Entity)
	s.Publish(0, closed)
	marker, err := payloads.Build("push", "", nil)
	require.NoError(t, err)
	marker.Queue = "pull_requests" // behind the redelivery on the same queue
	s.Publish(0, marker)
	s.waitFor("the marker behind the redelivery", time.Minute, func() bool { return s.deliveries() == int64(len(events))+1 })

	after := loadPR(t, s, events[0].Entity)
	require.Equal(t, before.State, after.State)
	require.Equal(t, before.LastDeliveryID, after.LastDeliveryID)
	require.Equal(t, before.ProcessingState, after.ProcessingState)
	require.True(t, before.UpdatedAt.Equal(after.UpdatedAt), "the row was not written again")
	require.Equal(t, 0, s.Counts(0, "pull_requests")["pull_requests"])
}

// TestTransientFailureComesBackThroughRetry makes one delivery fail on its own (a trigger
// refuses it while a flag is set): it must go to -retry, come back after RETRY_TTL and be
// applied once the cause is gone; with the cause kept, it ends in -error after
// MAX_RETRY_CYCLES.
func TestTransientFailureComesBackThroughRetry(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1, nil)
	require.NoError(t, s.DB.Exec(`
		CREATE TABLE test_refuse (delivery_id text primary key);
		CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM test_refuse WHERE delivery_id = NEW.delivery_id) THEN
				RAISE EXCEPTION 'refused by test for %', NEW.delivery_id;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_refuse BEFORE INSERT OR UPDATE ON github_deliveries
			FOR EACH ROW EXECUTE FUNCTION test_refuse();`).Error)

	transient, err := payloads.Build("push", "", nil)
	require.NoError(t, err)
	permanent, err := payloads.Build("push", "", nil)
	require.NoError(t, err)
	other, err := payloads.Build("push", "", nil)
	require.NoError(t, err)
	require.NoError(t, s.DB.Exec("INSERT INTO test_refuse VALUES (?), (?)", transient.DeliveryID, permanent.DeliveryID).Error)

	s.Publish(0, transient, permanent, other)
	s.StartWorker()
	s.waitFor("the healthy neighbour applied", time.Minute, func() bool { return outcome(s, other.DeliveryID) == models.OutcomeApplied })
	s.waitFor("the transient failure retried once", time.Minute, func() bool { return retried(t, s, transient.DeliveryID) })
	require.NoError(t, s.DB.Exec("DELETE FROM test_refuse WHERE delivery_id = ?", transient.DeliveryID).Error)

	s.waitFor("the transient failure applied after its retry", time.Minute, func() bool {
		return outcome(s, transient.DeliveryID) == models.OutcomeApplied
	})
	var d models.Delivery
	require.NoError(t, s.DB.First(&d, "delivery_id = ?", transient.DeliveryID).Error)
	require.GreaterOrEqual(t, d.RetryCycles, 1, "it came back through pushes-retry")

	s.waitFor("the permanent failure in -error", time.Minute, func() bool { return s.Counts(0, "pushes-error")["pushes-error"] == 1 })
	require.Contains(t, errorReason(t, s, "pushes-error"), "refused by test")
	require.Equal(t, 0, s.Counts(0, "pushes-retry")["pushes-retry"])
}

func outcome(s *stack, id string) models.DeliveryOutcome {
	var d models.Delivery
	if err := s.DB.Where("delivery_id = ?", id).Limit(1).Find(&d).Error; err != nil {
		return ""
	}
	return d.Outcome
}

// retried tells whether a message has been through the -retry queue: it is either waiting
// there now or already back with an x-death count.
func retried(t *testing.T, s *stack, id string) bool {
	if s.Counts(0, "pushes-retry")["pushes-retry"] > 0 {
		return true
	}
	var d models.Delivery
	return s.DB.Where("delivery_id = ? AND retry_cycles > 0", id).Limit(1).Find(&d).Error == nil && d.DeliveryID != ""
}

func loadPR(t *testing.T, s *stack, entity string) models.PullRequest {
	t.Helper()
	var pr models.PullRequest
	require.NoError(t, s.DB.First(&pr, "node_id = ?", strings.TrimPrefix(entity, "pull_request:")).Error)
	return pr
}

// errorReason reads the reason header of the first message in an -error queue and puts
// the message back.
func errorReason(t *testing.T, s *stack, queue string) string {
	t.Helper()
	ch, err := s.Direct.Channel(context.Background(), 0)
	require.NoError(t, err)
	defer ch.Close()
	msg, ok, err := ch.Get(queue, false)
	require.NoError(t, err)
	require.True(t, ok, "%s holds a message", queue)
	defer func() { require.NoError(t, msg.Nack(false, true)) }()
	reason, _ := msg.Headers["x-error-reason"].(string)
	return reason
}
