package ingest

import (
	"github.com/google/go-github/v75/github"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyPush inserts a push event into github_pushes, keyed by its delivery.
func applyPush(w *writes, ev Event) {
	now := w.now
	e := ev.Payload.(*github.PushEvent)
	repo := e.GetRepo()
	row := models.Push{
		DeliveryID:      ev.DeliveryID,
		RepositoryID:    repo.GetID(),
		RepositoryOwner: ownerOf(repo.GetOwner().GetLogin(), repo.GetFullName()),
		RepositoryName:  repo.GetName(),
		Ref:             e.GetRef(),
		BeforeSHA:       e.GetBefore(),
		AfterSHA:        e.GetAfter(),
		BaseRef:         e.GetBaseRef(),
		CommitCount:     len(e.Commits),
		HeadCommitID:    e.GetHeadCommit().GetID(),
		Created:         e.GetCreated(),
		Deleted:         e.GetDeleted(),
		Forced:          e.GetForced(),
		CompareURL:      e.GetCompare(),
		PusherName:      e.GetPusher().GetName(),
		InstallationID:  optionalID(e.GetInstallation().GetID()),
		SenderLogin:     e.GetSender().GetLogin(),
		LastDeliveryID:  ev.DeliveryID,
		LastAction:      lastAction(ev),
		ProcessingState: models.StateNew,
		ProcessingDate:  now,
		CreatedAt:       now,
		UpdatedAt:       now,
	}
	w.pushes = append(w.pushes, row)
}
