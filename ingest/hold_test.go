//go:build integration

package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/brokerstate"
)

// A consumer window's batch commits only while its broker is active: once a switch has
// committed, the batch of the broker we left is given back whole, unsettled, and nothing
// of it is written, not even a failure row, however stale the window's view of the state.
func TestABatchOfABrokerNoLongerActiveIsGivenBack(t *testing.T) {
	e := newEnv(t)
	store := &brokerstate.Store{DB: e.db, Brokers: []brokerstate.Ref{{Host: "a", Vhost: "/"}, {Host: "b", Vhost: "/"}}}
	e.ing.Active = store
	ctx := context.Background()

	assert.Equal(t, acks(1), e.handleWith(t, e.ing.ForActive(0), delivery("issues", "d-0", example(t, "issues.opened.0"))))

	at := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return st.Force(1, at, at), nil })
	require.NoError(t, err)

	verdicts, err := e.ing.ForActive(0).HandleBatch(ctx, queue, threeEvents(t))
	require.ErrorIs(t, err, brokerstate.ErrNotActive)
	assert.Nil(t, verdicts, "nothing is settled")
	assert.Equal(t, int64(1), e.count(t, "github_deliveries"), "only the batch read while a was active is in the ledger")
	assert.Zero(t, e.count(t, "github_pushes"))

	// A Leftover Drain reads the broker we left as a spare: no hold.
	assert.Equal(t, acks(3), e.handleWith(t, e.ing.ForBroker(0), threeEvents(t)...))
	assert.Equal(t, acks(1), e.handleWith(t, e.ing.ForActive(1), delivery("issues", "d-4", example(t, "issues.opened.0"))))
}

// A batch's checks end its transaction: a batch of a spare that became active since its
// drain began is given back whole, unsettled, with nothing of it written. (The queue's
// fencing token refuses the same way: lease's TestATakeOverRefusesTheLateCommitsOfTheAttemptBefore.)
func TestABatchWhoseCheckRefusesIsGivenBack(t *testing.T) {
	e := newEnv(t)
	store := &brokerstate.Store{DB: e.db, Brokers: []brokerstate.Ref{{Host: "a", Vhost: "/"}, {Host: "b", Vhost: "/"}}}
	e.ing.Active = store
	ctx := context.Background()

	assert.Equal(t, acks(1), e.handleWith(t, e.ing.ForBroker(1, store.SpareCheck(1)), delivery("issues", "d-0", example(t, "issues.opened.0"))))
	at := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return st.Force(1, at, at), nil })
	require.NoError(t, err)

	verdicts, err := e.ing.ForBroker(1, store.SpareCheck(1)).HandleBatch(ctx, queue, threeEvents(t))
	require.ErrorIs(t, err, brokerstate.ErrNotSpare)
	assert.Nil(t, verdicts, "nothing is settled")
	assert.Equal(t, int64(1), e.count(t, "github_deliveries"))

	// A spare that is not active, and on no route, takes the batch.
	assert.Equal(t, acks(3), e.handleWith(t, e.ing.ForBroker(0, store.SpareCheck(0)), threeEvents(t)...))
}
