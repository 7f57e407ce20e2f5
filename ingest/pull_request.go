package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyPullRequest applies a pull_request event to github_pull_requests.
func applyPullRequest(w *writes, ev Event) {
	e := ev.Payload
	pr := &e.PullRequest
	repo := refOf(&e.Repository)
	row := models.PullRequest{
		NodeID:          pr.NodeID,
		ID:              pr.ID,
		RepositoryID:    repo.ID,
		RepositoryOwner: repo.Owner,
		RepositoryName:  repo.Name,
		Number:          pr.Number,
		Title:           pr.Title,
		State:           payloadState(pr.State, pr.ClosedAt),
		Draft:           pr.Draft,
		Merged:          pr.Merged,
		MergedAt:        timeOf(pr.MergedAt),
		ClosedAt:        timeOf(pr.ClosedAt),
		HeadRef:         pr.Head.Ref,
		HeadSHA:         pr.Head.SHA,
		BaseRef:         pr.Base.Ref,
		BaseSHA:         pr.Base.SHA,
		AuthorLogin:     pr.User.Login,
		HTMLURL:         pr.HTMLURL,
		InstallationID:  optionalID(e.Installation.ID),
		SenderLogin:     ev.Sender.login(),
		GitHubUpdatedAt: pr.UpdatedAt.time(),
		EntityClock:     pr.UpdatedAt.time(),
	}
	w.pullRequests.add(row.NodeID, trackedChange(ev, w.now, row, func(r *models.PullRequest) (*models.Tracking, *string, **time.Time) {
		return &r.Tracking, &r.State, &r.EntityClock
	}))
}
