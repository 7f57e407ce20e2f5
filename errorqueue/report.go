package errorqueue

import (
	"context"
	"log/slog"
)

// report logs one line for a requeue or purge run, naming its filter and its counts, and
// counts what it moved in the metrics.
func (s *Service) report(ctx context.Context, op string, run Run) {
	var requeued, skipped, purged, already int
	for _, o := range run.Outcomes {
		requeued += o.Requeued
		skipped += o.Skipped
		purged += o.Purged
		already += o.AlreadyCopied
		if s.Metrics != nil && !run.DryRun {
			s.Metrics.ErrorsRequeued(o.Queue, o.Kind, o.Requeued+o.AlreadyCopied)
			s.Metrics.ErrorsPurged(o.Queue, o.Kind, o.Purged)
		}
	}
	level := slog.LevelInfo
	if len(run.Errors) > 0 {
		level = slog.LevelWarn
	}
	s.logger().Log(ctx, level, "-error "+op+" run", "filter", run.Filter, "dry_run", run.DryRun, "matched", run.Matched,
		"requeued", requeued, "already_copied", already, "skipped_applied", skipped, "purged", purged, "errors", run.Errors)
}
