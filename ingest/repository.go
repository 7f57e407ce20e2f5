package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyRepository applies a repository event (created, edited, renamed, transferred,
// archived, privatized, deleted, ...) to github_repositories.
func applyRepository(w *writes, ev Event) {
	r := &ev.Payload.Repository
	row := repositoryRow(ev, r)
	row.Archived, row.DefaultBranch, row.HTMLURL = r.Archived, r.DefaultBranch, r.HTMLURL
	row.InstallationID = optionalID(ev.Payload.Installation.ID)
	row.Deleted = ev.Action == actionDeleted
	row.EntityClock = r.UpdatedAt.time()
	// installation_id and installation_removed stay out of the refresh: they are owned by
	// installation events, and a repository event delivered through a plain webhook has
	// no installation. Installation events list repositories without a clock: their
	// changes below keep queue order.
	w.repositories.add(row.ID, clocked(refresh(ev, w.now, row, repositoryTracking, func(dst, src *models.Repository) {
		installationID, removed := dst.InstallationID, dst.InstallationRemoved
		allColumns(repositoryTracking)(dst, src)
		dst.InstallationID, dst.InstallationRemoved = installationID, removed
	}), row.EntityClock, ev.Action == actionCreated, repositoryClock, repositoryTracking))
}

// addInstallationRepositories records that repos were added to (removed=false) or removed
// from an installation. Installation payloads list repositories in short form (no owner,
// default branch or URL), so only those columns are refreshed.
func (w *writes) addInstallationRepositories(ev Event, installationID int64, repos []repository, removed bool) {
	// One event can list tens of thousands of repositories, and a change is held until the
	// batch is written: each holds its element of the decoded list and what the list's
	// changes share, and builds its row only when folded, instead of holding a row and a
	// copy of the event of its own (measured: five times the memory).
	l := &listing{ev: ev, now: w.now, installationID: installationID, removed: removed}
	for i := range repos {
		if repos[i].ID == 0 {
			continue
		}
		w.repositories.add(repos[i].ID, l.change(&repos[i]))
	}
}

// listing is what the changes of one list of an installation event share.
type listing struct {
	ev             Event
	now            time.Time
	installationID int64
	removed        bool
}

// change is the change of one listed repository.
func (l *listing) change(r *repository) change[models.Repository] {
	return func(cur *models.Repository) *models.Repository {
		row := repositoryRow(l.ev, r)
		row.InstallationID, row.InstallationRemoved = optionalID(l.installationID), l.removed
		return refresh(l.ev, l.now, row, repositoryTracking, func(dst, src *models.Repository) {
			dst.NodeID, dst.OwnerLogin, dst.Name, dst.FullName, dst.Private = src.NodeID, src.OwnerLogin, src.Name, src.FullName, src.Private
			dst.InstallationID, dst.InstallationRemoved, dst.SenderLogin = src.InstallationID, src.InstallationRemoved, src.SenderLogin
		})(cur)
	}
}

// repositoryRow holds the columns every repository payload carries, full or short.
func repositoryRow(ev Event, r *repository) models.Repository {
	return models.Repository{
		ID:          r.ID,
		NodeID:      r.NodeID,
		OwnerLogin:  ownerOf(r.Owner.Login, r.FullName),
		Name:        r.Name,
		FullName:    r.FullName,
		Private:     r.Private,
		SenderLogin: ev.Sender.login(),
	}
}

func repositoryTracking(r *models.Repository) *models.Tracking { return &r.Tracking }

func repositoryClock(r *models.Repository) **time.Time { return &r.EntityClock }
