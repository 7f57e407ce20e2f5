package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/brokerswitch/brokerswitch/liveness"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// queryTimeout bounds the status query: with no worker polling, Temporal holds a query
// until the caller gives up, and GET /api/v1/broker must not hang on that.
const queryTimeout = 2 * time.Second

// getBroker shows the brokers, the state in Postgres and the BrokerSwitch workflow. A
// Temporal that cannot answer is shown, not an error: the state in Postgres is the truth
// and the operator needs it most when something else is wrong.
func (s *server) getBroker(c *gin.Context) {
	ctx := c.Request.Context()
	st, err := s.deps.Store.LoadAllowingRemoved(ctx)
	if err != nil {
		s.failInternal(c, http.StatusServiceUnavailable, "the broker state cannot be read; retry later", err)
		return
	}
	c.JSON(http.StatusOK, brokerStatus{
		Brokers:   brokerViews(s.deps.Settings.Brokers, st),
		stateView: newStateView(st),
		Workflow:  s.describeWorkflow(ctx),
		Windows:   s.windows(ctx),
	})
}

// windows lists the window activities live workers hold; a read that fails shows none,
// with a warning: the state above is what the answer is for.
func (s *server) windows(ctx context.Context) []liveness.Attempt {
	out := []liveness.Attempt{}
	if s.deps.Attempts == nil {
		return out
	}
	held, err := s.deps.Attempts(ctx)
	if err != nil {
		s.log.WarnContext(ctx, "held windows not read", "error", err)
		return out
	}
	for _, a := range held {
		if a.ActivityType != "WaitForChange" {
			out = append(out, a)
		}
	}
	return out
}

// describeWorkflow asks Temporal about the BrokerSwitch workflow and, while it runs,
// what it waits for.
func (s *server) describeWorkflow(ctx context.Context) workflowView {
	v := workflowView{ID: workflows.BrokerSwitchWorkflowID}
	desc, err := s.deps.Temporal.DescribeWorkflowExecution(ctx, workflows.BrokerSwitchWorkflowID, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		v.Status = "NotFound"
		v.Error = "no BrokerSwitch workflow yet: a worker or the next notification or order starts it"
		return v
	case err != nil:
		s.log.WarnContext(ctx, "describe BrokerSwitch workflow failed", "error", err)
		v.Status = "Unknown"
		v.Error = "Temporal did not answer"
		return v
	}
	info := desc.GetWorkflowExecutionInfo()
	v.Found = true
	v.Status = info.GetStatus().String()
	v.RunID = info.GetExecution().GetRunId()
	if ts := info.GetStartTime(); ts != nil {
		t := ts.AsTime()
		v.StartTime = &t
	}
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return v
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	res, err := s.deps.Temporal.QueryWorkflow(qctx, workflows.BrokerSwitchWorkflowID, v.RunID, workflows.QueryStatus)
	var status workflows.Status
	if err == nil {
		err = res.Get(&status)
	}
	if err != nil {
		s.log.WarnContext(ctx, "status query of the BrokerSwitch workflow failed", "error", err)
		v.Error = "the workflow did not answer its status query (is a worker running?)"
		return v
	}
	v.Waiting = status.Waiting
	v.Checks = &status.Checks
	return v
}
