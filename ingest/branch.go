package ingest

import (
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/brokerswitch/brokerswitch/models"
)

// applyCreate records a created branch or tag in github_branches.
func applyCreate(w *writes, ev Event) {
	e := ev.Payload.(*github.CreateEvent)
	row := branchRow(ev, w.now, e.GetRepo(), e.GetInstallation(), e.GetSender(), e.GetRefType(), e.GetRef())
	row.MasterBranch = e.GetMasterBranch()
	row.PusherType = e.GetPusherType()
	w.addBranch(ev, row, allColumns(branchTracking))
}

// applyDelete marks a branch or tag deleted in github_branches, creating the row if the
// create was never seen.
func applyDelete(w *writes, ev Event) {
	e := ev.Payload.(*github.DeleteEvent)
	row := branchRow(ev, w.now, e.GetRepo(), e.GetInstallation(), e.GetSender(), e.GetRefType(), e.GetRef())
	row.PusherType = e.GetPusherType()
	row.Deleted = true
	// master_branch is absent from delete payloads: keep the one a create recorded.
	w.addBranch(ev, row, func(dst, src *models.Branch) {
		master := dst.MasterBranch
		allColumns(branchTracking)(dst, src)
		dst.MasterBranch = master
	})
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

func branchTracking(r *models.Branch) *models.Tracking { return &r.Tracking }

func (w *writes) addBranch(ev Event, row models.Branch, copyColumns func(dst, src *models.Branch)) {
	key := branchKey{repositoryID: row.RepositoryID, refType: row.RefType, ref: row.Ref}
	w.branches.add(key, refresh(ev, w.now, row, branchTracking, copyColumns))
}
