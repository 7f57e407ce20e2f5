package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker/quarantine"
	"github.com/brokerswitch/brokerswitch/broker/rawamqp"
	"github.com/brokerswitch/brokerswitch/metrics"
)

const (
	// dialTimeout bounds TCP connect, TLS and AMQP handshake together.
	dialTimeout = 15 * time.Second
	// brokerHeartbeat is the heartbeat timeout RabbitMQ offers unless configured otherwise
	// (heartbeat in rabbitmq.conf); the lower of both offers holds, and the broker's alone
	// when the client offers none.
	brokerHeartbeat = 60 * time.Second
	// closeTimeout bounds Pool.Close on a broker that no longer answers.
	closeTimeout = 5 * time.Second
	// connectionName shows up in the RabbitMQ management UI, unless PoolSettings.ConnectionName says otherwise.
	connectionName = "brokerswitch"
)

// ErrUnreachable wraps a failure to connect to a broker, so that callers can tell a broker
// that is down (a warning for a spare, a wait for the active one) from other failures.
var ErrUnreachable = errors.New("broker unreachable")

// ErrPoolClosed is returned by Pool methods called after Close.
var ErrPoolClosed = errors.New("broker pool closed")

// Pool holds one AMQP connection per broker, dialed on first use and redialed when the
// broker has closed it, and one more per queue that Consume reads on that broker: a
// message whose headers the client library refuses makes it close the whole connection,
// which then cuts that queue's consumer alone. Channels are opened per use and closed by
// their user. A Pool is safe for concurrent use.
//
// We redial by hand instead of using amqp091-go's experimental Config.Recovery:
// recovery would silently reopen channels and consumers underneath a consumer
// whose delivery tags are then no longer valid. We want a consume window to END
// on connection loss, so that unacknowledged messages go back to the head of
// the queue and the caller starts over; that keeps the order.
type Pool struct {
	settings  PoolSettings
	logger    *slog.Logger
	mark      quarantine.Mark
	endpoints []Endpoint
	brokers   map[int]*brokerConn
}

// PoolSettings are a Pool's limits and hooks, fixed when NewPool makes it.
type PoolSettings struct {
	// Metrics counts reconnects, dial failures, lost connections and messages routed to
	// -retry and -error; nil counts nothing.
	Metrics *metrics.Metrics
	// MaxBatchBytes bounds the bodies of one batch that Consume and Drain hand to a
	// handler, as Prefetch bounds their count; 0 means no bound. A message larger than it
	// is handed alone.
	MaxBatchBytes int
	// FrameSize is the largest AMQP frame the pool offers to negotiate; 0 means the
	// library's default, 128 KiB, which is also RabbitMQ's. Tests lower it to meet the
	// limit of a copy's headers.
	FrameSize int
	// ConnectionName names the pool's connections in RabbitMQ (rabbitmqctl, the management
	// UI); "" means "brokerswitch". A producer built on a Pool names itself apart from the
	// service.
	ConnectionName string
	// Heartbeat is the AMQP heartbeat timeout the pool offers (AMQP_HEARTBEAT); 0 offers
	// none, and the broker's own (60 s unless configured) holds. It bounds how long a
	// broker keeps the consumer, and the unacked batch, of a worker whose host vanished
	// without closing its connections, or that is paused: RabbitMQ drops a connection
	// that stays silent for about three times this.
	Heartbeat time.Duration
	// Trace, when set, receives where each batch that Consume settled spent its time
	// (the benchmark's breakdown); called on the consumer's goroutine, it must be quick.
	Trace func(*BatchTrace)
	// MaxMessageBytes is the largest body a consumer holds (MAX_MESSAGE_BYTES); 0 means no
	// bound. A delivery whose body is larger reaches no handler: its body is read past
	// unheld and the message is moved to {q}-error by a client that streams it (see
	// quarantine).
	MaxMessageBytes int
}

// brokerConn is the connection of one broker.
type brokerConn struct {
	ep Endpoint
	// lock is a mutex that a waiting caller can abandon when its ctx ends;
	// concurrent callers share one dial by waiting on it.
	lock   chan struct{}
	conn   *amqp.Connection // guarded by lock
	closed bool             // guarded by lock
	// connected tells whether a dial ever succeeded, so that the next one is a reconnect.
	connected bool // guarded by lock
	// heartbeat is the heartbeat timeout the broker's last connection negotiated, its
	// consumers' included; nil before the first.
	heartbeat atomic.Pointer[time.Duration]

	// declared maps each topology declared on this broker to the connection it was
	// declared on, so that it is declared once per connection, not at every window start.
	declaredMu sync.Mutex
	declared   map[string]*amqp.Connection // guarded by declaredMu

	// queue names the queue whose consumers this connection serves; "" for the shared one.
	queue string
	// consumers are the connections of each queue's consumers, by queue.
	consumersMu sync.Mutex
	consumers   map[string]*brokerConn // guarded by consumersMu
	// consumersClosed is set by Pool.Close: no more consumer connections.
	consumersClosed bool // guarded by consumersMu
}

// NewPool returns a pool for endpoints with settings; nothing is dialed yet. Brokers
// are addressed by Endpoint.Index. A nil logger discards logs.
func NewPool(endpoints []Endpoint, logger *slog.Logger, settings PoolSettings) *Pool {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{
		settings:  settings,
		logger:    logger,
		endpoints: append([]Endpoint(nil), endpoints...),
		brokers:   make(map[int]*brokerConn, len(endpoints)),
		mark:      quarantine.NewMark(),
	}
	for _, ep := range endpoints {
		p.brokers[ep.Index] = &brokerConn{ep: ep, lock: make(chan struct{}, 1)}
	}
	return p
}

// Endpoints returns a copy of the pool's endpoints.
func (p *Pool) Endpoints() []Endpoint {
	return append([]Endpoint(nil), p.endpoints...)
}

// NegotiatedHeartbeat is the AMQP heartbeat timeout of broker index's connections, as
// the last one negotiated it, or before the first what the pool offers (the URL's
// heartbeat parameter over Heartbeat) against RabbitMQ's default: a broker drops a
// connection of ours that stays silent about three times this long, and with it the
// exclusive consumer and the unacknowledged batch of a worker paused or cut off. Zero
// means none: heartbeats are off.
func (p *Pool) NegotiatedHeartbeat(index int) time.Duration {
	b, ok := p.brokers[index]
	if !ok {
		return 0
	}
	if hb := b.heartbeat.Load(); hb != nil {
		return *hb
	}
	offered := p.settings.Heartbeat
	if u, err := neturl.Parse(b.ep.URL); err == nil && u.Query().Has("heartbeat") {
		// As amqp091-go reads it: whole seconds, over the Config's.
		secs, err := strconv.ParseUint(u.Query().Get("heartbeat"), 10, 16)
		if err != nil {
			return offered // the dial refuses it
		}
		offered = time.Duration(secs) * time.Second
	}
	// As amqp091-go negotiates it: whole seconds, the lower offer, and an offer of none
	// (under a second) takes the other.
	if offered < time.Second {
		return brokerHeartbeat
	}
	return min(offered.Truncate(time.Second), brokerHeartbeat)
}

// Channel opens a new channel on broker index, dialing first when there is no
// open connection. The caller closes the channel.
func (p *Pool) Channel(ctx context.Context, index int) (*amqp.Channel, error) {
	ch, _, err := p.channel(ctx, index)
	return ch, err
}

// channel is Channel, with the frame_max its connection negotiated.
func (p *Pool) channel(ctx context.Context, index int) (*amqp.Channel, int, error) {
	b, err := p.broker(index)
	if err != nil {
		return nil, 0, err
	}
	return p.channelOn(ctx, b)
}

// consumerChannel is channel on the connection of queue's consumers on broker index.
func (p *Pool) consumerChannel(ctx context.Context, index int, queue string) (*amqp.Channel, int, error) {
	b, err := p.broker(index)
	if err != nil {
		return nil, 0, err
	}
	b.consumersMu.Lock()
	if b.consumersClosed {
		b.consumersMu.Unlock()
		return nil, 0, fmt.Errorf("connect to %s: %w", b.ep, ErrPoolClosed)
	}
	qb, ok := b.consumers[queue]
	if !ok {
		qb = &brokerConn{ep: b.ep, lock: make(chan struct{}, 1), queue: queue}
		if b.consumers == nil {
			b.consumers = map[string]*brokerConn{}
		}
		b.consumers[queue] = qb
	}
	b.consumersMu.Unlock()
	return p.channelOn(ctx, qb)
}

func (p *Pool) channelOn(ctx context.Context, b *brokerConn) (*amqp.Channel, int, error) {
	for attempt := 0; ; attempt++ {
		conn, err := p.connection(ctx, b)
		if err != nil {
			return nil, 0, err
		}
		ch, err := conn.Channel()
		if err == nil {
			return ch, conn.Config.FrameSize, nil
		}
		// The broker may have dropped the connection since it was last used
		// (a restart, say): dial once more before giving up.
		if !conn.IsClosed() || attempt > 0 {
			return nil, 0, fmt.Errorf("open channel on %s: %w", b.ep, err)
		}
	}
}

// Close closes all connections. Channels opened from them end too.
func (p *Pool) Close() error {
	var errs []error
	var conns []*brokerConn
	for _, ep := range p.endpoints {
		b := p.brokers[ep.Index]
		conns = append(conns, b)
		b.consumersMu.Lock()
		b.consumersClosed = true
		for _, qb := range b.consumers {
			conns = append(conns, qb)
		}
		b.consumersMu.Unlock()
	}
	for _, b := range conns {
		ep := b.ep
		b.lock <- struct{}{}
		conn := b.conn
		b.conn, b.closed = nil, true
		<-b.lock
		if conn != nil && !conn.IsClosed() {
			if err := conn.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
				errs = append(errs, fmt.Errorf("close connection to %s: %w", ep, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (p *Pool) broker(index int) (*brokerConn, error) {
	b, ok := p.brokers[index]
	if !ok {
		return nil, fmt.Errorf("broker #%d is not configured", index)
	}
	return b, nil
}

func (p *Pool) endpoint(index int) (Endpoint, error) {
	b, err := p.broker(index)
	if err != nil {
		return Endpoint{}, err
	}
	return b.ep, nil
}

// connection returns the open connection of b, dialing when there is none.
func (p *Pool) connection(ctx context.Context, b *brokerConn) (*amqp.Connection, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", b.ep, err)
	}
	select {
	case b.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("connect to %s: %w", b.ep, ctx.Err())
	}
	defer func() { <-b.lock }()

	if b.closed {
		return nil, fmt.Errorf("connect to %s: %w", b.ep, ErrPoolClosed)
	}
	if b.conn != nil && !b.conn.IsClosed() {
		return b.conn, nil
	}
	var guard func(net.Conn) net.Conn
	if b.queue != "" && p.settings.MaxMessageBytes > 0 {
		guard = p.quarantine().Guard
	}
	conn, err := dial(ctx, b.ep, p.settings.FrameSize, p.settings.Heartbeat, cmp.Or(p.settings.ConnectionName, connectionName), guard)
	if err != nil {
		p.settings.Metrics.DialFailed(b.ep.Index)
		// dial never puts the URL in its errors; the endpoint logs without credentials.
		p.logger.WarnContext(ctx, "broker dial failed", "broker", b.ep, "error", err)
		return nil, fmt.Errorf("connect to %s: %w: %w", b.ep, ErrUnreachable, err)
	}
	if b.connected {
		p.settings.Metrics.Reconnected(b.ep.Index)
	}
	negotiated := conn.Config.Heartbeat
	p.brokers[b.ep.Index].heartbeat.Store(&negotiated)
	b.conn, b.connected = conn, true
	logger := p.logger
	if b.queue != "" {
		logger = logger.With("consumers_of", b.queue)
	}
	logger.InfoContext(ctx, "broker connected", "broker", b.ep)
	watch(logger, p.settings.Metrics, b.ep, conn)
	return conn, nil
}

// watch logs why the connection ended, and when the broker blocks it (a memory or
// disk alarm: connection.blocked) or unblocks it, setting brokerswitch_amqp_blocked. The
// library closes the notify channels on any shutdown, so the goroutines always end; the
// buffers keep the library from blocking on us.
func watch(logger *slog.Logger, m *metrics.Metrics, ep Endpoint, conn *amqp.Connection) {
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		for err := range closed {
			m.ConnectionLost(ep.Index)
			logger.Warn("broker connection lost", "broker", ep, "reason", err.Error())
		}
	}()
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() {
		for b := range blocked {
			m.Blocked(ep.Index, b.Active)
			if b.Active {
				logger.Warn("broker blocked the connection", "broker", ep, "reason", b.Reason)
			} else {
				logger.Info("broker unblocked the connection", "broker", ep)
			}
		}
		m.Blocked(ep.Index, false) // a closed connection blocks nothing
	}()
}

// dial connects to ep within dialTimeout, giving up early when ctx ends; guard, when set,
// wraps the socket the library reads. Errors never include the URL.
func dial(ctx context.Context, ep Endpoint, frameSize int, heartbeat time.Duration, name string, guard func(net.Conn) net.Conn) (*amqp.Connection, error) {
	uri, err := amqp.ParseURI(ep.URL)
	secure := err == nil && uri.Scheme == "amqps"
	ctx, cancel := context.WithTimeout(ctx, connectionTimeout(uri, dialTimeout))
	defer cancel()

	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)

	s := &socket{ctx: ctx, uri: uri, secure: secure, guard: guard, stopAbort: func() bool { return true }}
	url := ep.URL
	if guard != nil && secure {
		url = plainSchemeURL(ep.URL, uri)
	}
	cfg := amqp.Config{FrameSize: frameSize, Heartbeat: heartbeat, Properties: props, Dial: s.dial}
	conn, err := amqp.DialConfig(url, cfg)
	aborted := !s.stopAbort()
	if err != nil {
		if s.raw != nil {
			s.raw.Close()
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, scrub(err, ep)
	}
	if aborted {
		// The abort hook may have fired after the handshake cleared the deadline.
		conn.Close()
		return nil, ctx.Err()
	}
	return conn, nil
}

// socket is the Dial func of one dial: it opens the socket within ctx, puts TLS beneath
// guard when the URL is amqps (secure) and guard is set, and keeps what dial needs once
// the handshake is over.
type socket struct {
	ctx    context.Context
	uri    amqp.URI
	secure bool
	guard  func(net.Conn) net.Conn
	// raw is the socket dial opened: amqp091-go leaves it open when the AMQP handshake
	// fails (no SASL mechanism in common, say) until the deadline ends it.
	raw net.Conn
	// stopAbort undoes the hook that aborts the handshake when ctx ends.
	stopAbort func() bool
}

// dial is amqp.Config's Dial.
func (s *socket) dial(network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(s.ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.raw = conn
	// amqp091-go clears the deadline once the AMQP handshake is done.
	deadline, _ := s.ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	s.stopAbort = context.AfterFunc(s.ctx, func() { _ = conn.SetDeadline(time.Now()) })
	if s.guard == nil {
		return conn, nil
	}
	if s.secure {
		// The guard reads AMQP frames, so it goes above TLS, which the library would
		// otherwise put above it: TLS is done here, as dialRaw does it.
		if conn, err = clientTLS(s.ctx, conn, s.uri); err != nil {
			return nil, err
		}
	}
	return s.guard(conn), nil
}

// rawConnTimeout bounds a dial of the client that moves messages to -error, unless the
// URL's connection_timeout says otherwise.
const rawConnTimeout = 15 * time.Second

// dialRaw connects the client that moves messages to -error (rawamqp) to ep, as
// amqp091-go would: amqps with the URL's TLS files or the system's roots, within the
// URL's connection_timeout. Errors never include the URL.
func dialRaw(ctx context.Context, ep Endpoint) (*rawamqp.Conn, error) {
	uri, err := amqp.ParseURI(ep.URL)
	if err != nil {
		return nil, errors.New("parse the broker's URL")
	}
	ctx, cancel := context.WithTimeout(ctx, connectionTimeout(uri, rawConnTimeout))
	defer cancel()
	c, err := rawamqp.Dial(ctx, uri, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)))
		if err != nil || uri.Scheme != "amqps" {
			return conn, err
		}
		return clientTLS(ctx, conn, uri)
	})
	if err != nil {
		return nil, scrub(err, ep)
	}
	return c, nil
}

// quarantine is where the pool's consumers move what they cannot take (see quarantine).
func (p *Pool) quarantine() quarantine.Quarantine {
	return quarantine.Quarantine{Limit: p.settings.MaxMessageBytes, Mark: p.mark, Metrics: p.settings.Metrics, Logger: p.logger}
}

// quarantined is the target of quarantine's Move for the consumers of queue on ep, whose
// connections negotiated frameMax and whose consumer took prefetch deliveries ahead;
// closed, when not nil, tells why the consumer's channel closed.
func quarantined(ep Endpoint, queue string, frameMax, prefetch int, closed <-chan *amqp.Error) quarantine.Target {
	return quarantine.Target{
		Queue: queue, ErrorQueue: ErrorQueue(queue), Broker: ep, FrameMax: frameMax, Prefetch: prefetch, Closed: closed,
		Dial: func(ctx context.Context) (*rawamqp.Conn, error) { return dialRaw(ctx, ep) },
	}
}

// plainSchemeURL is raw, an amqps URL that parsed as uri, with the amqp scheme and the
// amqps port written out: the URL amqp091-go dials when the Dial func does the TLS
// beneath a guard. Every query parameter stays (auth_mechanism, heartbeat,
// connection_timeout, channel_max and the TLS files), which URI.String would drop.
func plainSchemeURL(raw string, uri amqp.URI) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return raw
	}
	u.Scheme = "amqp"
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(uri.Port))
	return u.String()
}

// connectionTimeout is the URL's connection_timeout, as amqp091-go reads it, or def.
func connectionTimeout(uri amqp.URI, def time.Duration) time.Duration {
	if uri.ConnectionTimeout > 0 {
		return time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	return def
}

// scrub is a safety net: should an error text ever quote the URL or password,
// it is replaced by a redacted copy.
func scrub(err error, ep Endpoint) error {
	msg := err.Error()
	if red := redact(msg, ep.URL); red != msg {
		return errors.New(red)
	}
	return err
}

// amqpCode returns the AMQP reply code carried by err, or 0.
func amqpCode(err error) int {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// isCode reports whether err is an AMQP error with reply code code.
func isCode(err error, code int) bool {
	return amqpCode(err) == code
}
