package ingest

import (
	"github.com/google/go-github/v75/github"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyPullRequest applies a pull_request event to github_pull_requests.
func applyPullRequest(w *writes, ev Event) {
	e := ev.Payload.(*github.PullRequestEvent)
	pr := e.GetPullRequest()
	repo := refOf(e.GetRepo())
	row := models.PullRequest{
		NodeID:          pr.GetNodeID(),
		ID:              pr.GetID(),
		RepositoryID:    repo.ID,
		RepositoryOwner: repo.Owner,
		RepositoryName:  repo.Name,
		Number:          pr.GetNumber(),
		Title:           pr.GetTitle(),
		State:           payloadState(pr.GetState(), pr.ClosedAt),
		Draft:           pr.GetDraft(),
		Merged:          pr.GetMerged(),
		MergedAt:        timeOf(pr.MergedAt),
		ClosedAt:        timeOf(pr.ClosedAt),
		HeadRef:         pr.GetHead().GetRef(),
		HeadSHA:         pr.GetHead().GetSHA(),
		BaseRef:         pr.GetBase().GetRef(),
		BaseSHA:         pr.GetBase().GetSHA(),
		AuthorLogin:     pr.GetUser().GetLogin(),
		HTMLURL:         pr.GetHTMLURL(),
		InstallationID:  optionalID(e.GetInstallation().GetID()),
		SenderLogin:     e.GetSender().GetLogin(),
		GitHubUpdatedAt: timeOf(pr.UpdatedAt),
	}
	w.pullRequests.add(row.NodeID, trackedChange(ev, w.now, row, func(r *models.PullRequest) (*models.Tracking, *string) {
		return &r.Tracking, &r.State
	}))
}
