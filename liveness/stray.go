package liveness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// A stray is an attempt that Temporal shows started on this worker, which never got it:
// matching handed the task to one of the worker's long polls, and the answer was lost on
// the way (a cut that healed before the lease's give-up time). Nothing else fails it: the
// lease stayed live, so no peer reaps the identity, and the worker sweeps its own only when
// it takes a new lease. Without a heartbeat timeout it would hold its workflow until its
// start-to-close timeout, minutes.
//
// A live worker fails its own strays, by id, with the reaper's error type, so that Temporal
// retries them at once. What it runs it knows exactly: Running, a worker interceptor,
// counts every attempt from the SDK's first call of the activity, not from its Hold.
//
// A wrong guess is harmless. Failing an attempt that runs here after all makes Temporal
// retry it; the attempt's own completion then gets NotFound from Temporal, a window's batch
// is refused by the queue's fence (the retry takes the queue over, and the old attempt's
// generation is no longer current), and the lost idle watch counts as a change, so the
// BrokerSwitch workflow reads the state again.

// attemptKey names one attempt of an activity of a workflow run.
type attemptKey struct {
	WorkflowID string
	RunID      string
	ActivityID string
	Attempt    int32
}

// Running is the set of activity attempts this process runs, for the worker's lease keeper
// (Keeper.Running): a worker interceptor that registers each attempt for the duration of
// the SDK's call of the activity. Add it to the worker's options' Interceptors.
type Running struct {
	interceptor.WorkerInterceptorBase

	mu      sync.Mutex
	running map[attemptKey]int
	// ended holds the attempts that returned since the last snapshot: Temporal may show one
	// started until its completion, sent after the return, reaches it.
	ended map[attemptKey]bool
}

// InterceptActivity implements interceptor.WorkerInterceptor.
func (r *Running) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &runningInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, running: r}
}

type runningInbound struct {
	interceptor.ActivityInboundInterceptorBase
	running *Running
}

// ExecuteActivity registers the attempt for as long as the activity runs. Local
// activities are left out: Temporal never shows them pending.
func (i *runningInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity {
		return i.Next.ExecuteActivity(ctx, in)
	}
	key := attemptKey{WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, ActivityID: info.ActivityID, Attempt: info.Attempt}
	i.running.add(key)
	defer i.running.remove(key)
	return i.Next.ExecuteActivity(ctx, in)
}

func (r *Running) add(key attemptKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil {
		r.running = map[attemptKey]int{}
	}
	r.running[key]++
}

func (r *Running) remove(key attemptKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[key]--; r.running[key] <= 0 {
		delete(r.running, key)
	}
	if r.ended == nil {
		r.ended = map[attemptKey]bool{}
	}
	r.ended[key] = true
}

// snapshot is the set of the attempts running now or that ended since the last snapshot.
func (r *Running) snapshot() map[attemptKey]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ended
	if out == nil {
		out = map[attemptKey]bool{}
	}
	r.ended = nil
	for key := range r.running {
		out[key] = true
	}
	return out
}

// strays decides, from one scan, which attempts are strays. seen are the attempts the scan
// found started on this worker's identity, ran those the process runs (or ran since the
// last scan), at the scan's time on this process's clock alone. sightings are when each
// attempt was first seen started and not running, by the scans before; the next scan gets
// the returned ones.
//
// An attempt is a stray once seen so, not running, by two scans at least interval apart:
// a poll answer still on its way to the SDK, or a completion on its way to Temporal, lasts
// less than a renewal interval unless Temporal is out of reach, and then the lease is lost
// anyway. A process paused (SIGSTOP) between two scans may fail an answer that waited in its
// socket through the pause: a wrong guess, harmless as above, that costs one retry. The
// attempt number is part of the key, so a retry starts its own count; Temporal's clock is
// never read.
func strays(sightings map[attemptKey]time.Time, seen []pendingAttempt, ran map[attemptKey]bool, at time.Time,
	interval time.Duration,
) ([]pendingAttempt, map[attemptKey]time.Time) {
	var out []pendingAttempt
	next := map[attemptKey]time.Time{}
	for _, a := range seen {
		if ran[a.key] {
			continue
		}
		first, ok := sightings[a.key]
		if !ok {
			first = at
		}
		// A stray stays sighted: one whose failure did not reach Temporal is failed again.
		next[a.key] = first
		if at.Sub(first) >= interval {
			out = append(out, a)
		}
	}
	return out, next
}

// failStrays fails this worker's strays (see Running), at each scan of watchStrays: one
// describe per long-running workflow. It does nothing without Running, or while no lease is held:
// the sweep at the next lease's start fails what a worker without a lease left.
func (k *Keeper) failStrays(ctx context.Context) {
	if k.Running == nil || k.held() == nil {
		k.sightings = nil
		return
	}
	// Bounded well within the scan's period, so that scans do not pile up.
	cctx, cancel := context.WithTimeout(ctx, k.renewEvery()/2)
	defer cancel()
	seen, _ := k.startedOn(cctx, k.Identity)
	// After the describes: an attempt that started or ended meanwhile counts as running.
	ran := k.Running.snapshot()
	var found []pendingAttempt
	found, k.sightings = strays(k.sightings, seen, ran, time.Now(), k.renewEvery())
	for _, a := range found {
		k.failByID(ctx, cctx, a, fmt.Sprintf("worker %s never got this attempt (its poll's answer was lost): retried", k.Identity),
			"activity that Temporal shows started on this worker, which does not run it, failed, so that Temporal retries it now")
	}
}
