package errorqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/time/rate"
)

// RequeueOptions are a requeue run's choices besides its filter.
type RequeueOptions struct {
	// DryRun reports what would be requeued, skipped and purged, and moves nothing.
	DryRun bool `json:"dryRun"`
	// Rate caps the copies per second; 0 means no cap.
	Rate float64 `json:"rate"`
	// PurgeApplied takes from -error the messages the ledger shows applied since, which
	// are otherwise skipped and reported.
	PurgeApplied bool `json:"purgeApplied"`
}

// Outcome counts one kind of reason in a requeue or purge run.
type Outcome struct {
	Queue  string `json:"queue"`
	Broker int    `json:"broker"`
	Kind   string `json:"kind"`
	// Requeued were copied to their queue and taken from -error (or would be, in a dry run).
	Requeued int `json:"requeued"`
	// Skipped are left in -error: the ledger shows them applied since.
	Skipped int `json:"skipped"`
	// Purged were taken from -error without a copy.
	Purged int `json:"purged"`
	// AlreadyCopied were copied by an earlier, interrupted run and are only taken now.
	AlreadyCopied int `json:"alreadyCopied"`
}

// Run is what a requeue or purge run did.
type Run struct {
	Filter   string    `json:"filter"`
	DryRun   bool      `json:"dryRun"`
	Matched  int       `json:"matched"`
	Outcomes []Outcome `json:"outcomes"`
	// Skipped lists the messages left in -error because the ledger shows them applied.
	Skipped []Message `json:"skipped"`
	// Errors name the queues that could not be read or finished, each with why; what
	// was done before is counted.
	Errors []string `json:"errors,omitempty"`
}

// ErrNothingMatched is wrapped into the error of a requeue or purge whose filter matched
// no message in the queues it could read.
var ErrNothingMatched = errors.New("the filter matched no message")

// Requeue copies each message the filter selects back to its own queue on its own
// broker, in -error's order, and takes it from -error once the broker confirmed the copy
// and error_requeues recorded it: an interrupted run, run again, takes the original
// without copying it twice. A copy the broker refuses leaves its original in -error and
// ends that queue's run. A message the ledger shows applied since is skipped (or purged,
// with PurgeApplied).
func (s *Service) Requeue(ctx context.Context, f Filter, opts RequeueOptions) (Run, error) {
	limit := rate.NewLimiter(rate.Inf, 1)
	if opts.Rate > 0 {
		limit = rate.NewLimiter(rate.Limit(opts.Rate), 1)
	}
	if !opts.DryRun {
		if err := s.forgetOldMarkers(ctx); err != nil {
			return Run{}, err
		}
	}
	run, err := s.move(ctx, "requeue", f, opts.DryRun, func(ctx context.Context, m *Message) (action, error) {
		if err := s.checkApplied(ctx, m); err != nil {
			return keep, err
		}
		switch {
		case m.AppliedSince && opts.PurgeApplied:
			return take, nil
		case m.AppliedSince:
			return keep, nil
		}
		if opts.DryRun {
			return requeue, nil
		}
		copied, err := s.copiedBefore(ctx, *m)
		if err != nil || copied {
			return take, err
		}
		return requeue, limit.Wait(ctx)
	})
	return run, err
}

// Purge takes the messages the filter selects from -error, for good.
func (s *Service) Purge(ctx context.Context, f Filter) (Run, error) {
	return s.move(ctx, "purge", f, false, func(context.Context, *Message) (action, error) { return take, nil })
}

// move runs decide over every message the filter selects and counts what was done once it
// was done (a dry run counts what decide chose). A take that decide returns for a message
// copied before counts as AlreadyCopied.
func (s *Service) move(ctx context.Context, op string, f Filter, dryRun bool, decide func(context.Context, *Message) (action, error)) (Run, error) {
	if err := f.check(len(s.Brokers.Endpoints()), s.Queues); err != nil {
		return Run{}, err
	}
	run := Run{Filter: f.String(), DryRun: dryRun, Outcomes: []Outcome{}, Skipped: []Message{}}
	for _, index := range f.brokers(len(s.Brokers.Endpoints())) {
		for _, q := range f.queues(s.Queues) {
			_, err := s.scan(ctx, index, q, func(ctx context.Context, _ amqp.Delivery, m *Message) (action, error) {
				if !f.matches(*m) {
					return keep, nil
				}
				run.Matched++
				act, err := decide(ctx, m)
				if err != nil || !dryRun {
					return act, err
				}
				run.count(op, *m, act)
				return keep, nil
			}, s.copied, func(m Message, act action) {
				if !dryRun && f.matches(m) {
					run.count(op, m, act)
				}
			})
			if err != nil {
				run.Errors = append(run.Errors, s.errorText(err))
			}
			if ctx.Err() != nil {
				break
			}
		}
	}
	s.report(ctx, op, run)
	if run.Matched == 0 && len(run.Errors) == 0 {
		return run, fmt.Errorf("%w (%s)", ErrNothingMatched, run.Filter)
	}
	return run, ctx.Err()
}

// count adds m, and what was done with it, to the run's outcomes.
func (r *Run) count(op string, m Message, act action) {
	i := slices.IndexFunc(r.Outcomes, func(o Outcome) bool { return o.Broker == m.Broker && o.Queue == m.Queue && o.Kind == m.ReasonKind })
	if i < 0 {
		r.Outcomes = append(r.Outcomes, Outcome{Queue: m.Queue, Broker: m.Broker, Kind: m.ReasonKind})
		i = len(r.Outcomes) - 1
	}
	o := &r.Outcomes[i]
	switch {
	case act == requeue:
		o.Requeued++
	case act == keep:
		o.Skipped++
		r.Skipped = append(r.Skipped, m)
	case op == "requeue" && !m.AppliedSince:
		o.AlreadyCopied++
	default:
		o.Purged++
	}
}

// copied records a requeued message's confirmed copy in error_requeues.
func (s *Service) copied(ctx context.Context, m Message) error {
	if err := s.markCopied(ctx, m); err != nil {
		return err
	}
	if s.afterMark != nil {
		return s.afterMark(m)
	}
	return nil
}
