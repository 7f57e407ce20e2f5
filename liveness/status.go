package liveness

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Attempt is an activity attempt a live worker holds, as GET /api/v1/broker shows it.
type Attempt struct {
	WorkflowID   string    `json:"workflowId"`
	ActivityType string    `json:"activity"`
	Attempt      int       `json:"attempt"`
	Queue        string    `json:"queue,omitempty"`
	Broker       *int      `json:"broker,omitempty"`
	Worker       string    `json:"worker"`
	Since        time.Time `json:"since"`
}

// Attempts lists what every live worker holds, by workflow: which broker each queue's
// window reads, on which worker, and since when.
func Attempts(ctx context.Context, db *gorm.DB) ([]Attempt, error) {
	var out []Attempt
	err := db.WithContext(ctx).Raw(`SELECT a.workflow_id, a.activity_type, a.attempt, a.queue, a.broker, l.identity AS worker, a.started_at AS since
		FROM lease_attempts a JOIN worker_leases l USING (lease_id)
		WHERE l.expires_at > now() ORDER BY a.workflow_id, a.started_at`).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("list held attempts: %w", err)
	}
	return out, nil
}
