package ingest

import (
	"github.com/google/go-github/v75/github"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyIssue applies an issues event to github_issues.
func applyIssue(w *writes, ev Event) {
	e := ev.Payload.(*github.IssuesEvent)
	issue := e.GetIssue()
	repo := refOf(e.GetRepo())
	row := models.Issue{
		NodeID:          issue.GetNodeID(),
		ID:              issue.GetID(),
		RepositoryID:    repo.ID,
		RepositoryOwner: repo.Owner,
		RepositoryName:  repo.Name,
		Number:          issue.GetNumber(),
		Title:           issue.GetTitle(),
		State:           payloadState(issue.GetState(), issue.ClosedAt),
		StateReason:     issue.GetStateReason(),
		ClosedAt:        timeOf(issue.ClosedAt),
		AuthorLogin:     issue.GetUser().GetLogin(),
		HTMLURL:         issue.GetHTMLURL(),
		InstallationID:  optionalID(e.GetInstallation().GetID()),
		SenderLogin:     e.GetSender().GetLogin(),
		GitHubUpdatedAt: timeOf(issue.UpdatedAt),
	}
	w.issues.add(row.NodeID, trackedChange(ev, w.now, row, func(r *models.Issue) (*models.Tracking, *string) {
		return &r.Tracking, &r.State
	}))
}
