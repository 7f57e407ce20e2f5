package ingest

import (
	"errors"

	"github.com/google/go-github/v75/github"
)

// check is one requirement on a payload and the reason given when it fails.
type check struct {
	ok     bool
	reason string
}

// validate checks that a typed payload holds the keys its table needs. It runs while
// decoding, before any database work, so a payload that can never be applied is rejected
// as malformed instead of failing a transaction and being retried.
func validate(payload any) error {
	switch e := payload.(type) {
	case *github.PullRequestEvent:
		return firstFailure(
			check{e.GetPullRequest().GetNodeID() != "", "no pull_request.node_id"},
			check{e.GetRepo().GetID() != 0, "no repository.id"},
			check{validState(e.GetPullRequest().GetState()), "pull_request.state is neither open nor closed"})
	case *github.IssuesEvent:
		return firstFailure(
			check{e.GetIssue().GetNodeID() != "", "no issue.node_id"},
			check{e.GetRepo().GetID() != 0, "no repository.id"},
			check{validState(e.GetIssue().GetState()), "issue.state is neither open nor closed"})
	case *github.IssueCommentEvent:
		return firstFailure(
			check{e.GetComment().GetNodeID() != "", "no comment.node_id"},
			check{e.GetRepo().GetID() != 0, "no repository.id"})
	case *github.CommitCommentEvent:
		return firstFailure(
			check{e.GetComment().GetNodeID() != "", "no comment.node_id"},
			check{e.GetRepo().GetID() != 0, "no repository.id"})
	case *github.PullRequestReviewCommentEvent:
		return firstFailure(
			check{e.GetComment().GetNodeID() != "", "no comment.node_id"},
			check{e.GetRepo().GetID() != 0, "no repository.id"})
	case *github.PullRequestReviewEvent:
		return firstFailure(
			check{e.GetReview().GetNodeID() != "", "no review.node_id"},
			check{e.GetRepo().GetID() != 0, "no repository.id"})
	case *github.PushEvent:
		return firstFailure(
			check{e.GetRepo().GetID() != 0, "no repository.id"},
			check{e.GetRef() != "", "no ref"})
	case *github.CreateEvent:
		return firstFailure(
			check{e.GetRepo().GetID() != 0, "no repository.id"},
			check{e.GetRef() != "", "no ref"},
			check{e.GetRefType() != "", "no ref_type"})
	case *github.DeleteEvent:
		return firstFailure(
			check{e.GetRepo().GetID() != 0, "no repository.id"},
			check{e.GetRef() != "", "no ref"},
			check{e.GetRefType() != "", "no ref_type"})
	case *github.InstallationEvent:
		return firstFailure(check{e.GetInstallation().GetID() != 0, "no installation.id"})
	case *github.InstallationRepositoriesEvent:
		return firstFailure(check{e.GetInstallation().GetID() != 0, "no installation.id"})
	case *github.RepositoryEvent:
		return firstFailure(
			check{e.GetRepo().GetID() != 0, "no repository.id"},
			check{e.GetRepo().GetName() != "", "no repository.name"})
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
