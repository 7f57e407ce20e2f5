package liveness

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"
	"gorm.io/gorm"
)

// ErrLost is the cause, wrapped with the reason, with which a held attempt's context ends
// when the attempt must stop because another may take its place.
var ErrLost = errors.New("the attempt may have been given to another worker")

// defaultFenceCheck is how often a fenced attempt asks Temporal whether it still runs.
const defaultFenceCheck = 10 * time.Second

// deadlineMargin is how long before its start-to-close deadline a fenced attempt stops,
// so that Temporal's retry never meets it still reading.
const deadlineMargin = 30 * time.Second

// What a held attempt does, for the status: the queue a window reads and on which broker.
// An attempt that names a queue reads it, and is fenced (see Hold).
type What struct {
	Queue  string
	Broker *int
}

// Held is an activity attempt registered under the worker's lease.
type Held struct {
	k    *Keeper
	gen  *generation
	info activity.Info
	// queue is the queue the attempt took over, at generation; "" for none.
	queue      string
	generation int64
	// lost closes when the attempt must stop, before its context ends.
	lost chan struct{}
	// stop ends the watch and the attempt's context.
	stop func()
}

// Hold registers the calling activity's attempt under the worker's lease, waiting up to
// the lease's renewal interval for one to be taken (a worker that just started), and
// returns a context of ctx's that ends, with a cause wrapping ErrLost, when the attempt
// must stop: its worker's lease was lost (a peer may fail the attempt once the lease
// expires, at least TTL/4 later). Release the attempt when the activity returns.
//
// An attempt whose what names a queue reads it, and is fenced: it takes the queue over
// (its fencing token advances, and every batch of an earlier attempt that has not
// committed yet is refused: Checks), and stops too before another can take its place.
// Temporal starts a successor only when the attempt fails, times out (start-to-close:
// these activities send no heartbeats), or is failed by a peer; or an operator
// terminates or resets the workflow. So it stops, as decide says, when its deadline is
// deadlineMargin away, or when Temporal says it no longer runs this attempt (a describe,
// which is no Action, every FenceCheck), and it does not start when a peer failed it
// already. A cancellation requested by the workflow reaches an activity only in a
// heartbeat's answer; the describe shows it, and a single heartbeat then fetches it.
func (k *Keeper) Hold(ctx context.Context, what What) (context.Context, *Held, error) {
	h, err := k.register(ctx, what)
	if err != nil {
		return nil, nil, err
	}
	if what.Queue != "" {
		p, answered := k.describe(ctx, h.info)
		s := sight{now: time.Now(), deadline: h.info.Deadline, attempt: h.info.Attempt, answered: answered, pending: p}
		if why, _ := decide(s); why != nil {
			h.Release()
			return nil, nil, fmt.Errorf("%s: %w", h.info.ActivityType.Name, why)
		}
	}
	held, end := context.WithCancelCause(ctx)
	watchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		why := k.watch(watchCtx, ctx, h, what.Queue != "")
		if why == nil {
			return
		}
		k.Logger.WarnContext(ctx, "attempt stopped: its batch in hand, if any, goes back to the queue unsettled",
			"activity", h.info.ActivityType.Name, "why", why)
		close(h.lost)
		end(why)
	}()
	h.stop = func() {
		cancel()
		<-done
		end(nil)
	}
	return held, h, nil
}

// register lists the calling activity's attempt under the live lease and, when what names
// a queue, takes the queue over.
func (k *Keeper) register(ctx context.Context, what What) (*Held, error) {
	info := activity.GetInfo(ctx)
	g, err := k.await(ctx)
	if err != nil {
		return nil, err
	}
	h := &Held{k: k, gen: g, info: info, queue: what.Queue, lost: make(chan struct{}), stop: func() {}}
	err = k.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		err := tx.Exec(`INSERT INTO lease_attempts (lease_id, workflow_id, activity_id, attempt, activity_type, task_token, queue, broker)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, g.id, info.WorkflowExecution.ID, info.ActivityID, info.Attempt,
			info.ActivityType.Name, info.TaskToken, what.Queue, what.Broker).Error
		if err != nil || what.Queue == "" {
			return err
		}
		h.generation, err = takeQueue(tx, what.Queue)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register %s under the worker's lease: %w", info.ActivityType.Name, err)
	}
	return h, nil
}

// await returns the live lease, waiting up to one renewal interval for one.
func (k *Keeper) await(ctx context.Context) (*generation, error) {
	deadline := time.NewTimer(k.renewEvery() + time.Second)
	defer deadline.Stop()
	for {
		k.mu.Lock()
		g := k.current
		if g == nil && k.changed == nil {
			k.changed = make(chan struct{})
		}
		changed := k.changed
		k.mu.Unlock()
		if g != nil {
			return g, nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil, errNoLease
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// sight is what a held attempt knows at one moment, for decide.
type sight struct {
	leaseLost bool
	now       time.Time
	// deadline is the attempt's start-to-close deadline; zero for none.
	deadline time.Time
	attempt  int32
	// answered tells whether Temporal answered a describe just now; pending is then the
	// activity as it shows it, nil when it is gone.
	answered bool
	pending  *workflowpb.PendingActivityInfo
	// cancelFetched tells whether a heartbeat already fetched a requested cancellation.
	cancelFetched bool
}

// decide says why a fenced attempt must stop, as an error wrapping ErrLost, or nil when it
// goes on; and whether a heartbeat is to fetch the cancellation the workflow requested.
// A Temporal that does not answer decides nothing: the lease does.
func decide(s sight) (why error, heartbeat bool) {
	switch {
	case s.leaseLost:
		return fmt.Errorf("%w: the worker's lease was lost", ErrLost), false
	case !s.deadline.IsZero() && !s.now.Before(s.deadline.Add(-deadlineMargin)):
		return fmt.Errorf("%w: its start-to-close deadline is %s away", ErrLost, deadlineMargin), false
	case !s.answered:
		return nil, false
	case s.pending == nil || s.pending.GetAttempt() > s.attempt:
		return fmt.Errorf("%w: Temporal no longer runs this attempt", ErrLost), false
	}
	return nil, s.pending.GetState() == enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED && !s.cancelFetched
}

// watch blocks until h's attempt must stop, and says why, or until ctx ends (nil). An
// attempt that is not fenced stops only when the lease is lost.
func (k *Keeper) watch(ctx, actCtx context.Context, h *Held, fenced bool) error {
	s := sight{attempt: h.info.Attempt}
	var atDeadline <-chan time.Time
	var tick <-chan time.Time
	if fenced {
		s.deadline = h.info.Deadline
		if !s.deadline.IsZero() {
			t := time.NewTimer(time.Until(s.deadline.Add(-deadlineMargin)))
			defer t.Stop()
			atDeadline = t.C
		}
		ticker := time.NewTicker(k.fenceCheck())
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		s.answered, s.pending = false, nil
		select {
		case <-ctx.Done():
			return nil
		case <-h.gen.lost:
			s.leaseLost = true
		case <-atDeadline:
		case <-tick:
			s.pending, s.answered = k.describe(actCtx, h.info)
		}
		s.now = time.Now()
		why, heartbeat := decide(s)
		if why != nil {
			return why
		}
		if heartbeat {
			s.cancelFetched = true
			activity.RecordHeartbeat(actCtx) // its answer cancels the activity's context
		}
	}
}

// fenceCheck is how often a fenced attempt asks Temporal, and how long it waits for an
// answer.
func (k *Keeper) fenceCheck() time.Duration {
	if k.FenceCheck > 0 {
		return k.FenceCheck
	}
	return defaultFenceCheck
}

// describe asks Temporal for the attempt info's activity; answered is false when Temporal
// did not answer, p nil when the activity is gone.
func (k *Keeper) describe(ctx context.Context, info activity.Info) (p *workflowpb.PendingActivityInfo, answered bool) {
	askCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.fenceCheck())
	defer cancel()
	res, err := k.Temporal.DescribeWorkflowExecution(askCtx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	if err != nil {
		return nil, false
	}
	for _, p := range res.GetPendingActivities() {
		if p.GetActivityId() == info.ActivityID {
			return p, true
		}
	}
	return nil, true
}

// Lost closes when the attempt must stop, just before its held context ends with the
// reason: a peer may soon retry it elsewhere. A nil Held is never lost.
func (h *Held) Lost() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.lost
}

// Release ends the attempt's held context and removes the attempt from the lease, once
// the activity returns. An attempt whose lease was lost stays listed: its end may never
// have reached Temporal, and the reaper that fails it by task token then makes sure
// Temporal moves on.
func (h *Held) Release() {
	h.stop()
	select {
	case <-h.gen.lost:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.k.renewEvery())
	defer cancel()
	err := h.k.DB.WithContext(ctx).Exec(`DELETE FROM lease_attempts WHERE workflow_id = ? AND activity_id = ? AND attempt = ?`,
		h.info.WorkflowExecution.ID, h.info.ActivityID, h.info.Attempt).Error
	if err != nil {
		h.k.Logger.Warn("attempt not released from the worker's lease; it goes with the lease", "error", err)
	}
}
