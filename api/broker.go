package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// pollEvery is how often a forced switch or a cancel re-reads the state while it waits.
const pollEvery = 100 * time.Millisecond

// notificationRequest is the producer's POST /api/v1/broker/pending-switch body. Pointers
// tell a missing field from an empty one.
type notificationRequest struct {
	Host       *string `json:"host"`
	Vhost      *string `json:"vhost"`
	SwitchedAt *string `json:"switchedAt"`
	// From is the broker the producer left for this one, when it says.
	From *brokerName `json:"from"`
}

// brokerName names a broker by host and vhost, as the producer spells them.
type brokerName struct {
	Host  *string `json:"host"`
	Vhost *string `json:"vhost"`
}

// postPendingSwitch takes the producer's word that it now publishes to another broker.
// The API predicts the outcome with the same pure rule the workflow applies, so that stale
// and duplicate deliveries are answered without touching Temporal; everything else goes
// to the workflow, which applies the rule again, authoritatively, in a transaction.
func (s *server) postPendingSwitch(c *gin.Context) {
	var req notificationRequest
	if status, msg := decodeJSON(c.Request.Body, &req); status != 0 {
		s.fail(c, status, msg)
		return
	}
	if req.Host == nil || *req.Host == "" {
		s.fail(c, http.StatusBadRequest, "host is required")
		return
	}
	now := s.deps.Now()
	switchedAt, status, msg := s.switchedAt(req.SwitchedAt, now)
	if status != 0 {
		s.fail(c, status, msg)
		return
	}
	vhost := ""
	if req.Vhost != nil {
		vhost = *req.Vhost
	}
	// Matched by endpoint, never by index: the producer's list and ours need not be in
	// the same order.
	ep, ok := broker.FindEndpoint(s.deps.Settings.Brokers, *req.Host, vhost)
	if !ok {
		s.fail(c, http.StatusNotFound, fmt.Sprintf("no configured broker has host %q and vhost %q", *req.Host, vhost))
		return
	}

	ctx := c.Request.Context()
	// The canonical host and decoded vhost are stored, so that the hop resolves against
	// the configured brokers however the producer spelled them.
	n := brokerstate.Notification{Index: ep.Index, Host: ep.Host, Vhost: ep.Vhost, SwitchedAt: switchedAt.UTC()}
	if req.From != nil {
		if req.From.Host == nil || *req.From.Host == "" {
			s.fail(c, http.StatusBadRequest, "from.host is required when from is given")
			return
		}
		n.From = s.fromHop(ctx, req.From)
	}
	var outcome string
	_, err := s.deps.Store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		var next brokerstate.State
		next, outcome = cur.ApplyNotification(n, now)
		return next, nil
	})
	if err != nil {
		s.failInternal(c, http.StatusServiceUnavailable, "the notification could not be recorded; retry later", err)
		return
	}
	s.answerNotification(c, n, ep, outcome)
}

// answerNotification tells the workflow of a notification recorded with outcome, unless
// it is stale, and answers the producer.
func (s *server) answerNotification(c *gin.Context, n brokerstate.Notification, ep broker.Endpoint, outcome string) {
	ctx := c.Request.Context()
	answer := notificationAnswer{Outcome: outcome, Target: brokerRef{Index: ep.Index, Host: ep.Host, Vhost: ep.Vhost}}
	if outcome == brokerstate.NotificationStale {
		answer.Ignored = outcome
		c.JSON(http.StatusOK, answer)
		return
	}
	// The workflow re-reads the state on the signal; should the signal be lost, it
	// re-reads Postgres on its own within a minute, so the recorded switch is not lost.
	if err := s.signal(ctx, workflows.SignalPendingSwitch, n); err != nil {
		s.failInternal(c, http.StatusBadGateway, "the notification was recorded, but the workflow engine could not be told; it will find it within a minute", err)
		return
	}
	s.log.InfoContext(ctx, "pending switch notification recorded", "target", ep, "switched_at", n.SwitchedAt, "outcome", outcome)
	if outcome == brokerstate.NotificationAlreadyActive {
		answer.Ignored = outcome
		c.JSON(http.StatusOK, answer)
		return
	}
	c.JSON(http.StatusAccepted, answer)
}

// switchedAt reads a notification's switchedAt, or returns the status and message that
// refuse it.
func (s *server) switchedAt(field *string, now time.Time) (time.Time, int, string) {
	if field == nil || *field == "" {
		return time.Time{}, http.StatusBadRequest, "switchedAt is required (an RFC 3339 time such as 2026-01-02T15:04:05Z)"
	}
	switchedAt, err := time.Parse(time.RFC3339, *field)
	if err != nil {
		return time.Time{}, http.StatusBadRequest, fmt.Sprintf("switchedAt %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", *field)
	}
	// The mark of notifications taken only rises: one dated far ahead would make every
	// real notification stale until then.
	if err := brokerstate.CheckSwitchedAt(switchedAt, now, s.deps.Settings.NotificationMaxClockSkew); err != nil {
		return time.Time{}, http.StatusUnprocessableEntity, err.Error()
	}
	return switchedAt, 0, ""
}

// fromHop resolves the broker a notification says the producer came from. One that is
// not configured places nothing: the notification is taken as one without from, since a
// producer may know brokers this service does not read.
func (s *server) fromHop(ctx context.Context, from *brokerName) *brokerstate.Hop {
	vhost := ""
	if from.Vhost != nil {
		vhost = *from.Vhost
	}
	ep, ok := broker.FindEndpoint(s.deps.Settings.Brokers, *from.Host, vhost)
	if !ok {
		s.log.WarnContext(ctx, "pending switch notification from a broker that is not configured: taken without from",
			"from_host", *from.Host, "from_vhost", vhost)
		return nil
	}
	return &brokerstate.Hop{Index: ep.Index, Host: ep.Host, Vhost: ep.Vhost}
}

// postSwitch moves to a broker at once, dropping any Pending Switch, and waits until
// Postgres shows it: the operator wants to know the switch happened, not that it was asked.
func (s *server) postSwitch(c *gin.Context) {
	raw := c.Param("index")
	index, err := strconv.Atoi(raw)
	if err != nil {
		s.fail(c, http.StatusBadRequest, fmt.Sprintf("broker index %q is not an integer", raw))
		return
	}
	if index < 0 || index >= len(s.deps.Settings.Brokers) {
		s.fail(c, http.StatusNotFound, fmt.Sprintf("no broker %d: %d brokers are configured (0 to %d)",
			index, len(s.deps.Settings.Brokers), len(s.deps.Settings.Brokers)-1))
		return
	}
	ctx := c.Request.Context()
	// The last switch before the order tells our commit apart from an earlier one. Clocks
	// are not compared: the worker that commits may run on another host.
	before, err := s.deps.Store.LoadAllowingRemoved(ctx)
	if err != nil {
		s.failInternal(c, http.StatusServiceUnavailable, "the broker state cannot be read; retry later", err)
		return
	}
	// The force carries when it was asked for, so that a notification recorded while the
	// workflow gets to it survives; on Postgres' clock, the one the recording is dated by.
	askedAt, err := s.deps.Store.Now(ctx)
	if err != nil {
		s.failInternal(c, http.StatusServiceUnavailable, "the broker state cannot be read; retry later", err)
		return
	}
	order := activities.ForceSwitchInput{Index: index, AskedAt: askedAt}
	if s.answerByUpdate(c, workflows.UpdateForceSwitch, order) {
		return
	}
	if err := s.signal(ctx, workflows.SignalForceSwitch, order); err != nil {
		s.failInternal(c, http.StatusBadGateway, "the switch could not be handed to the workflow engine; nothing was changed, retry", err)
		return
	}
	s.log.InfoContext(ctx, "forced switch sent to the workflow", "to", s.deps.Settings.Brokers[index])
	st, ok := s.waitForState(ctx, func(st brokerstate.State) bool {
		ls := st.LastSwitch
		return ls != nil && ls.Forced && ls.To == index && !sameSwitch(ls, before.LastSwitch)
	})
	if !ok {
		s.fail(c, http.StatusGatewayTimeout, fmt.Sprintf(
			"the switch to broker %d was sent to the workflow but is not committed yet; GET /api/v1/broker shows when it is", index))
		return
	}
	c.JSON(http.StatusOK, orderAnswer{Committed: true, stateView: newStateView(st)})
}

// deletePendingSwitch drops the Pending Switch without moving. It is idempotent: with
// nothing pending it changes nothing.
func (s *server) deletePendingSwitch(c *gin.Context) {
	ctx := c.Request.Context()
	cur, err := s.deps.Store.LoadAllowingRemoved(ctx)
	if err != nil {
		s.failInternal(c, http.StatusServiceUnavailable, "the broker state cannot be read; retry later", err)
		return
	}
	if cur.Pending == nil {
		c.JSON(http.StatusOK, orderAnswer{Committed: true, stateView: newStateView(cur)})
		return
	}
	// The cancel names the switch it cancels, so that a notification recorded before the
	// workflow gets to the cancel survives it.
	target := cur.Pending.Target()
	upTo := target.SwitchedAt
	order := activities.CancelPendingSwitchInput{SwitchedAt: upTo, Index: &target.Index}
	if s.answerByUpdate(c, workflows.UpdateCancelPendingSwitch, order) {
		return
	}
	if err := s.signal(ctx, workflows.SignalCancelPendingSwitch, order); err != nil {
		s.failInternal(c, http.StatusBadGateway, "the cancel could not be handed to the workflow engine; nothing was changed, retry", err)
		return
	}
	s.log.InfoContext(ctx, "cancel of the pending switch sent to the workflow", "switched_at", upTo)
	st, ok := s.waitForState(ctx, func(st brokerstate.State) bool {
		return st.Pending == nil || st.Pending.Next().SwitchedAt.After(upTo)
	})
	if !ok {
		// The signal is durable: the workflow applies it once it runs. Not an error.
		c.JSON(http.StatusAccepted, orderAnswer{Committed: false, stateView: newStateView(st)})
		return
	}
	if ls := st.CommittedPast(upTo, &target.Index); ls != nil && !sameSwitch(ls, cur.LastSwitch) {
		// The workflow refused the cancel: its switch was committed first.
		c.JSON(http.StatusConflict, orderAnswer{
			Reason:    "too late to cancel: the switch was committed before the cancel reached it; force a switch to go back",
			stateView: newStateView(st)})
		return
	}
	c.JSON(http.StatusOK, orderAnswer{Committed: true, stateView: newStateView(st)})
}

// answerByUpdate sends an operator's order as a Workflow Update and answers with the
// workflow's own word: committed, already there, or refused with the reason. It returns
// false, having answered nothing, when the order must go as a signal instead: the
// workflow is not running, and the signal starts it.
func (s *server) answerByUpdate(c *gin.Context, name string, arg any) bool {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.deps.CommitWait)
	defer cancel()
	var res workflows.OrderResult
	handle, err := s.deps.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflows.BrokerSwitchWorkflowID, UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = handle.Get(ctx, &res)
	}
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return false
	case err != nil && ctx.Err() != nil && c.Request.Context().Err() == nil:
		s.fail(c, http.StatusGatewayTimeout, fmt.Sprintf(
			"the order was given to the workflow but is not answered within %s; GET /api/v1/broker shows when it is applied", s.deps.CommitWait))
		return true
	case err != nil:
		s.failInternal(c, http.StatusBadGateway, "the order could not be handed to the workflow engine; retry", err)
		return true
	}
	s.log.InfoContext(ctx, "order answered by the workflow", "update", name, "outcome", res.Outcome)
	answer := orderAnswer{Committed: res.Outcome != workflows.OrderRefused, Outcome: res.Outcome, Reason: res.Reason,
		stateView: newStateView(res.State)}
	if res.Outcome == workflows.OrderRefused {
		c.JSON(http.StatusConflict, answer)
		return true
	}
	c.JSON(http.StatusOK, answer)
	return true
}

// signal hands an order to the BrokerSwitch workflow, starting it when it does not run:
// the workflow may have ended or never been started by a worker yet, and the order must
// not be lost for that.
func (s *server) signal(ctx context.Context, name string, arg any) error {
	_, err := s.deps.Temporal.SignalWithStartWorkflow(ctx, workflows.BrokerSwitchWorkflowID, name, arg,
		workflows.BrokerSwitchStartOptions(s.deps.Settings.TaskQueue), workflows.BrokerSwitch, workflows.BrokerSwitchInput{})
	if err != nil {
		return fmt.Errorf("signal %s to workflow %s: %w", name, workflows.BrokerSwitchWorkflowID, err)
	}
	return nil
}

// waitForState re-reads the state until done holds, the commit wait passes or the client
// goes away. It returns the last state read, and whether done held. A failed read is
// retried: the database may come back within the wait.
func (s *server) waitForState(ctx context.Context, done func(brokerstate.State) bool) (brokerstate.State, bool) {
	ctx, cancel := context.WithTimeout(ctx, s.deps.CommitWait)
	defer cancel()
	ticker := time.NewTicker(pollEvery)
	defer ticker.Stop()
	var last brokerstate.State
	for {
		st, err := s.deps.Store.LoadAllowingRemoved(ctx)
		switch {
		case err == nil:
			last = st
			if done(st) {
				return st, true
			}
		case ctx.Err() == nil:
			s.log.WarnContext(ctx, "broker state read failed while waiting for a commit", "error", err)
		}
		select {
		case <-ctx.Done():
			return last, false
		case <-ticker.C:
		}
	}
}

// sameSwitch reports whether a and b record the same completed switch.
func sameSwitch(a, b *brokerstate.LastSwitch) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.From == b.From && a.To == b.To && a.Forced == b.Forced && a.Checks == b.Checks &&
		a.CompletedAt.Equal(b.CompletedAt) && a.SwitchedAt.Equal(b.SwitchedAt)
}

// decodeJSON reads exactly one JSON object with known fields into v. It returns 0 when v
// was read, otherwise the status and the message to answer.
func decodeJSON(body io.Reader, v any) (int, string) {
	raw, err := io.ReadAll(body)
	if isTooLarge(err) {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxBodyBytes)
	}
	if err != nil {
		return http.StatusBadRequest, "request body could not be read"
	}
	if status, msg := decodeLoose(raw, v); status != 0 {
		return status, msg
	}
	// encoding/json matches names regardless of case and keeps the last of duplicate
	// keys, where openapi.yaml promises exact names: {"HOST": …} or a second "host" could
	// carry a value that a proxy or log in front of us read differently.
	if msg := checkKeys(raw, jsonNames(v)); msg != "" {
		return http.StatusBadRequest, msg
	}
	return 0, ""
}

// decodeLoose decodes raw with encoding/json's own rules, unknown fields refused.
func decodeLoose(raw []byte, v any) (int, string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// Anything after the object, a second value or garbage, means the body is not
		// one object.
		var extra json.RawMessage
		if err = dec.Decode(&extra); err == io.EOF {
			return 0, ""
		}
		return http.StatusBadRequest, "request body must hold exactly one JSON object"
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, "request body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, "request body is not valid JSON: it ends too early"
	case errors.As(err, &syntax):
		return http.StatusBadRequest, fmt.Sprintf("request body is not valid JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return http.StatusBadRequest, "request body must be a JSON object"
		}
		return http.StatusBadRequest, fmt.Sprintf("field %s must be a %s, not a JSON %s", typ.Field, typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for unknown fields; its text names the field.
		return http.StatusBadRequest, "request body has an " + strings.TrimPrefix(err.Error(), "json: ")
	default:
		return http.StatusBadRequest, "request body is not valid JSON"
	}
}

// checkKeys returns why the top-level keys of raw, one valid JSON value, break the
// schema: a name that is not exactly one of names, or a name given twice. A root that is
// not an object (null) has no keys to check.
func checkKeys(raw []byte, names map[string]bool) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	seen := make(map[string]bool, len(names))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "request body is not valid JSON"
		}
		key, _ := tok.(string)
		switch {
		case !names[key]:
			return fmt.Sprintf("request body has an unknown field %q: names are case-sensitive", key)
		case seen[key]:
			return fmt.Sprintf("request body has the field %q twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "request body is not valid JSON"
		}
	}
	return ""
}

// jsonNames are the JSON names of the fields of the struct v points to.
func jsonNames(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := make(map[string]bool, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}
