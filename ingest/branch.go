package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/google/go-github/v75/github"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyCreate records a created branch or tag in github_branches.
func applyCreate(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.CreateEvent)
	row := branchRow(ev, now, e.GetRepo(), e.GetInstallation(), e.GetSender(), e.GetRefType(), e.GetRef())
	row.MasterBranch = e.GetMasterBranch()
	row.PusherType = e.GetPusherType()
	return upsertBranch(ctx, tx, row, "master_branch")
}

// applyDelete marks a branch or tag deleted in github_branches, creating the row if the
// create was never seen.
func applyDelete(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.DeleteEvent)
	row := branchRow(ev, now, e.GetRepo(), e.GetInstallation(), e.GetSender(), e.GetRefType(), e.GetRef())
	row.PusherType = e.GetPusherType()
	row.Deleted = true
	// master_branch is absent from delete payloads: keep the one a create recorded.
	return upsertBranch(ctx, tx, row)
}

func branchRow(ev Event, now time.Time, repo *github.Repository, inst *github.Installation, sender *github.User, refType, ref string) models.Branch {
	r := refOf(repo)
	return models.Branch{
		RepositoryID:    r.ID,
		RefType:         refType,
		Ref:             ref,
		RepositoryOwner: r.Owner,
		RepositoryName:  r.Name,
		InstallationID:  optionalID(inst.GetID()),
		SenderLogin:     sender.GetLogin(),
		Tracking:        newTracking(ev, now),
	}
}

func upsertBranch(ctx context.Context, tx *gorm.DB, row models.Branch, extraColumns ...string) error {
	columns := append([]string{"repository_owner", "repository_name", "pusher_type", "deleted", "installation_id", "sender_login"}, extraColumns...)
	upsert := refreshOnConflict([]string{"repository_id", "ref_type", "ref"}, columns...)
	if err := tx.WithContext(ctx).Clauses(upsert).Create(&row).Error; err != nil {
		return fmt.Errorf("upsert %s %s in repository %d: %w", row.RefType, row.Ref, row.RepositoryID, err)
	}
	return nil
}
