//go:build integration

package brokerstate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/brokerstate"
)

// The API's broker list (a ConfigMap) and the workers' (the Secret) are kept in the same
// order by hand; out of step, POST /switch/:index forced a broker other than the one the
// API showed. The API now checks its list against the one the workers recorded at start.
func TestTheAPIsBrokerListIsCheckedAgainstTheWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openMigrated(t)
	list := func(refs ...brokerstate.Ref) *brokerstate.Store {
		return &brokerstate.Store{DB: db, Brokers: refs}
	}
	require.NoError(t, list(brokerB, brokerA).CheckBrokerList(ctx), "no worker has recorded a list yet")

	require.NoError(t, list(brokerA, brokerB).RecordBrokerList(ctx))
	require.NoError(t, list(brokerA, brokerB).CheckBrokerList(ctx))

	err := list(brokerB, brokerA).CheckBrokerList(ctx)
	require.ErrorContains(t, err, "the broker list differs from the workers'")
	require.ErrorContains(t, err, "broker #0 is "+brokerB.Host+"/"+brokerB.Vhost+" here but "+brokerA.Host+"/"+brokerA.Vhost+" for the workers")
	require.ErrorContains(t, list(brokerA).CheckBrokerList(ctx), "the workers have broker #1")
	require.ErrorContains(t, list(brokerA, brokerB, brokerC).CheckBrokerList(ctx), "this list has broker #2")

	require.NoError(t, list(brokerA, brokerB, brokerC).RecordBrokerList(ctx), "a worker started with a new list")
	require.NoError(t, list(brokerA, brokerB, brokerC).CheckBrokerList(ctx))
}
