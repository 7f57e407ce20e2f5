//go:build integration

package models

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"
)

// keyedIDs are delivery ids of every kind the key tells apart, with the key each gets and
// its version: GitHub's time-based GUID becomes its version-6 form, another GUID keeps
// its value, and what is not a lower-case GUID (or would pass for one the other two cases
// make) is hashed to version 8.
var keyedIDs = []struct {
	id, key string
	version int
}{
	{"72d3162e-cc78-11e3-81ab-4c9367dc0958", "1e3cc787-2d31-662e-81ab-4c9367dc0958", 6},
	{"0b989ba4-242f-11e5-81e1-c7b6966d2516", "1e5242f0-b989-6ba4-81e1-c7b6966d2516", 6},
	{"9b2c6a0e-8c8f-4d1e-9f3a-2b7c1d0e5f64", "9b2c6a0e-8c8f-4d1e-9f3a-2b7c1d0e5f64", 4},
	{"01890a5d-ac96-774b-bcce-b302099a8057", "01890a5d-ac96-774b-bcce-b302099a8057", 7},
	{"72D3162E-CC78-11E3-81AB-4C9367DC0958", "", 8},
	{"1e3cc787-2d31-662e-81ab-4c9367dc0958", "", 8},
	{"72d3162e-cc78-81e3-81ab-4c9367dc0958", "", 8},
	{"72d3162e-cc78-11e3-01ab-4c9367dc0958", "", 8},
	{"d-1", "", 8},
	{"", "", 8},
	{"délivrance ✓", "", 8},
}

// Migration 0008 replaces the text key of a ledger that holds rows by the uuid key: every
// row stays as it was, each gets the key of its kind, and the key refuses a second row
// for an id while telling ids apart exactly as their text does. Down restores the text key.
func TestMigration0008KeysExistingLedger(t *testing.T) {
	ctx := context.Background()
	db, provider := migratedTo(t, 7)

	insert := `INSERT INTO github_deliveries (delivery_id, event, queue, broker_index, outcome, received_at, payload_sha256)
		VALUES (?, 'issues', 'issues', 0, ?, ?, sha256(?::bytea))`
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i, k := range keyedIDs {
		require.NoError(t, db.Exec(insert, k.id, "applied", start.Add(time.Duration(i)*time.Second), k.id).Error)
	}
	// GitHub's GUIDs of a day, received in order, and as many random ones.
	require.NoError(t, db.Exec(`INSERT INTO github_deliveries (delivery_id, event, queue, broker_index, outcome, received_at)
		SELECT substr(t, 8, 8) || '-' || substr(t, 4, 4) || '-1' || substr(t, 1, 3) || '-8' || lpad(to_hex(g), 3, '0') || '-0242ac120002',
		       'push', 'pushes', 0, 'applied', at
		  FROM generate_series(1, 2000) g,
		       LATERAL (SELECT ?::timestamptz + g * interval '40 seconds' AS at) AS received,
		       LATERAL (SELECT lpad(to_hex((extract(epoch FROM at) * 10000000)::bigint + 122192928000000000), 15, '0') AS t) AS stamp`,
		start).Error)
	require.NoError(t, db.Exec(`INSERT INTO github_deliveries (delivery_id, event, queue, broker_index, outcome, error_reason, received_at)
		SELECT gen_random_uuid()::text, 'push', 'pushes', 1, 'error', 'boom', ? FROM generate_series(1, 2000)`, start).Error)
	before := ledgerDump(t, db)
	require.Len(t, before, len(keyedIDs)+4000)

	_, err := provider.UpTo(ctx, 8)
	require.NoError(t, err)

	assert.Equal(t, before, ledgerDump(t, db), "every row as it was")
	var keys struct{ Rows, Keys int }
	require.NoError(t, db.Raw(`SELECT count(*) AS rows, count(DISTINCT github_delivery_key(delivery_id)) AS keys FROM github_deliveries`).Scan(&keys).Error)
	assert.Equal(t, keys.Rows, keys.Keys, "one key per id")
	for _, k := range keyedIDs {
		var got struct {
			Key     string
			Version int
		}
		require.NoError(t, db.Raw(`SELECT github_delivery_key(?)::text AS key, get_byte(uuid_send(github_delivery_key(?)), 6) >> 4 AS version`,
			k.id, k.id).Scan(&got).Error)
		assert.Equal(t, k.version, got.Version, "version of the key of %q", k.id)
		if k.key != "" {
			assert.Equal(t, k.key, got.Key, "key of %q", k.id)
		}
	}
	// GitHub's GUIDs sort by the time they were made, so the newest claims the last page.
	var outOfOrder int
	require.NoError(t, db.Raw(`SELECT count(*) FROM (
		SELECT received_at < lag(received_at) OVER (ORDER BY github_delivery_key(delivery_id)) AS back
		  FROM github_deliveries WHERE event = 'push' AND outcome = 'applied') AS ordered WHERE back`).Scan(&outOfOrder).Error)
	assert.Zero(t, outOfOrder, "keys of time-based GUIDs in time order")

	var indexes []string
	require.NoError(t, db.Raw(`SELECT indexname || ': ' || indexdef FROM pg_indexes WHERE tablename = 'github_deliveries' ORDER BY indexname`).
		Scan(&indexes).Error)
	assert.Equal(t, []string{
		"github_deliveries_errors_idx: CREATE INDEX github_deliveries_errors_idx ON public.github_deliveries USING btree (received_at) WHERE (outcome = 'error'::text)",
		"github_deliveries_key_idx: CREATE UNIQUE INDEX github_deliveries_key_idx ON public.github_deliveries USING btree (github_delivery_key(delivery_id))",
		"github_deliveries_received_at_idx: CREATE INDEX github_deliveries_received_at_idx ON public.github_deliveries USING btree (received_at)",
	}, indexes, "the text key is gone")

	claim := `INSERT INTO github_deliveries (delivery_id, event, queue, broker_index, outcome, received_at)
		VALUES (?, 'issues', 'issues', 0, 'applied', now()) ON CONFLICT ((github_delivery_key(delivery_id))) DO NOTHING`
	for _, k := range keyedIDs {
		res := db.Exec(claim, k.id)
		require.NoError(t, res.Error)
		assert.Zero(t, res.RowsAffected, "%q is claimed already", k.id)
	}
	res := db.Exec(claim, "72d3162e-cc78-11e3-81ab-4c9367dc0959")
	require.NoError(t, res.Error)
	assert.EqualValues(t, 1, res.RowsAffected, "a new id is claimed")
	var plan string
	require.NoError(t, db.Raw(`EXPLAIN SELECT payload_sha256 FROM github_deliveries
		WHERE github_delivery_key(delivery_id) = github_delivery_key('d-1')`).Row().Scan(&plan))
	assert.Contains(t, plan, "github_deliveries_key_idx", "a lookup by key uses the index")

	_, err = provider.DownTo(ctx, 7)
	require.NoError(t, err)
	require.NoError(t, db.Raw(`SELECT indexname FROM pg_indexes WHERE tablename = 'github_deliveries' ORDER BY indexname`).Scan(&indexes).Error)
	assert.Equal(t, []string{"github_deliveries_errors_idx", "github_deliveries_pkey", "github_deliveries_received_at_idx"}, indexes)
	_, err = provider.UpTo(ctx, 8)
	require.NoError(t, err, "up again after down")
}

// ledgerDump is every ledger row as text, by delivery id.
func ledgerDump(t *testing.T, db *gorm.DB) map[string]string {
	t.Helper()
	var rows []struct{ DeliveryID, Row string }
	require.NoError(t, db.Raw(`SELECT delivery_id, d::text AS row FROM github_deliveries d`).Scan(&rows).Error)
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[r.DeliveryID] = r.Row
	}
	require.Len(t, out, len(rows), fmt.Sprintf("%d rows, distinct ids", len(rows)))
	return out
}
