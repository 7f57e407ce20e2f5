// Package liveness keeps each worker process's liveness in Postgres, outside Temporal's bill.
//
// Temporal has no worker-level liveness: an activity heartbeat is its stand-in, and each
// one that reaches the server is a billable Action. So a worker holds a lease row that it
// renews every TTL/4 while it reaches both Postgres and Temporal, and registers there the
// attempts of its long activities (a consumer window, a Leftover Drain, the idle watch).
// Every worker scans for leases that expired and fails the attempts they held by task
// token: Temporal retries each at once on a live worker, instead of waiting for a
// heartbeat timeout. A live worker also fails its own strays, the attempts Temporal shows
// started on it that it never got (a poll's answer lost in a cut): see Running.
//
// The holder gives up first: once it has not renewed for TTL − TTL/4 it ends every held
// attempt's context (Hold), and its activities stop and give back their batch in hand, at
// least TTL/4 before any peer can see the lease expire. Expiry is decided on Postgres'
// clock alone, and is final: a holder that finds its lease expired starts a new one.
package liveness

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// ErrNoLease is returned by Hold while the worker holds no live lease (Postgres or
// Temporal out of reach): the attempt fails, and Temporal retries it, here or elsewhere.
var ErrNoLease = errors.New("this worker holds no live lease (Postgres or Temporal out of reach)")

// ReapedErrorType is the application error type of an attempt failed because its
// worker's lease expired.
const ReapedErrorType = "WorkerLeaseExpired"

// temporalClient is what a Keeper needs of Temporal: a free check that it answers,
// failing an attempt by its task token or its id, and a describe (free) of a workflow.
type temporalClient interface {
	CheckHealth(ctx context.Context, req *client.CheckHealthRequest) (*client.CheckHealthResponse, error)
	CompleteActivity(ctx context.Context, taskToken []byte, result any, err error) error
	CompleteActivityByID(ctx context.Context, namespace, workflowID, runID, activityID string, result any, err error) error
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// Keeper holds this process's lease, renews it, and reaps the leases of dead workers.
type Keeper struct {
	DB       *gorm.DB
	Temporal temporalClient
	// Identity is the worker's Temporal identity, which Temporal records on every attempt
	// the worker takes (an activity's last worker).
	Identity string
	// Namespace and Workflows are where a dead worker's attempts may be that it took but
	// never listed (it died, or lost Temporal's answer, in between): the long-running
	// workflows, described when a lease expires.
	Namespace string
	Workflows []string
	// TTL is WORKER_LEASE_TTL; Run refuses to start without it.
	TTL    time.Duration
	Logger *slog.Logger
	// Metrics counts lost and reaped leases; nil counts nothing.
	Metrics *metrics.Metrics
	// Running is the worker's interceptor that knows which attempts this process runs:
	// with it, the keeper fails the attempts Temporal shows started here that the
	// process never got (see Running). Nil fails none.
	Running *Running
	// FenceCheck is how often a fenced attempt asks Temporal whether it still runs (see
	// Hold); 0 means DefaultFenceCheck.
	FenceCheck time.Duration

	// hadLease is set once a lease was taken: a later one follows a lost one. Run's alone.
	hadLease bool
	// began is when Run started. Run's alone.
	began time.Time
	// sightings are this worker's attempts that scans saw started but not running, and
	// since when (failStrays). watchStrays' alone.
	sightings map[attemptKey]time.Time

	mu      sync.Mutex
	current *generation
	// changed is closed and replaced whenever current changes, for Hold's waiters.
	changed chan struct{}
}

// generation is one lease row: lost closes when it can no longer be relied on.
type generation struct {
	id       string
	lost     chan struct{}
	lostOnce sync.Once
}

func (g *generation) lose() { g.lostOnce.Do(func() { close(g.lost) }) }

// renewEvery is how often the lease is renewed; the holder gives up after TTL − renewEvery
// without a renewal, and peers scan twice as often.
func (k *Keeper) renewEvery() time.Duration { return k.TTL / 4 }

// Run keeps the lease until ctx ends, then deletes it: a worker that stops cleanly holds
// nothing. Call it before the worker takes tasks, and end it after the worker stopped.
func (k *Keeper) Run(ctx context.Context) {
	if k.TTL <= 0 {
		panic("lease: a Keeper runs with a TTL (WORKER_LEASE_TTL)")
	}
	k.began = time.Now()
	renew := time.NewTicker(k.renewEvery())
	defer renew.Stop()
	reap := time.NewTicker(k.renewEvery() / 2)
	defer reap.Stop()
	// giveUp fires when the lease has gone unrenewed for too long; it is reset at every
	// renewal, and stopped while no lease is held.
	giveUp := time.NewTimer(time.Hour)
	giveUp.Stop()
	defer giveUp.Stop()

	// The stray scan runs beside this loop, never in it: its describes wait on Temporal,
	// and a cut-off worker must give its lease up on time, not one describe late.
	strays := make(chan struct{})
	go func() {
		defer close(strays)
		k.watchStrays(ctx)
	}()
	k.step(ctx, giveUp)
	k.reap(ctx)
	for {
		select {
		case <-ctx.Done():
			<-strays
			k.release()
			return
		case <-giveUp.C:
			k.lose("not renewed for longer than the lease allows")
		case <-renew.C:
			k.step(ctx, giveUp)
		case <-reap.C:
			k.reap(ctx)
		}
	}
}

// watchStrays fails this worker's strays at every scan until ctx ends.
func (k *Keeper) watchStrays(ctx context.Context) {
	tick := time.NewTicker(k.renewEvery() / 2)
	defer tick.Stop()
	for {
		k.failStrays(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// step renews the lease, or takes a new one when none is held.
func (k *Keeper) step(ctx context.Context, giveUp *time.Timer) {
	started := time.Now()
	cctx, cancel := context.WithTimeout(ctx, k.renewEvery())
	defer cancel()
	if _, err := k.Temporal.CheckHealth(cctx, &client.CheckHealthRequest{}); err != nil {
		k.Logger.DebugContext(ctx, "lease not renewed: Temporal does not answer", "error", err)
		return
	}
	g := k.held()
	if g == nil {
		// Attempts this worker took under a lease it lost, but never listed, hold their
		// workflows until their timeout: fail them before taking new ones. Before the first
		// lease, those of an earlier process with the same identity (a container restarted
		// in place keeps its host name and pid 1): a peer's scan passes them over, since the
		// identity is alive again.
		if k.hadLease {
			k.sweep(cctx, k.Identity, time.Time{})
		} else {
			k.sweep(cctx, k.Identity, k.began)
		}
		g = &generation{id: rand.Text(), lost: make(chan struct{})}
		err := k.DB.WithContext(cctx).Exec(`INSERT INTO worker_leases (lease_id, identity, expires_at)
			VALUES (?, ?, now() + make_interval(secs => ?))`, g.id, k.Identity, k.TTL.Seconds()).Error
		if err != nil {
			k.Logger.DebugContext(ctx, "no lease taken: Postgres does not answer", "error", err)
			return
		}
		k.set(g)
		k.hadLease = true
		k.Logger.InfoContext(ctx, "worker lease taken", "ttl", k.TTL.String())
	} else {
		res := k.DB.WithContext(cctx).Exec(`UPDATE worker_leases SET renewed_at = now(), expires_at = now() + make_interval(secs => ?)
			WHERE lease_id = ? AND expires_at > now()`, k.TTL.Seconds(), g.id)
		switch {
		case res.Error != nil:
			k.Logger.DebugContext(ctx, "lease not renewed: Postgres does not answer", "error", res.Error)
			return
		case res.RowsAffected == 0:
			k.lose("the lease expired before it was renewed")
			return
		}
	}
	// Measured from before the checks: the row's expiry, on Postgres' clock, is later.
	giveUp.Reset(k.TTL - k.renewEvery() - time.Since(started))
}

// lose gives the current lease up: everything it holds stops.
func (k *Keeper) lose(why string) {
	k.mu.Lock()
	g := k.current
	k.current = nil
	k.mu.Unlock()
	if g == nil {
		return
	}
	g.lose()
	k.Metrics.LeaseLost()
	k.Logger.Warn("worker lease lost: its windows stop and give their batch in hand back", "why", why)
}

func (k *Keeper) held() *generation {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.current
}

func (k *Keeper) set(g *generation) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.current = g
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
}

// release deletes the lease of a worker that stops, and what it still lists. The worker
// has stopped, so an attempt that Temporal still sees running on it is one whose end did
// not reach Temporal (an answer cut off by the stop): it is failed first, or it would
// hold its workflow until its timeout, since no scan finds a lease that was deleted.
func (k *Keeper) release() {
	g := k.held()
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.renewEvery())
	defer cancel()
	k.sweep(ctx, k.Identity, time.Time{})
	if err := k.DB.WithContext(ctx).Exec(`DELETE FROM worker_leases WHERE lease_id = ?`, g.id).Error; err != nil {
		k.Logger.Warn("worker lease not released; it expires by itself", "error", err)
	}
	k.lose("the worker stopped")
}

// expiredAttempt is an attempt held by a lease that expired; TaskToken is nil for a lease
// that held none.
type expiredAttempt struct {
	LeaseID      string
	Identity     string
	WorkflowID   string
	ActivityID   string
	ActivityType string
	Attempt      int
	TaskToken    []byte
}

// reap fails the attempts of every expired lease, then deletes the lease. A lease whose
// attempts could not all be failed (Temporal away) is kept for the next scan.
func (k *Keeper) reap(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, k.TTL)
	defer cancel()
	var rows []expiredAttempt
	err := k.DB.WithContext(cctx).Raw(`SELECT l.lease_id, l.identity, a.workflow_id, a.activity_id, a.activity_type, a.attempt, a.task_token
		FROM worker_leases l LEFT JOIN lease_attempts a USING (lease_id)
		WHERE l.expires_at < now() ORDER BY l.lease_id`).Scan(&rows).Error
	if err != nil {
		k.Logger.DebugContext(ctx, "leases not scanned", "error", err)
		return
	}
	failed := map[string]bool{}
	identities := map[string]bool{}
	for _, r := range rows {
		identities[r.Identity] = true
		if _, ok := failed[r.LeaseID]; !ok {
			failed[r.LeaseID] = false
		}
		if r.TaskToken != nil && !k.failAttempt(ctx, cctx, r) {
			failed[r.LeaseID] = true
		}
	}
	if len(identities) > 0 && !k.sweepDead(cctx, identities) {
		return // keep the leases for the next scan
	}
	for id, keep := range failed {
		if !keep {
			k.deleteLease(ctx, cctx, id)
		}
	}
}

// failAttempt fails r's attempt, so that Temporal retries it on a live worker, within
// cctx, and tells whether it is over: failed now, or ended already.
func (k *Keeper) failAttempt(ctx, cctx context.Context, r expiredAttempt) bool {
	reason := temporal.NewApplicationError(fmt.Sprintf("worker %s stopped renewing its lease: retried on a live worker", r.Identity), ReapedErrorType)
	err := k.Temporal.CompleteActivity(cctx, r.TaskToken, nil, reason)
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		k.Metrics.LeaseReaped(r.ActivityType)
		k.Logger.WarnContext(ctx, "activity of a dead worker failed, so that Temporal retries it now",
			"worker", r.Identity, "workflow_id", r.WorkflowID, "activity", r.ActivityType, "attempt", r.Attempt)
	case errors.As(err, &notFound):
		// The attempt ended already, or a peer failed it first.
	default:
		k.Logger.WarnContext(ctx, "activity of a dead worker not failed yet", "worker", r.Identity,
			"workflow_id", r.WorkflowID, "error", err)
		return false
	}
	return true
}

// sweepDead sweeps each of identities, the workers of expired leases, that holds no live
// lease, and tells whether every sweep that was due was done.
func (k *Keeper) sweepDead(cctx context.Context, identities map[string]bool) bool {
	var live []string
	if err := k.DB.WithContext(cctx).Raw(`SELECT DISTINCT identity FROM worker_leases WHERE expires_at >= now()`).Scan(&live).Error; err != nil {
		return false
	}
	for _, id := range live {
		delete(identities, id) // alive again: it sweeps its own when it takes its lease
	}
	for id := range identities {
		if !k.sweep(cctx, id, time.Time{}) {
			return false
		}
	}
	return true
}

// deleteLease deletes the attempts of lease id, every one of them over, and the lease
// once pollHorizon has passed since it expired.
func (k *Keeper) deleteLease(ctx, cctx context.Context, id string) {
	// The lease itself stays for pollHorizon, so that its identity is swept at every
	// scan meanwhile: a worker paused or cut off still has long polls open, and
	// Temporal hands them the retries of the very attempts failed here.
	err := k.DB.WithContext(cctx).Exec(`DELETE FROM lease_attempts WHERE lease_id = ?`, id).Error
	if err == nil {
		err = k.DB.WithContext(cctx).Exec(`DELETE FROM worker_leases WHERE lease_id = ? AND expires_at < now() - make_interval(secs => ?)`,
			id, pollHorizon.Seconds()).Error
	}
	if err != nil {
		k.Logger.DebugContext(ctx, "expired lease not deleted", "error", err)
	}
}

// pollHorizon is how long after its lease expired a worker's identity is still swept.
// Temporal hands a task to any poll still open, and a worker paused (SIGSTOP) or cut off
// without a close keeps its long polls open for up to about 70 s: the retry of an attempt
// failed by the reaper can land on the worker that cannot run it, and stay there until it
// wakes. Swept again, it is failed in turn, until the worker's polls are used up or gone.
const pollHorizon = 2 * time.Minute

// sweep fails, by id, every started attempt of the long-running workflows whose last
// worker is identity, and that Temporal started before startedBefore unless it is zero:
// a dead worker's attempts that it took but never listed. It tells whether Temporal
// answered for every workflow.
func (k *Keeper) sweep(ctx context.Context, identity string, startedBefore time.Time) bool {
	started, ok := k.startedOn(ctx, identity)
	for _, a := range started {
		if !startedBefore.IsZero() && !a.startedAt.Before(startedBefore) {
			continue // this process's own, on Temporal's clock
		}
		if !k.failByID(ctx, ctx, a, fmt.Sprintf("worker %s lost its lease: retried on a live worker", identity),
			"unlisted activity of a worker without a lease failed, so that Temporal retries it now") {
			ok = false
		}
	}
	return ok
}

// pendingAttempt is an attempt that Temporal shows started on a worker.
type pendingAttempt struct {
	key          attemptKey
	worker       string
	activityType string
	// startedAt is on Temporal's clock.
	startedAt time.Time
}

// startedOn lists the attempts of the long-running workflows that Temporal shows started
// (or asked to cancel) on identity, one describe (free) per workflow, and tells whether
// Temporal answered for every workflow.
func (k *Keeper) startedOn(ctx context.Context, identity string) ([]pendingAttempt, bool) {
	ok := true
	var out []pendingAttempt
	for _, id := range k.Workflows {
		desc, err := k.Temporal.DescribeWorkflowExecution(ctx, id, "")
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			continue
		case err != nil:
			ok = false
			continue
		}
		runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		for _, p := range desc.GetPendingActivities() {
			if p.GetLastWorkerIdentity() != identity || p.GetState() == enumspb.PENDING_ACTIVITY_STATE_SCHEDULED {
				continue
			}
			out = append(out, pendingAttempt{
				key:    attemptKey{WorkflowID: id, RunID: runID, ActivityID: p.GetActivityId(), Attempt: p.GetAttempt()},
				worker: identity, activityType: p.GetActivityType().GetName(), startedAt: p.GetLastStartedTime().AsTime(),
			})
		}
	}
	return out, ok
}

// failByID fails a's attempt by its id with the reaper's error type, so that Temporal
// retries it at once, within cctx, and tells whether it is over: failed now, or ended
// already. Temporal fails whatever attempt of the activity is current: were a's timed out
// and retried in between, the retry fails instead, and is retried in turn.
func (k *Keeper) failByID(ctx, cctx context.Context, a pendingAttempt, why, logged string) bool {
	reason := temporal.NewApplicationError(why, ReapedErrorType)
	err := k.Temporal.CompleteActivityByID(cctx, k.Namespace, a.key.WorkflowID, a.key.RunID, a.key.ActivityID, nil, reason)
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		k.Metrics.LeaseReaped(a.activityType)
		k.Logger.WarnContext(ctx, logged, "worker", a.worker, "workflow_id", a.key.WorkflowID, "activity", a.activityType,
			"attempt", a.key.Attempt)
		return true
	case errors.As(err, &notFound):
		return true
	default:
		k.Logger.DebugContext(ctx, "activity not failed yet", "worker", a.worker, "workflow_id", a.key.WorkflowID, "error", err)
		return false
	}
}
