package payloads

import (
	"encoding/json"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllIsSortedAndConsistent(t *testing.T) {
	all := All()
	require.NotEmpty(t, all)
	assert.True(t, sort.SliceIsSorted(all, func(a, b int) bool { return all[a].Name < all[b].Name }))

	total := 0
	for _, e := range all {
		total += len(e.Body)
		var payload struct {
			Action *string `json:"action"`
		}
		require.NoError(t, json.Unmarshal(e.Body, &payload), e.Name)
		if e.Action == "" {
			assert.Nil(t, payload.Action, "%s has an action but its name says none", e.Name)
		} else if assert.NotNil(t, payload.Action, e.Name) {
			assert.Equal(t, e.Action, *payload.Action, e.Name)
		}
	}
	assert.Less(t, total, 1<<20, "vendored payloads should stay under 1 MiB")
}

func TestCoversRequiredEvents(t *testing.T) {
	required := map[string][]string{
		"pull_request":                {"opened", "synchronize", "closed", "reopened", "labeled"},
		"pull_request_review":         {"submitted"},
		"pull_request_review_comment": {"created"},
		"issues":                      {"opened", "reopened", "edited"},
		"issue_comment":               {"created", "edited", "deleted"},
		"commit_comment":              {"created"},
		"push":                        {""},
		"create":                      {""},
		"delete":                      {""},
		"installation":                {"created", "deleted"},
		"installation_repositories":   {"added", "removed"},
		"repository":                  {"created", "renamed"},
		"check_run":                   {"created"},
		"workflow_run":                {"completed"},
	}
	for event, actions := range required {
		for _, action := range actions {
			assert.NotEmpty(t, Find(event, action), "%s.%s", event, action)
		}
	}
}

func TestFind(t *testing.T) {
	opened := Find("pull_request", "opened")
	require.Len(t, opened, 1)
	assert.Equal(t, "pull_request.opened.0", opened[0].Name)

	assert.Greater(t, len(Find("pull_request", "")), len(opened), "empty action matches all actions")
	assert.Len(t, Find("push", ""), 2)
	assert.Empty(t, Find("no_such_event", ""))
}

func TestAllReturnsCopies(t *testing.T) {
	first := All()
	first[0].Body[0] = 'X'
	assert.NotEqual(t, byte('X'), All()[0].Body[0])
}
