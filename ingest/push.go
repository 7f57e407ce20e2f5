package ingest

import (
	"github.com/brokerswitch/brokerswitch/models"
)

// applyPush inserts a push event into github_pushes, keyed by its delivery.
func applyPush(w *writes, ev Event) {
	now := w.now
	e := ev.Payload
	repo := refOf(&e.Repository)
	row := models.Push{
		DeliveryID:        ev.DeliveryID,
		RepositoryID:      repo.ID,
		RepositoryOwner:   repo.Owner,
		RepositoryName:    repo.Name,
		Ref:               e.Ref,
		BeforeSHA:         e.Before,
		AfterSHA:          e.After,
		BaseRef:           e.BaseRef,
		CommitCount:       len(e.Commits),
		HeadCommitID:      e.HeadCommit.ID,
		Created:           e.Created,
		Deleted:           e.Deleted,
		Forced:            e.Forced,
		CompareURL:        e.Compare,
		PusherName:        e.Pusher.Name,
		InstallationID:    optionalID(e.Installation.ID),
		SenderLogin:       ev.Sender.login(),
		LastDeliveryID:    ev.DeliveryID,
		LastAction:        lastAction(ev),
		ProcessingState:   models.StateNew,
		ProcessingDate:    now,
		ProcessingVersion: 1,
		CreatedAt:         now,
		UpdatedAt:         now,
	}
	w.pushes.add(row.DeliveryID, func(*models.Push) *models.Push { return &row })
}
