package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyIssue applies an issues event to github_issues.
func applyIssue(w *writes, ev Event) {
	e := ev.Payload
	issue := &e.Issue
	repo := refOf(&e.Repository)
	row := models.Issue{
		NodeID:          issue.NodeID,
		ID:              issue.ID,
		RepositoryID:    repo.ID,
		RepositoryOwner: repo.Owner,
		RepositoryName:  repo.Name,
		Number:          issue.Number,
		Title:           issue.Title,
		State:           payloadState(issue.State, issue.ClosedAt),
		StateReason:     issue.StateReason,
		ClosedAt:        timeOf(issue.ClosedAt),
		AuthorLogin:     issue.User.Login,
		HTMLURL:         issue.HTMLURL,
		InstallationID:  optionalID(e.Installation.ID),
		SenderLogin:     ev.Sender.login(),
		GitHubUpdatedAt: issue.UpdatedAt.time(),
		EntityClock:     issue.UpdatedAt.time(),
	}
	w.issues.add(row.NodeID, trackedChange(ev, w.now, row, func(r *models.Issue) (*models.Tracking, *string, **time.Time) {
		return &r.Tracking, &r.State, &r.EntityClock
	}))
}
