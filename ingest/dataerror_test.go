//go:build integration

package ingest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/models"
)

// A payload Postgres cannot store fails the same way every time: it goes to -error on its
// first failure, with Postgres' reason, instead of after MAX_RETRY_CYCLES trips through
// -retry. The rest of its batch is applied.
func TestDataErrorIsRejectedAtOnce(t *testing.T) {
	e := newEnv(t)
	good := delivery("pull_request", "good-1", example(t, "pull_request.opened.0"))
	bad := delivery("issue_comment", "bad-1", nulComment(t))

	got := e.handle(t, good, bad)
	assert.Equal(t, broker.Verdict{Outcome: broker.Ack}, got[0])
	assert.Equal(t, broker.Reject, got[1].Outcome, "rejected on its first failure, with no retry cycle")
	assert.Contains(t, got[1].Reason, "cannot store this payload")
	// A NUL in text is 22021; the tables with a clock send their rows to Postgres as
	// jsonb (rowSet.flushClocked), which refuses it as 22P05.
	assert.Regexp(t, `SQLSTATE 22(021|P05)`, got[1].Reason, "the reason carries Postgres' error")
	failed := e.ledger(t, "bad-1")
	assert.Equal(t, models.OutcomeError, failed.Outcome)
	assert.Regexp(t, `SQLSTATE 22(021|P05)`, failed.ErrorReason)
	assert.Equal(t, int64(1), e.count(t, "github_pull_requests"))
}

// longText is text no btree index row can hold: random, so it does not compress.
func longText(t *testing.T) string {
	b := make([]byte, 4<<10)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// An owner, a repository name or a ref longer than a btree index row is stored: the
// indexes over them hold a hash (migration 0003), so no such payload fails.
func TestLongTextInIndexedColumnsApplies(t *testing.T) {
	e := newEnv(t)
	long := longText(t)
	longRepo := func(p map[string]any) {
		repo := object(p, "repository")
		repo["name"] = long
		object(repo, "owner")["login"] = long
	}
	withRef := func(name string) []byte {
		return edit(t, example(t, name), func(p map[string]any) { longRepo(p); p["ref"] = long })
	}
	batch := []amqp.Delivery{
		delivery("repository", "d-1", edit(t, example(t, "repository.created.0"), longRepo)),
		delivery("pull_request", "d-2", edit(t, example(t, "pull_request.opened.0"), longRepo)),
		delivery("issues", "d-3", edit(t, example(t, "issues.opened.0"), longRepo)),
		delivery("push", "d-4", withRef("push.none.4")),
		delivery("create", "d-5", withRef("create.none.0")),
	}
	assert.Equal(t, acks(len(batch)), e.handle(t, batch...))
	// The branch's row is found again by its long ref: updated, not duplicated.
	assert.Equal(t, acks(1), e.handle(t, delivery("delete", "d-6", withRef("create.none.0"))))

	var b models.Branch
	require.NoError(t, e.db.Take(&b, "ref = ?", long).Error)
	assert.True(t, b.Deleted)
	assert.Equal(t, "d-6", b.LastDeliveryID)
	assert.Equal(t, int64(1), e.count(t, "github_branches"))
	var repo models.Repository
	require.NoError(t, e.db.Take(&repo, "md5(owner_login) = md5(?) AND md5(name) = md5(?)", long, long).Error)
	assert.Equal(t, long, repo.Name)
	for _, table := range []string{"github_pull_requests", "github_issues", "github_pushes"} {
		assert.Equal(t, int64(1), e.count(t, table), table)
	}
}
