package ingest

import (
	"errors"
)

// check is one requirement on a payload and the reason given when it fails.
type check struct {
	ok     bool
	reason string
}

// validate checks that the payload of an event of type eventType holds the keys its
// table needs. It runs while decoding, before any database work, so a payload that can
// never be applied is rejected as malformed instead of failing a transaction and being
// retried.
func validate(eventType string, p *payload) error {
	repo := check{p.Repository.ID != 0, "no repository.id"}
	switch eventType {
	case "pull_request":
		return firstFailure(
			check{p.PullRequest.NodeID != "", "no pull_request.node_id"}, repo,
			check{validState(p.PullRequest.State), "pull_request.state is neither open nor closed"})
	case "issues":
		return firstFailure(
			check{p.Issue.NodeID != "", "no issue.node_id"}, repo,
			check{validState(p.Issue.State), "issue.state is neither open nor closed"})
	case "issue_comment", "commit_comment", "pull_request_review_comment":
		return firstFailure(check{p.Comment.NodeID != "", "no comment.node_id"}, repo)
	case "pull_request_review":
		return firstFailure(check{p.Review.NodeID != "", "no review.node_id"}, repo)
	case "push":
		return firstFailure(repo, check{p.Ref != "", "no ref"})
	case "create", "delete":
		return firstFailure(repo, check{p.Ref != "", "no ref"}, check{p.RefType != "", "no ref_type"})
	case "installation", "installation_repositories":
		return firstFailure(check{p.Installation.ID != 0, "no installation.id"})
	case "repository":
		return firstFailure(repo, check{p.Repository.Name != "", "no repository.name"})
	}
	return nil
}

func firstFailure(checks ...check) error {
	for _, c := range checks {
		if !c.ok {
			return errors.New(c.reason)
		}
	}
	return nil
}

// validState accepts the two states the typed tables' CHECK constraints allow, or none:
// some actions (issues pinned, unpinned) ship an issue without its state.
func validState(s string) bool { return s == "" || s == stateOpen || s == stateClosed }
