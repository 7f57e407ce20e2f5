package ingest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-github/v75/github"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyRepository applies a repository event (created, edited, renamed, transferred,
// archived, privatized, deleted, ...) to github_repositories.
func applyRepository(ctx context.Context, tx *gorm.DB, ev Event, now time.Time) error {
	e := ev.Payload.(*github.RepositoryEvent)
	r := e.GetRepo()
	row := models.Repository{
		ID:             r.GetID(),
		NodeID:         r.GetNodeID(),
		OwnerLogin:     ownerOf(r.GetOwner().GetLogin(), r.GetFullName()),
		Name:           r.GetName(),
		FullName:       r.GetFullName(),
		Private:        r.GetPrivate(),
		Archived:       r.GetArchived(),
		DefaultBranch:  r.GetDefaultBranch(),
		HTMLURL:        r.GetHTMLURL(),
		InstallationID: optionalID(e.GetInstallation().GetID()),
		Deleted:        ev.Action == actionDeleted,
		SenderLogin:    e.GetSender().GetLogin(),
		Tracking:       newTracking(ev, now),
	}
	// installation_id stays out of the refresh: it is owned by installation events, and a
	// repository event delivered through a plain webhook has none.
	upsert := refreshOnConflict([]string{"id"}, "node_id", "owner_login", "name", "full_name", "private",
		"archived", "default_branch", "html_url", "deleted", "sender_login")
	if err := tx.WithContext(ctx).Clauses(upsert).Create(&row).Error; err != nil {
		return fmt.Errorf("upsert repository %s: %w", r.GetFullName(), err)
	}
	return nil
}

// upsertInstallationRepositories records that repos were added to (removed=false) or
// removed from an installation, in one statement. Installation payloads list repositories
// in short form (no owner, default branch or URL), so only those columns are refreshed.
func upsertInstallationRepositories(ctx context.Context, tx *gorm.DB, ev Event, now time.Time, installationID int64, repos []*github.Repository, removed bool) error {
	rows := make([]models.Repository, 0, len(repos))
	for _, r := range repos {
		if r.GetID() == 0 {
			continue
		}
		rows = append(rows, models.Repository{
			ID:                  r.GetID(),
			NodeID:              r.GetNodeID(),
			OwnerLogin:          ownerOf(r.GetOwner().GetLogin(), r.GetFullName()),
			Name:                r.GetName(),
			FullName:            r.GetFullName(),
			Private:             r.GetPrivate(),
			InstallationID:      optionalID(installationID),
			InstallationRemoved: removed,
			SenderLogin:         ev.Sender.GetLogin(),
			Tracking:            newTracking(ev, now),
		})
	}
	if len(rows) == 0 {
		return nil
	}
	// One statement may not touch a row twice, and a stable order keeps concurrent
	// consumers from deadlocking on each other's rows.
	slices.SortFunc(rows, func(a, b models.Repository) int { return cmp.Compare(a.ID, b.ID) })
	rows = slices.CompactFunc(rows, func(a, b models.Repository) bool { return a.ID == b.ID })

	upsert := refreshOnConflict([]string{"id"}, "node_id", "owner_login", "name", "full_name", "private",
		"installation_id", "installation_removed", "sender_login")
	if err := tx.WithContext(ctx).Clauses(upsert).Create(&rows).Error; err != nil {
		return fmt.Errorf("upsert %d repositories of installation %d: %w", len(rows), installationID, err)
	}
	return nil
}
