package ingest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/google/go-github/v75/github"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/metrics"
	"github.com/brokerswitch/brokerswitch/models"
)

// pingTimeout bounds the reachability check after a failed batch: long enough for a
// healthy server under load, short enough not to stall the consumer when it is gone.
const pingTimeout = 2 * time.Second

// Ingester applies decoded deliveries to Postgres. Its fields are read on every batch and
// must not change while handlers run.
type Ingester struct {
	// DB is the pool of connections to write through; required.
	DB *pgxpool.Pool
	// MaxRetryCycles is how many trips through the -retry queue a message that fails on
	// its own gets before it is rejected to -error; 0 rejects on the first failure.
	MaxRetryCycles int
	// Logger receives warnings about failed messages; nil uses slog.Default().
	Logger *slog.Logger
	// Now is the clock for ledger and tracking timestamps; nil uses time.Now.
	Now func() time.Time
	// Metrics counts each delivery's outcome once its transaction committed; nil counts nothing.
	Metrics *metrics.Metrics
	// MaxMessageBytes is the largest body applied; a larger message is rejected to -error
	// without being read. 0 means no limit.
	MaxMessageBytes int
	// transientAttempts is how many times a batch is applied while Postgres turns it away
	// for a transient reason (see isTransient) before HandleBatch gives up and returns the
	// error, leaving the batch unsettled; 0 means defaultTransientAttempts.
	transientAttempts int
	// MaxClockSkew is how far past Now an event's entity clock may be; a later one is
	// taken as unreadable (applied in queue order, counted and logged). The worker sets
	// NOTIFICATION_MAX_CLOCK_SKEW; 0 trusts no clock ahead of Now.
	MaxClockSkew time.Duration
	// WebhookSecret, when set, is the GitHub webhook's secret: every message must carry
	// the HMAC of its body in headerSignature, or it is malformed. Empty verifies nothing.
	WebhookSecret []byte
	// Active is checked last in the transaction of every batch from a ForActive handler
	// (brokerstate.Store): its refusal rolls the batch back and gives it back
	// unsettled, so that a consumer window whose view of the broker state lags never
	// commits a batch of a broker we left. Required for ForActive.
	Active ActiveHolder
	// transientBackoff is the pause before the second attempt, doubled before each next
	// one up to maxTransientBackoff; 0 means defaultTransientBackoff.
	transientBackoff time.Duration
}

const (
	// defaultTransientAttempts and defaultTransientBackoff ride out a deadlock, a lock
	// timeout or a full connection table for a few seconds (0.2+0.4+0.8+1.6 s) before the
	// consumer stops and Temporal's retry of the window takes over the back-off.
	defaultTransientAttempts = 5
	defaultTransientBackoff  = 200 * time.Millisecond
	// maxTransientBackoff caps one pause, whatever transientAttempts says.
	maxTransientBackoff = 5 * time.Second
	// timeoutAttempts is how many times one message alone may hit statement_timeout
	// before it is rejected to -error: once may be the server's load, twice in a row on
	// its own is the message.
	timeoutAttempts = 2
)

// ForBroker returns the BatchHandler for deliveries consumed from broker index, which is
// recorded in the ledger. Each batch's transaction ends with checks, in order, before its
// COMMIT: a refusal rolls the batch back and gives it back unsettled.
func (i *Ingester) ForBroker(index int, checks ...models.Check) broker.BatchHandler {
	return &batchHandler{ingester: i, broker: index, checks: checks}
}

// ForActive is ForBroker for a consumer window on the active broker: each batch commits
// only while index is still the active broker (Active). A Leftover Drain reads spares,
// which are never active, and uses ForBroker.
func (i *Ingester) ForActive(index int, checks ...models.Check) broker.BatchHandler {
	if i.Active == nil {
		return broker.BatchHandlerFunc(func(context.Context, string, []amqp.Delivery) ([]broker.Verdict, error) {
			return nil, errors.New("ingest: Ingester.Active is nil")
		})
	}
	// Checked after the batch's writes, just before the COMMIT, so that a batch that waits
	// on a slow Postgres does not hold a forced switch back: the switch commits, and the
	// batch finds its broker left.
	query, args := i.Active.ActiveCheck(index)
	active := models.Check{Query: query, Args: args, Refused: i.Active.NotActive}
	return &batchHandler{ingester: i, broker: index, checks: append([]models.Check{active}, checks...)}
}

// batchHandler is the BatchHandler of one broker.
type batchHandler struct {
	ingester *Ingester
	broker   int
	// checks end every batch's transaction.
	checks []models.Check
}

// ActiveHolder holds a consume batch's broker active until the batch commits
// (brokerstate.Store).
type ActiveHolder interface {
	// ActiveCheck is the statement, with $n placeholders, run last before the COMMIT; it
	// fails unless broker is still the active one.
	ActiveCheck(broker int) (query string, args []any)
	// NotActive returns the check's refusal, or nil when err is another error.
	NotActive(err error) error
}

// heldBack is a batch that Active turned away: it says nothing about the messages.
type heldBack struct{ err error }

func (e heldBack) Error() string { return e.err.Error() }
func (e heldBack) Unwrap() error { return e.err }

// message is one delivery of a batch, decoded.
type message struct {
	event       Event
	malformed   error
	retryCycles int
	// hash is the SHA-256 of the body, kept in the ledger to tell a redelivery from a
	// delivery id reused with another payload.
	hash [sha256.Size]byte
	// ahead is the entity clock refused for being in the future (distrustFuture), or zero.
	ahead time.Time
}

// HandleBatch applies deliveries in order and returns one verdict per delivery; see
// broker.BatchHandler. The whole batch is applied in one transaction. If that fails and
// Postgres is still reachable, each delivery is applied in its own transaction to find the
// ones that fail by themselves; those are retried, then rejected after MaxRetryCycles.
func (h *batchHandler) HandleBatch(ctx context.Context, queue string, deliveries []amqp.Delivery) ([]broker.Verdict, error) {
	if len(deliveries) == 0 {
		return nil, nil
	}
	if h.ingester.DB == nil {
		return nil, errors.New("ingest: Ingester.DB is nil")
	}
	now := h.now()
	decode := decodeWithin
	if secret := h.ingester.WebhookSecret; len(secret) > 0 {
		unsigned := decode
		decode = func(d amqp.Delivery, maxBody int) (Event, error) {
			ev, err := unsigned(d, maxBody)
			if err == nil {
				err = verifySignature(d, secret)
			}
			return ev, err
		}
	}
	decoding := time.Now()
	msgs := decodeAll(queue, deliveries, h.ingester.MaxMessageBytes, decode)
	limit := now.Add(h.ingester.MaxClockSkew)
	for i := range msgs {
		if msgs[i].malformed == nil {
			msgs[i].ahead = distrustFuture(msgs[i].event, limit)
		}
	}
	broker.TraceOf(ctx).Add(broker.PhaseDecode, decoding)

	verdicts, err := h.apply(ctx, queue, msgs, now)
	if err == nil {
		return verdicts, nil
	}
	if h.cannotDecide(ctx, err) {
		return nil, fmt.Errorf("ingest %d deliveries from %s: %w", len(msgs), queue, err)
	}
	if len(msgs) == 1 {
		// Already isolated: no need to apply it a second time to know it fails alone.
		v, err := h.fail(ctx, queue, msgs[0], now, err)
		if err != nil {
			return nil, err
		}
		return []broker.Verdict{v}, nil
	}
	h.logger().WarnContext(ctx, "batch transaction failed, applying its deliveries one by one",
		"queue", queue, "broker", h.broker, "deliveries", len(msgs), "error", err)
	return h.isolate(ctx, queue, msgs, now)
}

// apply is applyInTx, applied again after a pause while Postgres turns it away for a
// transient reason, so that a deadlock or a lock timeout settles nothing: the batch stays
// in hand, unacknowledged, and is applied whole and in order once the other session has
// gone. A statement timeout is retried likewise, but only for a single message: a batch
// that times out is isolated by the caller, which is how a costly message is found.
func (h *batchHandler) apply(ctx context.Context, queue string, msgs []message, now time.Time) ([]broker.Verdict, error) {
	backoff := cmp.Or(h.ingester.transientBackoff, defaultTransientBackoff)
	attempts := cmp.Or(h.ingester.transientAttempts, defaultTransientAttempts)
	timeouts := 0
	for attempt := 1; ; attempt++ {
		verdicts, err := h.applyInTx(ctx, queue, msgs, now)
		if err == nil || ctx.Err() != nil {
			return verdicts, err
		}
		switch {
		case isTransient(err) && attempt < attempts:
		case isTimeout(err) && len(msgs) == 1:
			if timeouts++; timeouts >= timeoutAttempts {
				return nil, fmt.Errorf("%w: %w", errTimedOutAlone, err)
			}
		default:
			return nil, err
		}
		h.logger().WarnContext(ctx, "batch turned away by Postgres for now, applying it again",
			"queue", queue, "broker", h.broker, "deliveries", len(msgs), "attempt", attempt, "pause", backoff.String(), "error", err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%w (after: %w)", ctx.Err(), err)
		case <-timer.C:
		}
		backoff = min(2*backoff, maxTransientBackoff)
	}
}

// errTimedOutAlone marks a message that hit statement_timeout every time it was applied
// on its own: it is too costly to apply, and holding the queue for it would help nothing.
var errTimedOutAlone = errors.New("statement timeout each time the message was applied alone")

// decodeAll decodes a batch on every core: decoding is most of a message's CPU, and one
// queue's ordered consumer would otherwise use one core while the others idle. Only the
// decoding runs in parallel; the batch is applied in order.
func decodeAll(queue string, deliveries []amqp.Delivery, maxBody int, decode func(amqp.Delivery, int) (Event, error)) []message {
	msgs := make([]message, len(deliveries))
	workers := min(runtime.GOMAXPROCS(0), len(deliveries))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(deliveries); i += workers {
				msgs[i] = decodeSafely(queue, deliveries[i], maxBody, decode)
			}
		})
	}
	wg.Wait()
	return msgs
}

// decodeSafely decodes one delivery of queue with decode, refusing a body over maxBody
// bytes. A panic inside decode (a decoder bug that a payload finds) would kill the process
// with the message at the head of its queue, to do it again at every start: it makes the
// message malformed instead, under the delivery id of its header when that one is valid.
func decodeSafely(queue string, d amqp.Delivery, maxBody int, decode func(amqp.Delivery, int) (Event, error)) (m message) {
	defer func() {
		if r := recover(); r != nil {
			ev := Event{}
			if id, err := requiredHeader(d.Headers, HeaderDelivery); err == nil && checkDeliveryID(id) == nil {
				ev.DeliveryID = id
			}
			m = message{event: ev, malformed: fmt.Errorf("%w: the decoder failed on it (panic: %v)", ErrMalformed, r), hash: sha256.Sum256(d.Body)}
		}
	}()
	ev, err := decode(d, maxBody)
	return message{event: ev, malformed: err, retryCycles: ev.retryCycles(queue), hash: sha256.Sum256(d.Body)}
}

// isolate applies each message in its own transaction, in order. Messages committed
// before Postgres becomes unreachable are in the ledger, so their redelivery is a no-op.
func (h *batchHandler) isolate(ctx context.Context, queue string, msgs []message, now time.Time) ([]broker.Verdict, error) {
	verdicts := make([]broker.Verdict, len(msgs))
	for i := range msgs {
		v, err := h.apply(ctx, queue, msgs[i:i+1], now)
		if err == nil {
			verdicts[i] = v[0]
			continue
		}
		if h.cannotDecide(ctx, err) {
			return nil, fmt.Errorf("ingest delivery %d of %d from %s: %w", i+1, len(msgs), queue, err)
		}
		if verdicts[i], err = h.fail(ctx, queue, msgs[i], now, err); err != nil {
			return nil, err
		}
	}
	return verdicts, nil
}

// applyInTx applies msgs in one transaction and returns their verdicts; an error means
// nothing was committed.
func (h *batchHandler) applyInTx(ctx context.Context, queue string, msgs []message, now time.Time) ([]broker.Verdict, error) {
	rows, owner := h.ledgerRows(queue, msgs, now)
	if len(rows) == 0 {
		// Every well-formed delivery has a ledger row, so these are all malformed without a
		// delivery id: nothing to record, and no reason to need the database to reject them.
		return h.rejectMalformed(queue, msgs), nil
	}
	b := txBatch{now: now, ledger: rows, checks: h.checks}
	for i, m := range msgs {
		if m.malformed == nil && owner[i] {
			b.events = append(b.events, m.event)
		}
	}
	var tx committed
	err := h.ingester.DB.AcquireFunc(ctx, func(conn *pgxpool.Conn) (err error) {
		tx, err = writeBatch(ctx, conn.Conn(), b)
		return err
	})
	if err != nil {
		return nil, h.refused(err)
	}
	reused := reusedIDs(msgs, owner, tx.claimed, tx.stored) // per message: why its id stands for another payload
	verdicts, outcomes := h.verdictsOf(msgs, owner, tx.claimed, reused)
	for i, m := range msgs {
		h.report(ctx, queue, m, outcomes[i], reused[i])
	}
	return verdicts, nil
}

// rejectMalformed rejects msgs, all malformed, and counts them.
func (h *batchHandler) rejectMalformed(queue string, msgs []message) []broker.Verdict {
	verdicts := make([]broker.Verdict, len(msgs))
	for i, m := range msgs {
		verdicts[i] = broker.Verdict{Outcome: broker.Reject, Reason: m.malformed.Error()}
		h.count(queue, m, metrics.OutcomeRejected)
	}
	return verdicts
}

// verdictsOf returns each message's verdict once its batch committed, and the outcome it
// counts under.
func (h *batchHandler) verdictsOf(msgs []message, owner []bool, claimed map[string]bool, reused []error) ([]broker.Verdict, []string) {
	verdicts := make([]broker.Verdict, len(msgs))
	outcomes := make([]string, len(msgs))
	for i, m := range msgs {
		switch {
		case m.malformed != nil:
			verdicts[i] = broker.Verdict{Outcome: broker.Reject, Reason: m.malformed.Error()}
			outcomes[i] = metrics.OutcomeRejected
		case reused[i] != nil:
			verdicts[i] = broker.Verdict{Outcome: broker.Reject, Reason: reused[i].Error()}
			outcomes[i] = metrics.OutcomeRejected
		case !owner[i] || !claimed[m.event.DeliveryID]:
			// Applied or ignored before, by an earlier attempt or earlier in this batch.
			verdicts[i] = broker.Verdict{Outcome: broker.Ack}
			outcomes[i] = metrics.OutcomeDuplicate
		default:
			outcomes[i] = metrics.OutcomeIgnored
			if applierOf(m.event) != nil {
				outcomes[i] = metrics.OutcomeApplied
			}
			verdicts[i] = broker.Verdict{Outcome: broker.Ack}
		}
	}
	return verdicts, outcomes
}

// report counts a committed message under its outcome and tells the operator what about
// it needs an eye: a clock that fell back or ran ahead, a delivery limit its quorum queue
// hit, a delivery id reused for another payload (reused, when not nil).
func (h *batchHandler) report(ctx context.Context, queue string, m message, outcome string, reused error) {
	h.count(queue, m, outcome)
	if outcome == metrics.OutcomeApplied {
		if c := clockOf(m.event); c.fallback != "" {
			h.ingester.Metrics.ClockFallback(c.table, c.fallback)
		}
		if !m.ahead.IsZero() {
			h.logger().WarnContext(ctx, "entity clock in the future, applied in queue order as an event without one",
				"queue", queue, "broker", h.broker, "delivery_id", m.event.DeliveryID, "event", m.event.Type,
				"clock", m.ahead.Format(time.RFC3339))
		}
	}
	if m.event.deliveryLimited() {
		h.ingester.Metrics.DeliveryLimited(queue)
		h.logger().WarnContext(ctx, "applied a delivery its quorum queue dead-lettered for its delivery limit: it came back behind later ones",
			"queue", queue, "broker", h.broker, "delivery_id", m.event.DeliveryID, "event", m.event.Type)
	}
	if reused != nil {
		h.ingester.Metrics.DeliveryIDReused(queue)
		h.logger().WarnContext(ctx, "delivery id reused with another payload, rejected",
			"queue", queue, "broker", h.broker, "delivery_id", m.event.DeliveryID, "event", m.event.Type)
	}
}

// refused is err, the failure of a batch's transaction, as a heldBack when one of its
// checks refused the batch.
func (h *batchHandler) refused(err error) error {
	for _, c := range h.checks {
		if r := c.Refused(err); r != nil {
			return heldBack{r}
		}
	}
	return err
}

// reusedIDs returns, per message, why its delivery id stands for another payload: the
// ledger's row (stored, read after the claim; rows this transaction claimed are its
// own), or the copy earlier in the batch that claims the id, has a different hash. nil
// means a redelivery of the same payload, or no way to tell (a row written before payload
// hashes were kept).
func reusedIDs(msgs []message, owner []bool, claimed map[string]bool, stored map[string][]byte) []error {
	claimant := make(map[string][sha256.Size]byte, len(msgs))
	for i, m := range msgs {
		if owner[i] {
			claimant[m.event.DeliveryID] = m.hash
		}
	}
	reused := make([]error, len(msgs))
	for i, m := range msgs {
		id := m.event.DeliveryID
		if m.malformed != nil || id == "" {
			continue
		}
		earlier, kept := stored[id]
		if claimed[id] {
			kept = false
		}
		if !kept && !owner[i] {
			c := claimant[id]
			earlier, kept = c[:], true
		}
		if kept && !bytes.Equal(earlier, m.hash[:]) {
			reused[i] = fmt.Errorf("delivery id %s was taken before with another payload (sha256 %x, this one %x): not a redelivery",
				cleanText(id), earlier, m.hash)
		}
	}
	return reused
}

// count records a delivery's outcome once it is settled in the ledger.
func (h *batchHandler) count(queue string, m message, outcome string) {
	h.ingester.Metrics.Event(queue, eventLabel(m.event.Type), outcome)
}

// knownEvents are the event types go-github knows: a bounded set, so that a producer
// sending junk headers cannot grow the metric without end.
var knownEvents = func() map[string]bool {
	known := map[string]bool{}
	for _, t := range github.MessageTypes() {
		known[t] = true
	}
	return known
}()

// eventLabel is the event label of a delivery: its type when GitHub has it, else "other".
func eventLabel(eventType string) string {
	if knownEvents[eventType] {
		return eventType
	}
	return "other"
}

// ledgerRows builds one ledger row per delivery id of msgs. owner[i] tells whether msgs[i]
// is the message its row stands for: the first well-formed one, else the first malformed
// one, so a malformed copy never hides a good delivery with the same id.
func (h *batchHandler) ledgerRows(queue string, msgs []message, now time.Time) ([]models.Delivery, []bool) {
	type slot struct{ row, msg int }
	owner := make([]bool, len(msgs))
	slots := make(map[string]slot, len(msgs))
	var rows []models.Delivery
	for i, m := range msgs {
		id := m.event.DeliveryID
		if id == "" {
			continue
		}
		s, seen := slots[id]
		switch {
		case !seen:
			slots[id] = slot{row: len(rows), msg: i}
			rows = append(rows, h.ledgerRow(queue, m, now))
			owner[i] = true
		case m.malformed == nil && msgs[s.msg].malformed != nil:
			rows[s.row] = h.ledgerRow(queue, m, now)
			owner[s.msg], owner[i] = false, true
			slots[id] = slot{row: s.row, msg: i}
		}
	}
	return rows, owner
}

// ledgerRow is the ledger row of m as this attempt would leave it.
func (h *batchHandler) ledgerRow(queue string, m message, now time.Time) models.Delivery {
	row := models.Delivery{
		DeliveryID:                 m.event.DeliveryID,
		Event:                      m.event.Type,
		Action:                     cleanText(m.event.Action),
		Queue:                      queue,
		BrokerIndex:                h.broker,
		RetryCycles:                m.retryCycles,
		HookID:                     cleanText(m.event.HookID),
		HookInstallationTargetID:   cleanText(m.event.HookTargetID),
		HookInstallationTargetType: cleanText(m.event.HookTargetType),
		ReceivedAt:                 now,
		PayloadSHA256:              m.hash[:],
	}
	switch {
	case m.malformed != nil:
		row.Outcome = models.OutcomeError
		row.ErrorReason = cleanText(m.malformed.Error())
	case applierOf(m.event) == nil:
		row.Outcome = models.OutcomeIgnored
		row.AppliedAt = &now
	default:
		row.Outcome = models.OutcomeApplied
		row.AppliedAt = &now
	}
	return row
}

// fail turns the failure of a message applied on its own into Retry, or Reject once its
// retry cycles are used up, and records it in the ledger. The returned error is set only
// when Postgres turned out to be unreachable.
func (h *batchHandler) fail(ctx context.Context, queue string, m message, now time.Time, cause error) (broker.Verdict, error) {
	verdict := broker.Verdict{Outcome: broker.Retry, Reason: cleanText(cause.Error())}
	switch {
	case m.malformed != nil:
		// Only its ledger row could have failed; retrying would not make it well-formed.
		verdict = broker.Verdict{Outcome: broker.Reject, Reason: m.malformed.Error()}
	case errors.Is(cause, errTimedOutAlone):
		verdict = broker.Verdict{Outcome: broker.Reject, RetryCycles: m.retryCycles, Reason: cleanText(fmt.Sprintf(
			"too costly to apply, not retried: %v", cause))}
	case isDataError(cause):
		verdict = broker.Verdict{Outcome: broker.Reject, RetryCycles: m.retryCycles, Reason: cleanText(fmt.Sprintf(
			"Postgres cannot store this payload, not retried: %v", cause))}
	case m.retryCycles >= h.ingester.MaxRetryCycles:
		verdict = broker.Verdict{Outcome: broker.Reject, RetryCycles: m.retryCycles, Reason: cleanText(fmt.Sprintf(
			"failed after %d retry cycles (max %d): %v", m.retryCycles, h.ingester.MaxRetryCycles, cause))}
	}
	h.logger().WarnContext(ctx, "delivery failed",
		"queue", queue, "broker", h.broker, "delivery_id", m.event.DeliveryID, "event", m.event.Type,
		"retry_cycles", m.retryCycles, "outcome", outcomeName(verdict.Outcome), "error", cause)
	outcome := metrics.OutcomeRetried
	if verdict.Outcome == broker.Reject {
		outcome = metrics.OutcomeRejected
	}

	if m.event.DeliveryID == "" {
		h.count(queue, m, outcome)
		return verdict, nil
	}
	row := h.ledgerRow(queue, m, now)
	row.Outcome, row.ErrorReason, row.AppliedAt = models.OutcomeError, cleanText(verdict.Reason), nil
	if _, err := claimLedger(ctx, h.ingester.DB, []models.Delivery{row}); err != nil {
		if h.cannotDecide(ctx, err) {
			return broker.Verdict{}, fmt.Errorf("record failure of delivery %s: %w", m.event.DeliveryID, err)
		}
		// The verdict stands without its ledger row: the broker still routes the message.
		h.logger().ErrorContext(ctx, "could not record delivery failure in the ledger",
			"queue", queue, "broker", h.broker, "delivery_id", m.event.DeliveryID, "error", err)
	}
	h.count(queue, m, outcome)
	return verdict, nil
}

// cannotDecide tells whether a failed transaction says nothing about the messages: the
// caller is stopping, the batch's broker is no longer the active one (Active),
// Postgres is unreachable or cannot take writes at all, or it kept
// turning the batch away for a transient reason (apply's attempts are used up). The
// batch must then be left unsettled so it returns to the head of the queue in order.
func (h *batchHandler) cannotDecide(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.As(err, new(heldBack)) || isConnectionError(err) || isDatabaseWide(err) || isTransient(err) {
		return true
	}
	// A statement error can hide a server that died right after; ask it directly.
	pingCtx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return h.ingester.DB.Ping(pingCtx) != nil
}

func (h *batchHandler) now() time.Time {
	now := time.Now
	if h.ingester.Now != nil {
		now = h.ingester.Now
	}
	// Postgres keeps microseconds; truncating keeps what is written equal to what is read.
	return now().Truncate(time.Microsecond)
}

func (h *batchHandler) logger() *slog.Logger {
	if h.ingester.Logger != nil {
		return h.ingester.Logger
	}
	return slog.Default()
}

func outcomeName(o broker.Outcome) string {
	switch o {
	case broker.Ack:
		return "ack"
	case broker.Retry:
		return "retry"
	case broker.Reject:
		return "reject"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}
