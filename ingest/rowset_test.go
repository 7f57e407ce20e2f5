//go:build integration

package ingest

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/models"
)

// A batch with more than maxRowsPerStatement rows of a table with a clock is read, folded
// and written a statement's worth of keys at a time, each part seeing what the ones before
// it wrote. A row that several of the batch's events change, at the cut, must end as it
// does when the batch fits one statement.
func TestARowAtAStatementsCutEndsAsInOneStatement(t *testing.T) {
	cut, whole := twinEnvs(t)
	const repo = 186853261 // the repository of the examples, above every padding id
	seed := withClock(t, example(t, "repository.edited.0"), "repository", "updated_at", "2019-05-15T15:20:00Z")
	renamed := edit(t, withClock(t, example(t, "repository.renamed.0"), "repository", "updated_at", "2019-05-15T15:30:00Z"),
		func(p map[string]any) { object(p, "repository")["name"] = "renamed" })
	archived := edit(t, withClock(t, example(t, "repository.edited.0"), "repository", "updated_at", "2019-05-15T15:40:00Z"),
		func(p map[string]any) {
			r := object(p, "repository")
			r["name"], r["archived"] = "renamed", true
		})
	// An installation that lists maxRowsPerStatement-1 new repositories, so that the stored
	// repository is the first statement's last row.
	padding := func(n int) []byte {
		return edit(t, example(t, "installation.created.0"), func(p map[string]any) {
			repos := make([]any, 0, n)
			for id := 1; id <= n; id++ {
				repos = append(repos, map[string]any{"id": json.Number(strconv.Itoa(id)), "node_id": "R" + strconv.Itoa(id),
					"name": "r" + strconv.Itoa(id), "full_name": "Codertocat/r" + strconv.Itoa(id), "private": false})
			}
			p["repositories"] = repos
		})
	}
	for _, e := range []*env{cut, whole} {
		e.handle(t, delivery("repository", "seed", seed))
	}
	cut.handle(t, delivery("installation", "pad", padding(maxRowsPerStatement-1)),
		delivery("repository", "renamed", renamed), delivery("repository", "archived", archived))
	whole.handle(t, delivery("installation", "pad", padding(1)),
		delivery("repository", "renamed", renamed), delivery("repository", "archived", archived))

	var got, want models.Repository
	require.NoError(t, cut.db.Take(&got, "id = ?", repo).Error)
	require.NoError(t, whole.db.Take(&want, "id = ?", repo).Error)
	assert.Equal(t, "renamed", got.Name)
	assert.True(t, got.Archived)
	assert.Equal(t, want, got, "the row at the cut differs from the same batch in one statement")
	assert.EqualValues(t, maxRowsPerStatement-1, cut.count(t, "github_repositories")-1)
}
