package ingest

// applyFunc adds what one decoded event does to the batch's writes. It may assume the
// payload passed validate.
type applyFunc func(w *writes, ev Event)

// appliers are the apply functions of the events that have a table; the others
// (check_run, workflow_run, ...) are ledgered as ignored and acknowledged.
var appliers = map[string]applyFunc{
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

// applierOf returns the apply function of ev, or nil when ev has no table.
func applierOf(ev Event) applyFunc {
	if ev.Payload == nil {
		return nil
	}
	return appliers[ev.Type]
}
