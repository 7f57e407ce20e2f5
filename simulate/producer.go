package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/config"
)

// DefaultQueues are the logical queues of the message contract.
var DefaultQueues = []string{"pull_requests", "issues", "pushes", "installations"}

// DefaultRetryTTL is the producer's and the consumer's default RETRY_TTL.
const DefaultRetryTTL = 10 * time.Minute

// NotifyMode says when the producer tells brokerswitch about a rotation.
type NotifyMode string

const (
	// NotifyNow posts the notification right after rotating, as the producer does.
	NotifyNow NotifyMode = "now"
	// NotifyTwice posts it twice, as a producer whose retry fired after a lost answer.
	NotifyTwice NotifyMode = "twice"
	// NotifyLate holds it until the next rotation or Flush: the messages on the new
	// broker are published before brokerswitch hears of it.
	NotifyLate NotifyMode = "late"
	// NotifyReverse holds every notification until Flush and sends them newest first.
	NotifyReverse NotifyMode = "reverse"
	// NotifyNone never posts: the caller sends Rotate's Notice itself, or nobody does.
	NotifyNone NotifyMode = "none"
)

// ParseNotifyMode reads a NotifyMode.
func ParseNotifyMode(s string) (NotifyMode, error) {
	switch m := NotifyMode(s); m {
	case NotifyNow, NotifyTwice, NotifyLate, NotifyReverse, NotifyNone:
		return m, nil
	}
	return "", fmt.Errorf("notify mode %q: want now, twice, late, reverse or none", s)
}

// Config configures a Producer.
type Config struct {
	// Brokers are the producer's brokers (broker.ParseEndpoints of the same string as
	// RABBITMQ_CONNECTION_STRINGS, in any order). Required.
	Brokers []broker.Endpoint
	// Queues are the logical queues whose topology is declared; nil means DefaultQueues.
	Queues []string
	// RetryTTL of the -retry queues, which must equal the consumer's; 0 means DefaultRetryTTL.
	RetryTTL time.Duration
	// QueueType of the queues it declares, which must equal the consumer's; "" means classic.
	QueueType broker.QueueType
	// Start is the index of the broker published to first.
	Start int
	// APIURL is brokerswitch's base URL, e.g. http://localhost:8080; "" never notifies.
	APIURL string
	// Token is the producer token (PRODUCER_TOKEN).
	Token string
	// HTTPClient posts notifications; nil means a client with a 30s timeout.
	HTTPClient *http.Client
	// RotateAfter rotates to the next broker after this many messages on the current one;
	// 0 rotates only when Rotate is called.
	RotateAfter int
	// Notify says when rotations are notified; "" means NotifyNow.
	Notify NotifyMode
	// NotifyUnknown also posts, after each rotation, a notification for an endpoint that
	// is not configured: brokerswitch must answer 404 and change nothing.
	NotifyUnknown bool
	// Log receives the log, one JSON object a line; nil keeps it in memory only.
	Log io.Writer
	// Logger tells what the producer does; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ConnectionName names the producer's connections in RabbitMQ; "" means the broker
	// package's, "brokerswitch". The benchmark names its producer apart from the service
	// whose connections it counts.
	ConnectionName string
}

// Notice is a notification the producer sends: "I now publish to host/vhost since switchedAt".
type Notice struct {
	// Target is the broker's index in the producer's list, -1 for an unknown endpoint.
	Target     int
	Host       string
	Vhost      string
	SwitchedAt time.Time
}

// NotifyResult is brokerswitch's answer to a notification.
type NotifyResult struct {
	Status  int
	Outcome string
	Body    string
}

// UnknownHost is the host of the notification for an endpoint nobody configured.
const UnknownHost = "unknown-broker.invalid"

// Producer publishes as the producer does. It is safe for concurrent use; publishes and
// rotations are serialised.
type Producer struct {
	cfg  Config
	pool *broker.Pool
	log  *slog.Logger
	http *http.Client

	mu        sync.Mutex
	active    int
	sentHere  int
	seq       int64
	declared  map[int]bool
	chans     map[int]*amqp.Channel
	records   []Record
	rotations []RotateRecord
	notified  []NotifyRecord
	held      []Notice
	enc       *json.Encoder
	logErr    error
}

// New returns a producer; nothing is dialed yet.
func New(cfg Config) (*Producer, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("simulate: no broker configured")
	}
	if cfg.Start < 0 || cfg.Start >= len(cfg.Brokers) {
		return nil, fmt.Errorf("simulate: start broker %d is not configured (%d brokers)", cfg.Start, len(cfg.Brokers))
	}
	if cfg.Queues == nil {
		cfg.Queues = DefaultQueues
	}
	if cfg.RetryTTL == 0 {
		cfg.RetryTTL = DefaultRetryTTL
	}
	if cfg.Notify == "" {
		cfg.Notify = NotifyNow
	}
	if _, err := ParseNotifyMode(string(cfg.Notify)); err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	pool := broker.NewPool(cfg.Brokers, cfg.Logger, broker.PoolSettings{
		ConnectionName: cfg.ConnectionName,
		// The service's heartbeat: a producer on a broker that stops answering notices as soon.
		Heartbeat: config.DefaultAMQPHeartbeat,
	})
	p := &Producer{
		cfg:      cfg,
		pool:     pool,
		log:      cfg.Logger,
		http:     hc,
		active:   cfg.Start,
		declared: map[int]bool{},
		chans:    map[int]*amqp.Channel{},
	}
	if cfg.Log != nil {
		p.enc = json.NewEncoder(cfg.Log)
	}
	return p, nil
}

// Close closes the broker connections.
func (p *Producer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, ch := range p.chans {
		_ = ch.Close()
		delete(p.chans, i)
	}
	return p.pool.Close()
}

// Active is the index of the broker the producer publishes to.
func (p *Producer) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active
}

// Records returns a copy of the publish records so far, in publish order.
func (p *Producer) Records() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Record(nil), p.records...)
}

// Log returns a copy of everything logged so far.
func (p *Producer) Log() Log {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Log{
		Published:     append([]Record(nil), p.records...),
		Rotations:     append([]RotateRecord(nil), p.rotations...),
		Notifications: append([]NotifyRecord(nil), p.notified...),
	}
}

// confirmWindow bounds the publishes awaiting their confirm.
const confirmWindow = 256

// Publish publishes msgs in order to the active broker, rotating to the next broker
// whenever RotateAfter messages went to the current one. It returns once the broker
// confirmed every message; a message is logged only once confirmed.
func (p *Producer) Publish(ctx context.Context, msgs ...Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(msgs) > 0 {
		n := len(msgs)
		if p.cfg.RotateAfter > 0 {
			if p.sentHere >= p.cfg.RotateAfter {
				if _, err := p.rotateLocked(ctx, (p.active+1)%len(p.cfg.Brokers)); err != nil {
					return err
				}
			}
			n = min(n, p.cfg.RotateAfter-p.sentHere)
		}
		if err := p.publishLocked(ctx, p.active, msgs[:n]); err != nil {
			return err
		}
		p.sentHere += n
		msgs = msgs[n:]
	}
	return nil
}

// PublishTo publishes msgs in order to broker index, whichever is active. Tests use it to
// leave a message where a consumer would have.
func (p *Producer) PublishTo(ctx context.Context, index int, msgs ...Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if index < 0 || index >= len(p.cfg.Brokers) {
		return fmt.Errorf("simulate: broker %d is not configured", index)
	}
	return p.publishLocked(ctx, index, msgs)
}

func (p *Producer) publishLocked(ctx context.Context, index int, msgs []Message) error {
	for start := 0; start < len(msgs); start += confirmWindow {
		if err := p.publishWindow(ctx, index, msgs[start:min(start+confirmWindow, len(msgs))]); err != nil {
			return err
		}
	}
	return nil
}

// publishWindow publishes msgs with deferred confirms and logs the confirmed ones.
func (p *Producer) publishWindow(ctx context.Context, index int, msgs []Message) error {
	ch, err := p.channel(ctx, index)
	if err != nil {
		return err
	}
	ep := p.cfg.Brokers[index]
	confs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	seqs := make([]int64, 0, len(msgs))
	var pubErr error
	for _, m := range msgs {
		p.seq++
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", m.Target(), false, false, amqp.Publishing{
			Headers:      m.Headers(),
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    m.DeliveryID,
			Timestamp:    p.cfg.Now(),
			Body:         m.Body,
		})
		if err != nil {
			pubErr = fmt.Errorf("simulate: publish to %s on %s: %w", m.Target(), ep, err)
			break
		}
		confs = append(confs, conf)
		seqs = append(seqs, p.seq)
	}
	for i, conf := range confs {
		ok, err := conf.WaitContext(ctx)
		if err != nil || !ok {
			p.dropChannel(index)
			if err == nil {
				err = errors.New("nacked by the broker")
			}
			return fmt.Errorf("simulate: %d of %d messages unconfirmed on %s: %w", len(confs)-i, len(msgs), ep, err)
		}
		m := msgs[i]
		p.record(Record{
			Kind: KindPublish, Seq: seqs[i], Queue: m.Queue, Broker: index, Event: m.Event, Action: m.Action,
			Delivery: m.DeliveryID, Entity: m.Entity, Clock: m.Clock, State: m.State, Poison: m.Poison != "", PoisonKind: m.Poison,
			RoutingKey: routingKey(m), At: p.cfg.Now().UTC(),
		})
	}
	if pubErr != nil {
		p.dropChannel(index)
	}
	return pubErr
}

func routingKey(m Message) string {
	if m.RoutingKey == m.Queue {
		return ""
	}
	return m.RoutingKey
}

// channel returns the confirm-mode channel of broker index, declaring the topology on
// first use as the producer does.
func (p *Producer) channel(ctx context.Context, index int) (*amqp.Channel, error) {
	if ch := p.chans[index]; ch != nil && !ch.IsClosed() {
		return ch, nil
	}
	if !p.declared[index] {
		t := broker.Topology{Queues: p.cfg.Queues, RetryTTL: p.cfg.RetryTTL, Type: p.cfg.QueueType}
		if err := p.pool.DeclareTopology(ctx, index, t); err != nil {
			return nil, fmt.Errorf("simulate: %w", err)
		}
		p.declared[index] = true
	}
	ch, err := p.pool.Channel(ctx, index)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("simulate: confirm mode on %s: %w", p.cfg.Brokers[index], err)
	}
	p.chans[index] = ch
	return ch, nil
}

func (p *Producer) dropChannel(index int) {
	if ch := p.chans[index]; ch != nil {
		_ = ch.Close()
		delete(p.chans, index)
	}
}

// Rotate moves the producer to broker to and handles the notification as Config.Notify
// says. The returned Notice is the notification of this rotation, for callers that send
// it themselves (NotifyNone) or again.
func (p *Producer) Rotate(ctx context.Context, to int) (Notice, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rotateLocked(ctx, to)
}

func (p *Producer) rotateLocked(ctx context.Context, to int) (Notice, error) {
	if to < 0 || to >= len(p.cfg.Brokers) {
		return Notice{}, fmt.Errorf("simulate: broker %d is not configured", to)
	}
	// The new broker must take messages before anyone is told to read it.
	if _, err := p.channel(ctx, to); err != nil {
		return Notice{}, err
	}
	from := p.active
	p.active, p.sentHere = to, 0
	n := p.NoticeFor(to, p.cfg.Now())
	rec := RotateRecord{Kind: KindRotate, AfterSeq: p.seq, From: from, To: to, SwitchedAt: n.SwitchedAt}
	p.rotations = append(p.rotations, rec)
	p.write(rec)
	p.log.InfoContext(ctx, "rotated", "from", p.cfg.Brokers[from], "to", p.cfg.Brokers[to])

	var send []Notice
	switch p.cfg.Notify {
	case NotifyNow:
		send = []Notice{n}
	case NotifyTwice:
		send = []Notice{n, n}
	case NotifyLate:
		send, p.held = p.held, []Notice{n}
	case NotifyReverse:
		p.held = append(p.held, n)
	}
	if p.cfg.NotifyUnknown {
		send = append(send, p.UnknownNotice(n.SwitchedAt))
	}
	return n, p.sendAll(ctx, send)
}

// Flush sends the notifications that NotifyLate and NotifyReverse hold back.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	held := p.held
	p.held = nil
	if p.cfg.Notify == NotifyReverse {
		for i, j := 0, len(held)-1; i < j; i, j = i+1, j-1 {
			held[i], held[j] = held[j], held[i]
		}
	}
	return p.sendAll(ctx, held)
}

func (p *Producer) sendAll(ctx context.Context, notices []Notice) error {
	var errs []error
	for _, n := range notices {
		if _, err := p.notifyLocked(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// NoticeFor is the notification that the producer publishes to broker index since at.
func (p *Producer) NoticeFor(index int, at time.Time) Notice {
	ep := p.cfg.Brokers[index]
	return Notice{Target: index, Host: ep.Host, Vhost: ep.Vhost, SwitchedAt: at.UTC()}
}

// UnknownNotice is a notification for an endpoint that is not configured anywhere.
func (p *Producer) UnknownNotice(at time.Time) Notice {
	return Notice{Target: -1, Host: UnknownHost, Vhost: "nowhere", SwitchedAt: at.UTC()}
}

// Notify posts one notification to brokerswitch, as the producer does. The error is set
// when the request failed, and when brokerswitch refused a notice for a configured broker
// (anything but 200 and 202); a notice for an unknown endpoint expects 404.
func (p *Producer) Notify(ctx context.Context, n Notice) (NotifyResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notifyLocked(ctx, n)
}

func (p *Producer) notifyLocked(ctx context.Context, n Notice) (NotifyResult, error) {
	res, err := p.post(ctx, n)
	rec := NotifyRecord{Kind: KindNotify, Target: n.Target, Host: n.Host, Vhost: n.Vhost, SwitchedAt: n.SwitchedAt,
		Status: res.Status, Outcome: res.Outcome, At: p.cfg.Now().UTC()}
	if err == nil {
		want := map[int]bool{http.StatusOK: true, http.StatusAccepted: true}
		if n.Target < 0 {
			want = map[int]bool{http.StatusNotFound: true}
		}
		if !want[res.Status] {
			err = fmt.Errorf("simulate: notification for %s/%s answered %d: %s", n.Host, n.Vhost, res.Status, strings.TrimSpace(res.Body))
		}
	}
	if err != nil {
		rec.Error = err.Error()
	}
	p.notified = append(p.notified, rec)
	p.write(rec)
	p.log.InfoContext(ctx, "notified", "host", n.Host, "vhost", n.Vhost, "switched_at", n.SwitchedAt, "status", res.Status, "outcome", res.Outcome)
	return res, err
}

func (p *Producer) post(ctx context.Context, n Notice) (NotifyResult, error) {
	if p.cfg.APIURL == "" {
		return NotifyResult{}, errors.New("simulate: no API URL to notify")
	}
	body, err := json.Marshal(map[string]string{
		"host": n.Host, "vhost": n.Vhost, "switchedAt": n.SwitchedAt.UTC().Format(time.RFC3339Nano),
	})
	if err != nil {
		return NotifyResult{}, err
	}
	url := strings.TrimRight(p.cfg.APIURL, "/") + "/api/v1/broker/pending-switch"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return NotifyResult{}, fmt.Errorf("simulate: notification request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	resp, err := p.http.Do(req)
	if err != nil {
		// The error quotes the URL, never the token, which travels in a header.
		return NotifyResult{}, fmt.Errorf("simulate: notify: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	res := NotifyResult{Status: resp.StatusCode, Body: string(b)}
	var answer struct {
		Outcome string `json:"outcome"`
	}
	if json.Unmarshal(b, &answer) == nil {
		res.Outcome = answer.Outcome
	}
	return res, nil
}

func (p *Producer) record(r Record) {
	p.records = append(p.records, r)
	p.write(r)
}

// write appends one line to the log; the first failure is kept and logged once.
func (p *Producer) write(v any) {
	if p.enc == nil || p.logErr != nil {
		return
	}
	if err := p.enc.Encode(v); err != nil {
		p.logErr = err
		p.log.Error("simulate log not written", "error", err)
	}
}

// LogErr is the first failure to write the log, if any.
func (p *Producer) LogErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logErr
}
