//go:build integration

package ingest

import (
	"context"
	"math"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// Applying an installation event makes a row of each repository it lists: a 4 MiB body
// held 19 times its size live (36 times in heap) while its batch was applied, outside the
// memory bound, which counted 4 for decoding. Folding and writing a statement's worth of
// rows at a time, and changes that build their row when folded, hold it to
// config.ApplyFactor, which WorstCaseMemory counts for every batch part being handled.
func TestApplyingTheCostliestBodyStaysWithinApplyFactor(t *testing.T) {
	const size = 4 << 20
	for _, event := range []string{"installation", "installation_repositories"} {
		t.Run(event, func(t *testing.T) {
			ev, err := payloads.RepositoryList(event, size)
			require.NoError(t, err)
			// What else the process does meanwhile (a connection's reader, the garbage of
			// the tests before) only ever adds to a sample: the least of two applications,
			// each to a database of its own, is the nearer to what applying the body holds.
			held := uint64(math.MaxUint64)
			for range 2 {
				e := newEnv(t)
				d := delivery(event, "d-"+event, ev.Body)
				var verdicts []broker.Verdict
				sample := testenv.PeakHeap(func() {
					verdicts, err = e.ing.ForBroker(0).HandleBatch(context.Background(), queue, []amqp.Delivery{d})
				})
				require.NoError(t, err)
				require.Equal(t, []broker.Verdict{{Outcome: broker.Ack}}, verdicts)
				var n int64
				require.NoError(t, e.db.Raw("SELECT count(*) FROM github_repositories").Scan(&n).Error)
				assert.Greater(t, n, int64(size/64-100), "every listed repository is a row")
				held = min(held, sample)
			}
			t.Logf("%s: a body of %d bytes held %d bytes (%.1f×) while applied", event, len(ev.Body), held, float64(held)/float64(len(ev.Body)))
			assert.LessOrEqual(t, held, uint64(config.ApplyFactor*len(ev.Body)),
				"applying a body of %d bytes held %d (%.1f×)", len(ev.Body), held, float64(held)/float64(len(ev.Body)))
		})
	}
}
