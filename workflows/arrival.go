package workflows

import (
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// SignalArrival is the worker interceptor that records the order in which signals reach a
// workflow. The SDK delivers each signal name to a channel of its own, which loses the
// order across names: a force sent after a notification could be handled before it. The
// interceptor sees every signal in history order and the BrokerSwitch workflow takes its
// signals in that order. Register it on every worker (worker.Options.Interceptors); without
// it, signals are taken name by name, as before.
type SignalArrival struct {
	interceptor.WorkerInterceptorBase
}

// InterceptWorkflow gives each workflow run its own arrival log.
func (*SignalArrival) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &arrivalInbound{log: &arrivalLog{}}
	i.Next = next
	return i
}

// arrivalLog holds the names of the signals received and not yet taken, in order.
type arrivalLog struct{ names []string }

type arrivalKey struct{}

type arrivalInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	log *arrivalLog
}

// ExecuteWorkflow hands the log to the workflow through its context.
func (i *arrivalInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return i.Next.ExecuteWorkflow(workflow.WithValue(ctx, arrivalKey{}, i.log), in)
}

// HandleSignal notes the signal's name, then delivers it to its channel as usual. It runs
// once per signal event, in history order, on replay too.
func (i *arrivalInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	i.log.names = append(i.log.names, in.SignalName)
	return i.Next.HandleSignal(ctx, in)
}

// arrivals is the run's arrival log, nil when the worker has no SignalArrival.
func arrivals(ctx workflow.Context) *arrivalLog {
	log, _ := ctx.Value(arrivalKey{}).(*arrivalLog)
	return log
}
