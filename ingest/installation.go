package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/google/go-github/v75/github"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/models"
)

// installationColumns are the columns every installation payload carries in full.
func installationColumns() []string {
	return []string{"app_id", "account_id", "account_login", "account_type", "target_id", "target_type",
		"repository_selection", "sender_login"}
}

// applyInstallation applies an installation event to github_installations, and the
// repositories it lists to github_repositories.
func applyInstallation(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.InstallationEvent)
	row := installationRow(ev, now, e.GetInstallation(), e.GetSender())
	switch ev.Action {
	case "deleted":
		row.Deleted = true
	case "suspend":
		row.Suspended = true
	case "unsuspend":
		row.Suspended = false
		row.SuspendedAt = nil
	}
	columns := append(installationColumns(), "suspended", "suspended_at", "deleted")
	if err := upsertInstallation(ctx, tx, row, columns); err != nil {
		return err
	}
	// Installing grants the listed repositories; uninstalling removes them. Suspension does
	// not change which repositories the installation holds.
	switch ev.Action {
	case "created", "new_permissions_accepted":
		return upsertInstallationRepositories(ctx, tx, ev, now, row.ID, e.Repositories, false)
	case "deleted":
		return upsertInstallationRepositories(ctx, tx, ev, now, row.ID, e.Repositories, true)
	}
	return nil
}

// applyInstallationRepositories applies an installation_repositories event: the
// installation itself, then the repositories added to and removed from it.
func applyInstallationRepositories(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.InstallationRepositoriesEvent)
	row := installationRow(ev, now, e.GetInstallation(), e.GetSender())
	if s := e.GetRepositorySelection(); s != "" {
		row.RepositorySelection = s
	}
	// This event says nothing about suspension or deletion: leave those columns alone.
	if err := upsertInstallation(ctx, tx, row, installationColumns()); err != nil {
		return err
	}
	if err := upsertInstallationRepositories(ctx, tx, ev, now, row.ID, e.RepositoriesAdded, false); err != nil {
		return err
	}
	return upsertInstallationRepositories(ctx, tx, ev, now, row.ID, e.RepositoriesRemoved, true)
}

func installationRow(ev Event, now time.Time, inst *github.Installation, sender *github.User) models.Installation {
	return models.Installation{
		ID:                  inst.GetID(),
		AppID:               inst.GetAppID(),
		AccountID:           inst.GetAccount().GetID(),
		AccountLogin:        inst.GetAccount().GetLogin(),
		AccountType:         inst.GetAccount().GetType(),
		TargetID:            inst.GetTargetID(),
		TargetType:          inst.GetTargetType(),
		RepositorySelection: inst.GetRepositorySelection(),
		Suspended:           timeOf(inst.SuspendedAt) != nil,
		SuspendedAt:         timeOf(inst.SuspendedAt),
		SenderLogin:         sender.GetLogin(),
		Tracking:            newTracking(ev, now),
	}
}

func upsertInstallation(ctx context.Context, tx *gorm.DB, row models.Installation, columns []string) error {
	if err := tx.WithContext(ctx).Clauses(refreshOnConflict([]string{"id"}, columns...)).Create(&row).Error; err != nil {
		return fmt.Errorf("upsert installation %d: %w", row.ID, err)
	}
	return nil
}
