//go:build integration

package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// TestSetBasedApplyEqualsOneByOne applies random sequences of vendored events aimed at a
// few entities, once in random batches and once one delivery per batch, and requires
// identical tables. The sequences mix lifecycle actions in any order (synchronize after
// closed, reopened, opened again), redeliveries, changing senders, ignored events and
// malformed ones, so that one batch often changes the same row several times.
func TestSetBasedApplyEqualsOneByOne(t *testing.T) {
	batched, oneByOne := twinEnvs(t)
	seed, rng := seeded(t, 1)
	examples := payloads.All()
	ctx := context.Background()
	for round := range 15 {
		for _, e := range []*env{batched, oneByOne} {
			require.NoError(t, e.db.Exec("TRUNCATE "+joinTables()).Error)
		}
		seq := randomSequence(t, rng, examples, round, 30+rng.IntN(40))

		for start := 0; start < len(seq); {
			end := min(len(seq), start+1+rng.IntN(40))
			_, err := batched.ing.ForBroker(0).HandleBatch(ctx, queue, seq[start:end])
			require.NoError(t, err)
			start = end
		}
		for _, d := range seq {
			_, err := oneByOne.ing.ForBroker(0).HandleBatch(ctx, queue, []amqp.Delivery{d})
			require.NoError(t, err)
		}
		for _, table := range modelstest.GitHubTables() {
			want, got := dump(t, oneByOne, table), dump(t, batched, table)
			require.Equal(t, want, got, "round %d (seed %d): %s differs between one-by-one and set-based apply", round, seed, table)
		}
	}
}

// twinEnvs are two environments whose every batch reads one instant: two runs of the
// same events make different numbers of batches, and the timestamps would otherwise
// tell them apart.
func twinEnvs(t *testing.T) (*env, *env) {
	a, b := newEnv(t), newEnv(t)
	at := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	a.ing.Now = func() time.Time { return at }
	b.ing.Now = a.ing.Now
	return a, b
}

// seeded is a random source from a fresh seed, which the test logs for a replay.
func seeded(t *testing.T, stream uint64) (uint64, *rand.Rand) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return seed, rand.New(rand.NewPCG(seed, stream))
}

func joinTables() string {
	out := ""
	for i, t := range modelstest.GitHubTables() {
		if i > 0 {
			out += ", "
		}
		out += t
	}
	return out
}

// dump returns a table's rows as JSON, in a stable order.
func dump(t *testing.T, e *env, table string) []string {
	t.Helper()
	var rows []string
	require.NoError(t, e.db.Raw("SELECT to_jsonb(t)::text AS j FROM "+table+" t ORDER BY 1").Scan(&rows).Error)
	return rows
}

// randomSequence builds n deliveries from the vendored examples, edited so that they hit
// two pull requests, two issues, two comments, two refs, two installations and two
// repositories, sent by two accounts that change their login.
func randomSequence(t *testing.T, rng *rand.Rand, examples []payloads.Example, round, n int) []amqp.Delivery {
	t.Helper()
	var seq []amqp.Delivery
	for i := range n {
		if len(seq) > 0 && rng.IntN(10) == 0 {
			seq = append(seq, seq[rng.IntN(len(seq))]) // a redelivery
			continue
		}
		id := fmt.Sprintf("r%d-%d", round, i)
		if rng.IntN(25) == 0 {
			seq = append(seq, delivery("issues", id, []byte(`{"action": "opened"`)))
			continue
		}
		ex := examples[rng.IntN(len(examples))]
		seq = append(seq, delivery(ex.Event, id, edit(t, ex.Body, func(p map[string]any) {
			aim(rng, ex.Event, p)
		})))
	}
	return seq
}

// aim points an example's payload at the small set of entities the sequences share.
func aim(rng *rand.Rand, event string, p map[string]any) {
	pick := func(values ...any) any { return values[rng.IntN(len(values))] }
	if s, ok := p["sender"].(map[string]any); ok {
		s["id"] = pick(json.Number("1"), json.Number("2"))
		s["login"] = pick("alice", "bob")
	}
	if r, ok := p["repository"].(map[string]any); ok {
		r["id"] = pick(json.Number("186853002"), json.Number("186853007"))
	}
	if inst, ok := p["installation"].(map[string]any); ok {
		inst["id"] = pick(json.Number("11"), json.Number("12"))
	}
	tracked := func(key string, otherAction string) {
		obj := p[key].(map[string]any)
		obj["node_id"] = pick(key+"_a", key+"_b")
		action := pick("opened", "closed", "reopened", otherAction).(string)
		p["action"] = action
		switch action {
		case "closed":
			obj["state"] = "closed"
		case "opened", "reopened":
			obj["state"] = "open"
		default:
			obj["state"] = pick("open", "closed")
		}
		obj["title"] = pick("one", "two", "three")
	}
	switch event {
	case "pull_request":
		tracked("pull_request", "synchronize")
	case "issues":
		tracked("issue", "edited")
	case "issue_comment", "commit_comment", "pull_request_review_comment":
		c := p["comment"].(map[string]any)
		c["node_id"] = pick("comment_a", "comment_b")
		c["body"] = pick("first", "second")
	case "pull_request_review":
		r := p["review"].(map[string]any)
		r["node_id"] = pick("comment_a", "review_b")
		r["state"] = pick("approved", "commented")
	case "create", "delete":
		p["ref"] = pick("main", "feature")
		p["ref_type"] = pick("branch", "tag")
	case "repository":
		p["action"] = pick("created", "edited", "archived", "deleted")
	case "installation":
		p["action"] = pick("created", "deleted", "suspend", "unsuspend", "new_permissions_accepted")
	}
}
