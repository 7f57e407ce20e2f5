//go:build integration

package ingest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/models"
)

func TestCommentLifecycle(t *testing.T) {
	e := newEnv(t)
	const node = "MDEyOklzc3VlQ29tbWVudDQ5MjcwMDQwMA=="
	comment := func() models.Comment {
		var c models.Comment
		require.NoError(t, e.db.Take(&c, "node_id = ?", node).Error)
		return c
	}
	e.handle(t, delivery("issue_comment", "c-1", example(t, "issue_comment.created.0")))
	c := comment()
	assert.Equal(t, models.KindIssueComment, c.Kind)
	assert.Equal(t, models.StateNew, c.ProcessingState)
	assert.Equal(t, issueNode, c.ParentNodeID)
	require.NotNil(t, c.Number)
	assert.Equal(t, 1, *c.Number)
	assert.False(t, c.Deleted)

	edited := edit(t, example(t, "issue_comment.edited.0"), func(p map[string]any) {
		object(p, "comment")["body"] = "edited body"
	})
	e.handle(t, delivery("issue_comment", "c-2", edited))
	c = comment()
	assert.Equal(t, "edited body", c.Body)
	assert.Equal(t, models.StateUpdated, c.ProcessingState)
	assert.Equal(t, "c-1", c.DeliveryID)
	assert.Equal(t, "c-2", c.LastDeliveryID)
	assert.Equal(t, "edited", c.LastAction)

	e.handle(t, delivery("issue_comment", "c-3", example(t, "issue_comment.deleted.0")))
	c = comment()
	assert.True(t, c.Deleted)
	assert.Equal(t, "deleted", c.LastAction)

	e.handle(t, delivery("pull_request_review", "r-1", example(t, "pull_request_review.submitted.0")))
	var review models.Comment
	require.NoError(t, e.db.Take(&review, "kind = ?", models.KindReview).Error)
	assert.Equal(t, "commented", review.ReviewState)
	assert.Equal(t, prNode, review.ParentNodeID)
}

func TestBranchCreateAndDelete(t *testing.T) {
	e := newEnv(t)
	branch := func() models.Branch {
		var b models.Branch
		require.NoError(t, e.db.Take(&b, "repository_id = ? AND ref_type = ? AND ref = ?", 186853002, "tag", "simple-tag").Error)
		return b
	}
	e.handle(t, delivery("create", "b-1", example(t, "create.none.0")))
	b := branch()
	assert.False(t, b.Deleted)
	assert.Equal(t, "master", b.MasterBranch)
	assert.Equal(t, models.StateNew, b.ProcessingState)
	assert.Equal(t, "create", b.LastAction, "events without action record their name")

	e.handle(t, delivery("delete", "b-2", example(t, "delete.none.0")))
	b = branch()
	assert.True(t, b.Deleted)
	assert.Equal(t, "master", b.MasterBranch, "kept from create")
	assert.Equal(t, models.StateUpdated, b.ProcessingState)
	assert.Equal(t, "b-1", b.DeliveryID)
	assert.Equal(t, "b-2", b.LastDeliveryID)

	// A branch (not a tag) of the same name is a different row.
	e.handle(t, delivery("create", "b-3", edit(t, example(t, "create.none.0"), func(p map[string]any) {
		p["ref_type"] = "branch"
	})))
	assert.Equal(t, int64(2), e.count(t, "github_branches"))
}

func TestPushRow(t *testing.T) {
	e := newEnv(t)
	e.handle(t, delivery("push", "p-1", example(t, "push.none.4")))
	var p models.Push
	require.NoError(t, e.db.Take(&p, "delivery_id = ?", "p-1").Error)
	assert.Equal(t, "refs/heads/master", p.Ref)
	assert.Equal(t, 1, p.CommitCount)
	assert.Equal(t, "Codertocat", p.RepositoryOwner)
	assert.Equal(t, "Hello-World", p.RepositoryName)
	assert.NotEmpty(t, p.AfterSHA)
	assert.Equal(t, "push", p.LastAction)
	assert.Equal(t, models.StateNew, p.ProcessingState)
}

func TestInstallationLifecycle(t *testing.T) {
	e := newEnv(t)
	installation := func(id int64) models.Installation {
		var i models.Installation
		require.NoError(t, e.db.Take(&i, "id = ?", id).Error)
		return i
	}
	repository := func(id int64) models.Repository {
		var r models.Repository
		require.NoError(t, e.db.Take(&r, "id = ?", id).Error)
		return r
	}

	e.handle(t, delivery("installation", "i-1", example(t, "installation.created.0")))
	inst := installation(957387)
	assert.Equal(t, "Codertocat", inst.AccountLogin)
	assert.False(t, inst.Suspended)
	assert.False(t, inst.Deleted)
	assert.Equal(t, models.StateNew, inst.ProcessingState)
	repo := repository(186853002)
	require.NotNil(t, repo.InstallationID)
	assert.Equal(t, int64(957387), *repo.InstallationID)
	assert.Equal(t, "Codertocat", repo.OwnerLogin, "owner derived from full_name")

	e.handle(t, delivery("installation_repositories", "i-2", edit(t, example(t, "installation_repositories.removed.0"), func(p map[string]any) {
		object(p, "installation")["id"] = 957387
		p["repositories_removed"] = []any{map[string]any{
			"id": 186853002, "node_id": "MDEwOlJlcG9zaXRvcnkxODY4NTMwMDI=", "name": "Hello-World",
			"full_name": "Codertocat/Hello-World", "private": false,
		}}
	})))
	repo = repository(186853002)
	assert.True(t, repo.InstallationRemoved)
	assert.Equal(t, models.StateUpdated, repo.ProcessingState)

	e.handle(t, delivery("installation", "i-3", edit(t, example(t, "installation.suspend.0"), func(p map[string]any) {
		object(p, "installation")["id"] = 957387
	})))
	inst = installation(957387)
	assert.True(t, inst.Suspended)
	assert.Equal(t, models.StateUpdated, inst.ProcessingState)

	e.handle(t, delivery("repository", "r-1", edit(t, example(t, "repository.renamed.0"), func(p map[string]any) {
		object(p, "repository")["id"] = 186853002
	})))
	repo = repository(186853002)
	assert.Equal(t, "renamed", repo.LastAction)
	assert.NotEmpty(t, repo.DefaultBranch)
	assert.Equal(t, int64(957387), *repo.InstallationID, "repository events leave installation_id alone")
}

func TestSendersAreNotWokenByEveryEvent(t *testing.T) {
	e := newEnv(t)
	user := func() models.User {
		var u models.User
		require.NoError(t, e.db.Take(&u, "id = ?", 21031067).Error)
		return u
	}
	e.handle(t, delivery("pull_request", "u-1", example(t, "pull_request.opened.0")))
	first := user()
	assert.Equal(t, "Codertocat", first.Login)
	assert.Equal(t, models.StateNew, first.ProcessingState)
	assert.Equal(t, "u-1", first.DeliveryID)

	e.handle(t, delivery("push", "u-2", example(t, "push.none.4")))
	same := user()
	assert.Equal(t, models.StateNew, same.ProcessingState, "unchanged account is not rewritten")
	assert.True(t, first.UpdatedAt.Equal(same.UpdatedAt))

	renamed := edit(t, example(t, "issues.opened.0"), func(p map[string]any) {
		object(p, "sender")["login"] = "Codertocat2"
	})
	e.handle(t, delivery("issues", "u-3", renamed))
	changed := user()
	assert.Equal(t, "Codertocat2", changed.Login)
	assert.Equal(t, models.StateUpdated, changed.ProcessingState)
	assert.Equal(t, "u-1", changed.DeliveryID)
	assert.Equal(t, "u-3", changed.LastDeliveryID)
	assert.Equal(t, int64(1), e.count(t, "github_users"))
}
