package ingest

import (
	"time"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyCreate records a created branch or tag in github_branches.
func applyCreate(w *writes, ev Event) {
	row := branchRow(ev, w.now)
	row.MasterBranch = ev.Payload.MasterBranch
	w.addBranch(ev, row, allColumns(branchTracking))
}

// applyDelete marks a branch or tag deleted in github_branches, creating the row if the
// create was never seen.
func applyDelete(w *writes, ev Event) {
	row := branchRow(ev, w.now)
	row.Deleted = true
	// master_branch is absent from delete payloads: keep the one a create recorded.
	w.addBranch(ev, row, func(dst, src *models.Branch) {
		master := dst.MasterBranch
		allColumns(branchTracking)(dst, src)
		dst.MasterBranch = master
	})
}

func branchRow(ev Event, now time.Time) models.Branch {
	e := ev.Payload
	r := refOf(&e.Repository)
	return models.Branch{
		RepositoryID:    r.ID,
		RefType:         e.RefType,
		Ref:             e.Ref,
		RepositoryOwner: r.Owner,
		RepositoryName:  r.Name,
		PusherType:      e.PusherType,
		InstallationID:  optionalID(e.Installation.ID),
		SenderLogin:     ev.Sender.login(),
		Tracking:        newTracking(ev, now),
	}
}

func branchTracking(r *models.Branch) *models.Tracking { return &r.Tracking }

func (w *writes) addBranch(ev Event, row models.Branch, copyColumns func(dst, src *models.Branch)) {
	key := branchKey{repositoryID: row.RepositoryID, refType: row.RefType, ref: row.Ref}
	w.branches.add(key, refresh(ev, w.now, row, branchTracking, copyColumns))
}
