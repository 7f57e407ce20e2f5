package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/google/go-github/v75/github"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyPush inserts a push event into github_pushes, keyed by its delivery.
func applyPush(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
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
	// The ledger already makes this insert happen once; DO NOTHING only keeps a manual
	// replay from failing.
	if err := tx.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
		return fmt.Errorf("insert push to %s %s: %w", repo.GetFullName(), e.GetRef(), err)
	}
	return nil
}
