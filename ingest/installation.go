package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyInstallation applies an installation event to github_installations, and the
// repositories it lists to github_repositories.
func applyInstallation(w *writes, ev Event) {
	e := ev.Payload
	row := installationRow(ev, w.now)
	switch ev.Action {
	case "deleted":
		row.Deleted = true
	case "suspend":
		row.Suspended = true
	case "unsuspend":
		row.Suspended = false
		row.SuspendedAt = nil
	}
	// Every installation payload carries the whole installation.
	w.installations.add(row.ID, clocked(refresh(ev, w.now, row, installationTracking, allColumns(installationTracking)),
		row.EntityClock, ev.Action == actionCreated, installationClock, installationTracking))
	// Installing grants the listed repositories; uninstalling removes them. Suspension does
	// not change which repositories the installation holds.
	switch ev.Action {
	case "created", "new_permissions_accepted":
		w.addInstallationRepositories(ev, row.ID, e.Repositories, false)
	case "deleted":
		w.addInstallationRepositories(ev, row.ID, e.Repositories, true)
	}
}

// applyInstallationRepositories applies an installation_repositories event: the
// installation itself, then the repositories added to and removed from it.
func applyInstallationRepositories(w *writes, ev Event) {
	e := ev.Payload
	row := installationRow(ev, w.now)
	if s := e.RepositorySelection; s != "" {
		row.RepositorySelection = s
	}
	// This event says nothing about suspension or deletion: leave those columns alone.
	w.installations.add(row.ID, clocked(refresh(ev, w.now, row, installationTracking, func(dst, src *models.Installation) {
		suspended, suspendedAt, deleted := dst.Suspended, dst.SuspendedAt, dst.Deleted
		allColumns(installationTracking)(dst, src)
		dst.Suspended, dst.SuspendedAt, dst.Deleted = suspended, suspendedAt, deleted
	}), row.EntityClock, false, installationClock, installationTracking))
	w.addInstallationRepositories(ev, row.ID, e.RepositoriesAdded, false)
	w.addInstallationRepositories(ev, row.ID, e.RepositoriesRemoved, true)
}

func installationRow(ev Event, now time.Time) models.Installation {
	inst := &ev.Payload.Installation
	return models.Installation{
		ID:                  inst.ID,
		AppID:               inst.AppID,
		AccountID:           inst.Account.ID,
		AccountLogin:        inst.Account.Login,
		AccountType:         inst.Account.Type,
		TargetID:            inst.TargetID,
		TargetType:          inst.TargetType,
		RepositorySelection: inst.RepositorySelection,
		Suspended:           timeOf(inst.SuspendedAt) != nil,
		SuspendedAt:         timeOf(inst.SuspendedAt),
		SenderLogin:         ev.Sender.login(),
		EntityClock:         inst.UpdatedAt.time(),
		Tracking:            newTracking(ev, now),
	}
}

func installationTracking(r *models.Installation) *models.Tracking { return &r.Tracking }

func installationClock(r *models.Installation) **time.Time { return &r.EntityClock }
