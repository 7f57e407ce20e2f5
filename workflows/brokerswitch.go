package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/models"
)

// BrokerSwitchInput configures the BrokerSwitch workflow and carries what a run hands to
// the next one when it continues as new.
type BrokerSwitchInput struct {
	// Queues are the logical queues whose window workflows follow a committed switch.
	Queues []string
	// DrainCheckInterval is the pause between drain checks (default 3s).
	DrainCheckInterval time.Duration
	// Signals were received but not yet handled by the previous run.
	Signals []Signal
	// Checks counts the drain checks of the current hop so far.
	Checks int
}

// Signal is one operator or producer message, kept in arrival order.
type Signal struct {
	Name         string
	Notification models.Notification                 `json:",omitzero"`
	Force        activities.ForceSwitchInput         `json:",omitzero"`
	Cancel       activities.CancelPendingSwitchInput `json:",omitzero"`
	// Invalid says why the signal's input could not be read; such a signal is skipped.
	Invalid string `json:",omitempty"`

	// reply is set for an order that came as a Workflow Update: its handler waits for it.
	// Updates finish before a continue-as-new, so it never needs to travel.
	reply *OrderResult
}

// OrderResult is the workflow's answer to a force or cancel sent as a Workflow Update.
type OrderResult struct {
	// Outcome is OrderCommitted, OrderAlreadyThere or OrderRefused.
	Outcome string
	// Reason says why an order was refused.
	Reason string `json:",omitempty"`
	// State is the broker state after the order.
	State models.BrokerState
	done  bool
}

// Status is what the status query answers.
type Status struct {
	State     models.BrokerState
	Checks    int
	LastCheck *models.DrainCheck
	Waiting   string
}

// BrokerSwitch follows the producer from broker to broker. While a switch is pending it
// checks the active broker until its queues and their -retry siblings are empty, then
// commits the next hop and tells the windows; signals are handled in arrival order.
// When nothing is pending it waits for a signal, so that operators can always signal it.
func BrokerSwitch(ctx workflow.Context, in BrokerSwitchInput) error {
	w, err := newSwitchRun(ctx, in)
	if err != nil {
		return err
	}
	return w.run(ctx)
}

type switchRun struct {
	in      BrokerSwitchInput
	status  Status
	signals []Signal
	act     *activities.Switch
	// watching is the running watch of an idle workflow, if any.
	watching *idleWatch
	// wakeup interrupts a wait when an order arrives as a Workflow Update.
	wakeup workflow.Channel
	// arrivals is the order signals came in, in runs that follow it; nil takes them name
	// by name.
	arrivals *arrivalLog
	// capHeld bounds the pending-switch signals held at once to maxHeldNotifications, in
	// runs that follow heldNotificationsCapped.
	capHeld bool
}

// heldNotificationsCapped versions the runs that hold at most maxHeldNotifications
// pending-switch signals.
const heldNotificationsCapped = "held-notifications-capped"

// maxHeldNotifications is the most pending-switch signals the workflow holds unhandled.
// One more is dropped safely: the API records a notification in Postgres before it
// signals, and each held one re-reads the state, so the first handled after the drop
// sees the dropped one too. A flood then costs at most this many activities, not one each.
const maxHeldNotifications = 10

// hold queues a signal to be handled, unless it is a pending-switch signal beyond the cap.
func (w *switchRun) hold(s Signal) {
	if w.capHeld && s.Name == SignalPendingSwitch {
		held := 0
		for _, h := range w.signals {
			if h.Name == SignalPendingSwitch {
				held++
			}
		}
		if held >= maxHeldNotifications {
			return
		}
	}
	w.signals = append(w.signals, s)
}

// signalNames are the signals the BrokerSwitch workflow takes.
var signalNames = []string{SignalPendingSwitch, SignalForceSwitch, SignalCancelPendingSwitch}

func newSwitchRun(ctx workflow.Context, in BrokerSwitchInput) (*switchRun, error) {
	if in.DrainCheckInterval <= 0 {
		in.DrainCheckInterval = 3 * time.Second
	}
	w := &switchRun{in: in, signals: in.Signals, status: Status{Checks: in.Checks}, wakeup: workflow.NewBufferedChannel(ctx, 1)}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (Status, error) { return w.status, nil }); err != nil {
		return nil, fmt.Errorf("register status query: %w", err)
	}
	if workflow.GetVersion(ctx, signalsInArrivalOrder, workflow.DefaultVersion, 1) == 1 {
		w.arrivals = arrivals(ctx)
	}
	if workflow.GetVersion(ctx, ordersByUpdate, workflow.DefaultVersion, 1) == 1 {
		if err := w.acceptOrdersByUpdate(ctx); err != nil {
			return nil, err
		}
	}
	w.capHeld = workflow.GetVersion(ctx, heldNotificationsCapped, workflow.DefaultVersion, 1) == 1
	return w, nil
}

// ordersByUpdate versions the runs that take force and cancel as Workflow Updates.
const ordersByUpdate = "orders-by-update"

// settingsFromWorker versions the runs that read the queues and the drain-check interval
// from the worker's configuration instead of keeping the first run's input forever.
const settingsFromWorker = "settings-from-worker"

// acceptOrdersByUpdate registers the force and cancel updates. An order joins the signals
// in arrival order and its handler waits for the main loop's answer.
func (w *switchRun) acceptOrdersByUpdate(ctx workflow.Context) error {
	order := func(ctx workflow.Context, s Signal) (OrderResult, error) {
		reply := &OrderResult{}
		s.reply = reply
		w.takeBufferedSignals(ctx) // the signals that came before it go first
		w.signals = append(w.signals, s)
		w.wakeup.SendAsync(struct{}{})
		if err := workflow.Await(ctx, func() bool { return reply.done }); err != nil {
			return OrderResult{}, fmt.Errorf("wait for the order to be applied: %w", err)
		}
		return *reply, nil
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateForceSwitch,
		func(ctx workflow.Context, in activities.ForceSwitchInput) (OrderResult, error) {
			return order(ctx, Signal{Name: SignalForceSwitch, Force: in})
		},
		workflow.UpdateHandlerOptions{Validator: func(in activities.ForceSwitchInput) error {
			if in.Index < 0 {
				return fmt.Errorf("broker index %d is negative", in.Index)
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("register %s update: %w", UpdateForceSwitch, err)
	}
	err = workflow.SetUpdateHandler(ctx, UpdateCancelPendingSwitch,
		func(ctx workflow.Context, in activities.CancelPendingSwitchInput) (OrderResult, error) {
			return order(ctx, Signal{Name: SignalCancelPendingSwitch, Cancel: in})
		})
	if err != nil {
		return fmt.Errorf("register %s update: %w", UpdateCancelPendingSwitch, err)
	}
	return nil
}

func (w *switchRun) run(ctx workflow.Context) error {
	if err := w.execute(ctx, "read broker state", w.act.LoadState, nil, &w.status.State); err != nil {
		return err
	}
	if workflow.GetVersion(ctx, settingsFromWorker, workflow.DefaultVersion, 1) == 1 {
		// A changed QUEUES or DRAIN_CHECK_INTERVAL takes effect at the next run, not never.
		var settings activities.SwitchSettings
		if err := w.execute(ctx, "read the worker's settings", w.act.Settings, nil, &settings); err != nil {
			return err
		}
		w.in.Queues = settings.Queues
		if settings.DrainCheckInterval > 0 {
			w.in.DrainCheckInterval = settings.DrainCheckInterval
		}
	}
	w.afterChange(ctx, false)
	for ctx.Err() == nil {
		w.takeBufferedSignals(ctx)
		if err := w.handleSignals(ctx); err != nil {
			return err
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return w.continueAsNew(ctx)
		}
		pending := w.status.State.Pending
		if pending == nil {
			if err := w.idle(ctx); err != nil {
				return err
			}
			continue
		}
		if err := w.checkAndCommit(ctx, pending.Next()); err != nil {
			return err
		}
	}
	return temporal.NewCanceledError("broker switch workflow canceled")
}

// checkAndCommit runs one drain check of the active broker and commits the hop when it is
// empty; otherwise it waits for the next check or a signal.
func (w *switchRun) checkAndCommit(ctx workflow.Context, hop models.Hop) error {
	active := w.status.State.ActiveIndex
	var check models.DrainCheck
	if err := w.execute(ctx, fmt.Sprintf("drain check of broker %d", active), w.act.DrainCheck,
		activities.DrainCheckInput{BrokerIndex: active}, &check); err != nil {
		return err
	}
	w.status.Checks++
	w.status.LastCheck = &check
	if !check.Drained() {
		next := w.nextCheckIn()
		why := fmt.Sprintf("Switch %d → %d waits: broker %d is not drained yet %v; next check in %s",
			active, hop.Index, active, check.Counts, next)
		if !check.Reachable {
			why = fmt.Sprintf("Switch %d → %d waits: broker %d is unreachable (%s); it will be checked again in %s",
				active, hop.Index, active, check.Error, next)
			workflow.GetLogger(ctx).Warn("active broker unreachable, switch waits", "broker", active, "error", check.Error)
		}
		w.wait(ctx, why, next)
		return nil
	}
	in := activities.CommitHopInput{From: active, Hop: hop, Checks: w.status.Checks}
	if err := w.execute(ctx, fmt.Sprintf("commit switch %d → %d", active, hop.Index), w.act.CommitHop, in, &w.status.State); err != nil {
		return err
	}
	w.status.Checks = 0
	w.afterChange(ctx, true)
	return nil
}

// firstRecheck is the pause after a hop's first failed drain check. A backlog usually
// clears within seconds of a rotation, so the pause doubles from here up to
// DrainCheckInterval instead of waiting a whole interval after every check.
const firstRecheck = 250 * time.Millisecond

// nextCheckIn is the pause before the next drain check of the current hop.
func (w *switchRun) nextCheckIn() time.Duration {
	d := firstRecheck
	for i := 1; i < w.status.Checks && d < w.in.DrainCheckInterval; i++ {
		d *= 2
	}
	return min(d, w.in.DrainCheckInterval)
}

// handleSignals applies the signals received so far, in arrival order.
func (w *switchRun) handleSignals(ctx workflow.Context) error {
	for len(w.signals) > 0 {
		s := w.signals[0]
		w.signals = w.signals[1:]
		moved := false
		var err error
		if s.Invalid != "" {
			workflow.GetLogger(ctx).Warn("signal ignored: its input is not valid", "signal", s.Name, "error", s.Invalid)
			continue
		}
		before := w.status.State
		// Results land in next, so that a refused order leaves the cached state as it was.
		var next models.BrokerState
		switch s.Name {
		case SignalPendingSwitch:
			var res activities.NotificationResult
			err = w.execute(ctx, fmt.Sprintf("record notification for %s vhost %s", s.Notification.Host, s.Notification.Vhost),
				w.act.RecordNotification, s.Notification, &res)
			next = res.State
		case SignalForceSwitch:
			err = w.execute(ctx, fmt.Sprintf("force switch to broker %d", s.Force.Index), w.act.ForceSwitch, s.Force, &next)
			moved = err == nil
		case SignalCancelPendingSwitch:
			err = w.execute(ctx, "cancel the pending switch", w.act.CancelPendingSwitch, s.Cancel, &next)
		}
		if temporal.IsApplicationError(err) && isNonRetryable(err) {
			// A refused order (an unknown broker) must not end the workflow.
			workflow.GetLogger(ctx).Warn("signal refused", "signal", s.Name, "error", err)
			s.answer(OrderResult{Outcome: OrderRefused, Reason: refusal(err), State: w.status.State})
			continue
		}
		if err != nil {
			return err
		}
		w.status.State = next
		s.answer(orderOutcome(s, before, next))
		w.status.Checks = 0
		w.afterChange(ctx, moved)
	}
	return nil
}

// afterChange shows the new state in the Web UI and, when the active broker moved, tells
// every window to end its window and resolve the broker again.
func (w *switchRun) afterChange(ctx workflow.Context, moved bool) {
	memo := map[string]any{"activeIndex": w.status.State.ActiveIndex, "pendingSwitch": w.status.State.Pending}
	if err := workflow.UpsertMemo(ctx, memo); err != nil {
		workflow.GetLogger(ctx).Warn("memo not updated", "error", err)
	}
	if !moved {
		return
	}
	futures := make([]workflow.Future, 0, len(w.in.Queues))
	for _, q := range w.in.Queues {
		futures = append(futures, workflow.SignalExternalWorkflow(ctx, QueueWindowWorkflowID(q), "", SignalBrokerChanged, nil))
	}
	for i, f := range futures {
		if err := f.Get(ctx, nil); err != nil {
			// A window that is not running resolves the broker when it starts anyway.
			workflow.GetLogger(ctx).Warn("window not told of the switch", "queue", w.in.Queues[i], "error", err)
		}
	}
}

// idleReload is how often an idle BrokerSwitch workflow re-read the broker state before
// idleWatchesPostgres.
const idleReload = time.Minute

// idleFallback is how often an idle BrokerSwitch workflow re-reads the broker state
// although Postgres announced nothing: a rare fallback.
const idleFallback = time.Hour

// idleWatchesPostgres versions the idle wait that hears of a lost signal from Postgres
// instead of re-reading the state every idleReload.
const idleWatchesPostgres = "idle-watches-postgres"

const idleWhy = "Nothing pending: waiting for a pending-switch, force-switch or cancel-pending-switch signal"

// idle waits, with nothing pending, for a signal or for a change of the broker state that
// no signal brought. Postgres is the source of truth: a switch recorded whose signal was
// lost is found here.
func (w *switchRun) idle(ctx workflow.Context) error {
	if workflow.GetVersion(ctx, idleWatchesPostgres, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		if w.wait(ctx, idleWhy, idleReload) {
			return nil
		}
		return w.execute(ctx, "read broker state", w.act.LoadState, nil, &w.status.State)
	}
	// A watch and its fallback timer outlive a signal that interrupts the wait, and the
	// next wait takes them up again: an idle workflow costs a watch, a timer and a read
	// per change or per idleFallback.
	if w.watching == nil {
		w.watching = w.watch(ctx)
	}
	for {
		if w.waitFor(ctx, idleWhy, w.watching.pending()...) || ctx.Err() != nil {
			return nil
		}
		if w.watching.sawNothing(ctx) {
			continue // the timer decides
		}
		w.watching.stop()
		w.watching = nil
		return w.execute(ctx, "read broker state", w.act.LoadState, nil, &w.status.State)
	}
}

// idleWatch is an idle workflow's watch of Postgres and its fallback timer.
type idleWatch struct {
	watch       workflow.Future // WaitForChange: true when Postgres announced a change
	watchDone   bool
	timer       workflow.Future
	cancelTimer workflow.CancelFunc
}

// watchHeartbeatTimeout is how long a watch may go silent before Temporal fails it, and
// the workflow reads the state. A watch that saw a change while Temporal was away has its
// answer lost (the SDK gives up reporting it after ten seconds), and one whose worker died
// answers nothing: without a heartbeat either held the idle workflow until idleFallback,
// an hour, with a recorded notification unread (soak seed 4046107636596888648). A minute
// is what the API's 502 "recorded" promises.
const watchHeartbeatTimeout = time.Minute

func (w *switchRun) watch(ctx workflow.Context) *idleWatch {
	watchCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: idleFallback + time.Minute,
		HeartbeatTimeout:    watchHeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             "wait for Postgres to announce a change of the broker state",
	})
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	return &idleWatch{
		watch: workflow.ExecuteActivity(watchCtx, w.act.WaitForChange,
			activities.WaitForChangeInput{ActiveIndex: w.status.State.ActiveIndex}),
		timer:       workflow.NewTimerWithOptions(timerCtx, idleFallback, workflow.TimerOptions{Summary: "re-read the broker state"}),
		cancelTimer: cancelTimer,
	}
}

// pending are the futures the wait blocks on: the watch until it has answered, and the timer.
func (i *idleWatch) pending() []workflow.Future {
	if i.watchDone {
		return []workflow.Future{i.timer}
	}
	return []workflow.Future{i.watch, i.timer}
}

// sawNothing tells, once, that the watch answered "no change" before the timer fired; a
// failed watch counts as a change, so that the state is read again.
func (i *idleWatch) sawNothing(ctx workflow.Context) bool {
	if i.watchDone || i.timer.IsReady() || !i.watch.IsReady() {
		return false
	}
	i.watchDone = true
	var changed bool
	err := i.watch.Get(ctx, &changed)
	return err == nil && !changed
}

func (i *idleWatch) stop() {
	if !i.timer.IsReady() {
		i.cancelTimer()
	}
}

// wait shows why the workflow waits, then blocks until a signal arrives or d passes; it
// reports whether a signal arrived.
func (w *switchRun) wait(ctx workflow.Context, why string, d time.Duration) (signalled bool) {
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	return w.waitFor(ctx, why, workflow.NewTimerWithOptions(timerCtx, d, workflow.TimerOptions{Summary: "next check"}))
}

// waitFor shows why the workflow waits, then blocks until a signal arrives or one of the
// futures is ready; it reports whether a signal arrived.
func (w *switchRun) waitFor(ctx workflow.Context, why string, futures ...workflow.Future) (signalled bool) {
	w.status.Waiting = why
	workflow.SetCurrentDetails(ctx, why)
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
	for _, name := range signalNames {
		sel.AddReceive(workflow.GetSignalChannel(ctx, name), func(c workflow.ReceiveChannel, _ bool) {
			if w.arrivals != nil {
				// Every signal delivered so far, in the order it came, not this one first.
				w.takeBufferedSignals(ctx)
			} else {
				w.hold(receiveSignal(ctx, name, c))
			}
			signalled = true
		})
	}
	// An order sent as an update is already queued; the wake-up only ends the wait.
	sel.AddReceive(w.wakeup, func(c workflow.ReceiveChannel, _ bool) {
		c.ReceiveAsync(nil)
		signalled = true
	})
	for _, f := range futures {
		sel.AddFuture(f, func(workflow.Future) {})
	}
	sel.Select(ctx)
	return signalled
}

// signalsInArrivalOrder versions the runs that take their signals in the order they
// arrived, across names, instead of name by name.
const signalsInArrivalOrder = "signals-in-arrival-order"

// takeBufferedSignals moves every signal already delivered into the queue without blocking:
// in arrival order when the worker records it (SignalArrival), else name by name.
func (w *switchRun) takeBufferedSignals(ctx workflow.Context) {
	if w.arrivals != nil {
		log := w.arrivals
		for len(log.names) > 0 {
			name := log.names[0]
			log.names = log.names[1:]
			var raw json.RawMessage
			if isSwitchSignal(name) && workflow.GetSignalChannel(ctx, name).ReceiveAsync(&raw) {
				w.hold(decodeSignal(name, raw))
			}
		}
		return
	}
	for _, name := range signalNames {
		c := workflow.GetSignalChannel(ctx, name)
		for {
			var raw json.RawMessage
			if !c.ReceiveAsync(&raw) {
				break
			}
			w.hold(decodeSignal(name, raw))
		}
	}
}

// answer ends the wait of an order's update handler, if the order came as one.
func (s Signal) answer(r OrderResult) {
	if s.reply != nil {
		r.done = true
		*s.reply = r
	}
}

// orderOutcome says what an applied order did, from the state before and after it.
func orderOutcome(s Signal, before, after models.BrokerState) OrderResult {
	r := OrderResult{Outcome: OrderCommitted, State: after}
	switch s.Name {
	case SignalForceSwitch:
		if before.ActiveIndex == s.Force.Index && before.Pending == nil {
			r.Outcome = OrderAlreadyThere
		}
	case SignalCancelPendingSwitch:
		switch {
		// A cancel that names a switch was given because the API read one in Postgres;
		// the workflow's own reading may not show it yet (the notification's signal can
		// reach the workflow after the update), so only an unnamed cancel is judged by it.
		case before.Pending == nil && s.Cancel.SwitchedAt.IsZero():
			r.Outcome = OrderAlreadyThere
		case after.Pending != nil:
			// The switch the cancel named is gone; the producer's later one is not undone.
			r.Reason = "a notification recorded after the cancel was asked for is kept"
		}
	}
	return r
}

// refusal is a refused order's reason without the activity's wrapping.
func refusal(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	return err.Error()
}

// continueAsNew hands the state and the unhandled signals to a fresh run, so that a long
// -retry tail does not grow one history without bound. Orders that came as updates are
// answered first: an update cannot travel to the next run.
func (w *switchRun) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return fmt.Errorf("wait for update handlers: %w", err)
	}
	w.takeBufferedSignals(ctx)
	next := w.in
	next.Signals = w.signals
	next.Checks = w.status.Checks
	return workflow.NewContinueAsNewError(ctx, BrokerSwitch, next)
}

// execute runs one activity of the BrokerSwitch workflow, named in the Web UI by summary.
func (w *switchRun) execute(ctx workflow.Context, summary string, activity any, arg any, result any) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         retryForever,
		Summary:             summary,
	})
	args := []any{}
	if arg != nil {
		args = append(args, arg)
	}
	if err := workflow.ExecuteActivity(actx, activity, args...).Get(ctx, result); err != nil {
		return fmt.Errorf("%s: %w", summary, err)
	}
	return nil
}

// receiveSignal takes one signal as raw JSON: an operator's malformed input must be
// reported and skipped, not block the workflow on a value it cannot decode.
func receiveSignal(ctx workflow.Context, name string, c workflow.ReceiveChannel) Signal {
	var raw json.RawMessage
	c.Receive(ctx, &raw)
	return decodeSignal(name, raw)
}

func decodeSignal(name string, raw json.RawMessage) Signal {
	s := Signal{Name: name}
	var err error
	switch name {
	case SignalPendingSwitch:
		err = json.Unmarshal(raw, &s.Notification)
	case SignalForceSwitch:
		err = json.Unmarshal(raw, &s.Force)
	case SignalCancelPendingSwitch:
		if len(raw) > 0 && string(raw) != "null" { // the plain CLI signal has no input
			err = json.Unmarshal(raw, &s.Cancel)
		}
	}
	if err != nil {
		s.Invalid = err.Error()
	}
	return s
}

func isSwitchSignal(name string) bool {
	for _, n := range signalNames {
		if n == name {
			return true
		}
	}
	return false
}

func isNonRetryable(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.NonRetryable()
}
