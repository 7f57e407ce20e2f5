package activities

import (
	"context"
	"log/slog"

	"go.temporal.io/sdk/activity"
)

// LogHandler wraps h so that every record logged with a context inside an activity
// carries the workflow id and the activity type ("workflow_id", "activity"): a window's
// logs, those of the ingest handler and the broker pool it calls included, can then be
// found from the Web UI's workflow page and back. Records logged without such a context
// pass through unchanged.
func LogHandler(h slog.Handler) slog.Handler {
	return activityLogHandler{next: h}
}

type activityLogHandler struct {
	next slog.Handler
}

func (h activityLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h activityLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil && activity.IsActivity(ctx) {
		info := activity.GetInfo(ctx)
		r = r.Clone()
		r.AddAttrs(
			slog.String("workflow_id", info.WorkflowExecution.ID),
			slog.String("activity", info.ActivityType.Name),
		)
	}
	return h.next.Handle(ctx, r)
}

func (h activityLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return activityLogHandler{next: h.next.WithAttrs(attrs)}
}

func (h activityLogHandler) WithGroup(name string) slog.Handler {
	return activityLogHandler{next: h.next.WithGroup(name)}
}
