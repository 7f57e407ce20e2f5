package ingest

// applyFunc adds what one decoded event does to the batch's writes. It may assume the
// payload passed validate.
type applyFunc func(w *writes, ev Event)

// newRegistry maps each event that has a table to its apply function. Events missing
// from it (check_run, workflow_run, ...) are ledgered as ignored and acknowledged.
func newRegistry() map[string]applyFunc {
	return map[string]applyFunc{
		"pull_request":                applyPullRequest,
		"issues":                      applyIssue,
		"issue_comment":               applyIssueComment,
		"commit_comment":              applyCommitComment,
		"pull_request_review_comment": applyReviewComment,
		"pull_request_review":         applyReview,
		"push":                        applyPush,
		"create":                      applyCreate,
		"delete":                      applyDelete,
		"installation":                applyInstallation,
		"installation_repositories":   applyInstallationRepositories,
		"repository":                  applyRepository,
	}
}
