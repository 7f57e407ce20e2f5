package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// repositoryListBody is an event body of about size bytes that lists as many
// repositories as the decoder lets a body of that size list (one per 64 bytes), each
// with the columns an installation payload carries: the costliest body to apply per byte,
// since every element becomes a row.
func repositoryListBody(size int, head, list string) []byte {
	var b strings.Builder
	b.WriteString(head + `,"` + list + `":[`)
	for i := 1; b.Len() < size-64; i++ {
		if i > 1 {
			b.WriteByte(',')
		}
		e := fmt.Sprintf(`{"id":%d,"node_id":"R%d","name":"r","full_name":"o/r"}`, i, i)
		b.WriteString(e + strings.Repeat(" ", max(0, 63-len(e))))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// Applying an installation event makes a row of each repository it lists: a 4 MiB body
// held 19 times its size live (36 times in heap) while its batch was applied, outside the
// memory bound, which counted 4 for decoding. Folding and writing a statement's worth of
// rows at a time, and changes that build their row when folded, hold it to
// config.ApplyFactor, which WorstCaseMemory counts for every batch part being handled.
func TestApplyingTheCostliestBodyStaysWithinApplyFactor(t *testing.T) {
	const size = 4 << 20
	e := newEnv(t)
	h := e.ing.ForBroker(0)
	for _, c := range []struct{ event, body string }{
		{"installation", string(repositoryListBody(size, `{"action":"created","installation":{"id":1,"account":{"login":"o"}}`, "repositories"))},
		{"installation_repositories", string(repositoryListBody(size, `{"action":"removed","installation":{"id":1,"account":{"login":"o"}}`, "repositories_removed"))},
	} {
		t.Run(c.event, func(t *testing.T) {
			d := delivery(c.event, "d-"+c.event, []byte(c.body))
			var verdicts []broker.Verdict
			var err error
			held := testenv.PeakHeap(func() { verdicts, err = h.HandleBatch(context.Background(), queue, []amqp.Delivery{d}) })
			require.NoError(t, err)
			require.Equal(t, []broker.Verdict{{Outcome: broker.Ack}}, verdicts)
			t.Logf("%s: a body of %d bytes held %d bytes (%.1f×) while applied", c.event, len(c.body), held, float64(held)/float64(len(c.body)))
			assert.LessOrEqual(t, held, uint64(config.ApplyFactor*len(c.body)),
				"applying a body of %d bytes held %d (%.1f×)", len(c.body), held, float64(held)/float64(len(c.body)))
		})
	}
	var n int64
	require.NoError(t, e.db.Raw("SELECT count(*) FROM github_repositories").Scan(&n).Error)
	assert.Greater(t, n, int64(size/64-100), "every listed repository is a row")
}
