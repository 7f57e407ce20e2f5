package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"

	"github.com/brokerswitch/brokerswitch/lease"
	"github.com/brokerswitch/brokerswitch/models"
)

// attemptHolder registers an activity attempt under the worker's lease (lease.Keeper).
type attemptHolder interface {
	Hold(ctx context.Context, what lease.What) (*lease.Held, error)
}

// fenceCheck is how often a fenced attempt asks Temporal whether it still runs, and how
// long it waits for an answer.
const fenceCheck = 10 * time.Second

// deadlineMargin is how long before its start-to-close deadline an attempt gives its
// batch in hand back, so that Temporal's retry never meets it still reading.
const deadlineMargin = 30 * time.Second

// errFenced ends an attempt that another may replace.
var errFenced = errors.New("the window may have been given to another worker")

// fence stops one activity attempt before another can take its place. Temporal starts a
// successor only when the attempt fails, times out (start-to-close: these activities
// send no heartbeats), or is failed by a peer because this worker's lease expired; or an
// operator terminates or resets the workflow. So the attempt stops, and its batch in hand
// goes back to the queue unsettled (broker.ConsumeOptions.Fence), when
//   - the worker's lease is lost: a peer may fail the attempt once the lease expires, at
//     least TTL/4 later (lease.Keeper),
//   - its deadline is deadlineMargin away, or
//   - Temporal says it no longer runs this attempt (a describe, which is no Action, every
//     fenceCheck).
//
// A cancellation requested by the workflow reaches an activity only in a heartbeat's
// answer; the describe shows it, and a single heartbeat then fetches it.
type fence struct {
	leases attemptHolder
	logger *slog.Logger
}

// guarded is an attempt that a fence watches.
type guarded struct {
	// gone closes when the attempt must stop.
	gone <-chan struct{}
	// stop ends the watch and releases the attempt from the lease.
	stop func()
	// checks end every batch's transaction: the attempt still holds its queue (it was
	// not taken over by a successor while this worker was paused or cut off).
	checks []models.Check
}

// guard registers the attempt under the lease, which takes its queue over, and watches it
// until stop is called; gone closes, and end is called with errFenced, when the attempt
// must stop.
func (f fence) guard(ctx context.Context, what lease.What, end context.CancelCauseFunc) (guarded, error) {
	held, err := f.leases.Hold(ctx, what)
	if err != nil {
		return guarded{}, err
	}
	info := activity.GetInfo(ctx)
	// A peer may have failed this attempt already (its worker had no lease when Temporal
	// handed it over): it must not start.
	if p, asked := f.describe(ctx, info); asked && (p == nil || p.GetAttempt() > info.Attempt) {
		held.Release()
		return guarded{}, fmt.Errorf("%s: %w", info.ActivityType.Name, errFenced)
	}
	var checks []models.Check
	if c, ok := held.QueueCheck(); ok {
		checks = append(checks, c)
	}
	closed := make(chan struct{})
	watchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		why := f.watch(watchCtx, ctx, info, held)
		if why == "" {
			return
		}
		f.logger.WarnContext(ctx, "attempt fenced: its batch in hand goes back to the queue unsettled",
			"activity", info.ActivityType.Name, "why", why)
		close(closed)
		end(errFenced)
	}()
	return guarded{gone: closed, checks: checks, stop: func() {
		cancel()
		<-done
		held.Release()
	}}, nil
}

// watch blocks until the attempt must stop, and says why, or until ctx ends ("").
func (f fence) watch(ctx, actCtx context.Context, info activity.Info, held *lease.Held) string {
	var atDeadline <-chan time.Time
	if !info.Deadline.IsZero() {
		t := time.NewTimer(time.Until(info.Deadline.Add(-deadlineMargin)))
		defer t.Stop()
		atDeadline = t.C
	}
	tick := time.NewTicker(fenceCheck)
	defer tick.Stop()
	cancelAsked := false
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-held.Lost():
			return "the worker's lease was lost"
		case <-atDeadline:
			return fmt.Sprintf("its start-to-close deadline is %s away", deadlineMargin)
		case <-tick.C:
		}
		p, asked := f.describe(actCtx, info)
		if !asked {
			continue // the lease decides about a Temporal that does not answer
		}
		switch {
		case p == nil || p.GetAttempt() > info.Attempt:
			return "Temporal no longer runs this attempt"
		case p.GetState() == enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED && !cancelAsked:
			cancelAsked = true
			activity.RecordHeartbeat(actCtx) // its answer cancels the activity's context
		}
	}
}

// describe asks Temporal for this attempt's activity; asked is false when Temporal did not
// answer, p nil when the activity is gone.
func (f fence) describe(ctx context.Context, info activity.Info) (p *workflowpb.PendingActivityInfo, asked bool) {
	askCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fenceCheck)
	defer cancel()
	res, err := activity.GetClient(ctx).DescribeWorkflowExecution(askCtx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	if err != nil {
		return nil, false
	}
	return pendingAttempt(res.GetPendingActivities(), info), true
}

// pendingAttempt finds attempt info among the describe's pending activities; nil when the
// activity is gone.
func pendingAttempt(pending []*workflowpb.PendingActivityInfo, info activity.Info) *workflowpb.PendingActivityInfo {
	for _, p := range pending {
		if p.GetActivityId() == info.ActivityID {
			return p
		}
	}
	return nil
}
