package ingest

// applyFunc adds what one decoded event does to the batch's writes. It may assume the
// payload passed validate.
type applyFunc func(w *writes, ev Event)

// applierOf returns the apply function of ev, or nil when ev has no table.
func applierOf(ev Event) applyFunc {
	if ev.Payload == nil {
		return nil
	}
	return applierFor(ev.Type)
}

// applierFor returns the apply function of each event that has a table, nil for the
// others (check_run, workflow_run, ...), which are ledgered as ignored and acknowledged.
func applierFor(eventType string) applyFunc {
	switch eventType {
	case "pull_request":
		return applyPullRequest
	case "issues":
		return applyIssue
	case "issue_comment":
		return applyIssueComment
	case "commit_comment":
		return applyCommitComment
	case "pull_request_review_comment":
		return applyReviewComment
	case "pull_request_review":
		return applyReview
	case "push":
		return applyPush
	case "create":
		return applyCreate
	case "delete":
		return applyDelete
	case "installation":
		return applyInstallation
	case "installation_repositories":
		return applyInstallationRepositories
	case "repository":
		return applyRepository
	}
	return nil
}
