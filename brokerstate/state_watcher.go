package brokerstate

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// StateChannel is the Postgres notification channel on which every committed change of
// the broker state is announced (Store.Update sends it in its transaction).
const StateChannel = "brokerswitch_state"

// defaultRefresh is how often a StateWatcher re-reads the state although no notification
// came: a lost LISTEN connection, or a pooler that does not pass LISTEN on, then delays a
// window's end by this much at most.
const defaultRefresh = 10 * time.Second

// StateWatcher keeps one process's view of the broker state fresh without a Temporal
// round trip: it LISTENs on StateChannel over one connection of its own and re-reads the
// state when a change is announced, and every Refresh in any case. Windows ask it whether
// the broker they read is still active; an idle BrokerSwitch workflow asks it whether a
// Pending Switch appeared.
type StateWatcher struct {
	// Store reads the state.
	Store *Store
	// DSN opens the LISTEN connection (DATABASE_URL).
	DSN string
	// Refresh is the fallback re-read interval; 0 means defaultRefresh.
	Refresh time.Duration
	Logger  *slog.Logger

	mu      sync.Mutex
	state   State
	gen     uint64        // 0 until the first reading, then one more per change
	changed chan struct{} // closed, then replaced, when gen grows
}

// Run watches until ctx ends; it never fails: without Postgres it keeps trying, and the
// windows keep the view they have.
func (w *StateWatcher) Run(ctx context.Context) {
	refresh := w.Refresh
	if refresh <= 0 {
		refresh = defaultRefresh
	}
	announced := make(chan struct{}, 1)
	go w.listen(ctx, announced, refresh)
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-announced:
		case <-tick.C:
		}
		w.reload(ctx)
	}
}

// listen holds the LISTEN connection and reports each notification on announced; it
// redials after a loss. It also announces once LISTEN is in place, or has failed, so that
// the first reading is taken then and Run re-reads what changed while nobody listened.
func (w *StateWatcher) listen(ctx context.Context, announced chan<- struct{}, retry time.Duration) {
	for ctx.Err() == nil {
		err := w.listenOnce(ctx, announced)
		if ctx.Err() != nil {
			return
		}
		announce(announced)
		w.logger().WarnContext(ctx, "broker state LISTEN connection lost; re-reading on a timer until it is back",
			"error", err, "retry_in", retry.String())
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

func (w *StateWatcher) listenOnce(ctx context.Context, announced chan<- struct{}) error {
	conn, err := pgx.Connect(ctx, w.DSN)
	if err != nil {
		return fmt.Errorf("connect: %w", err) // pgconn redacts the password
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+StateChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	for {
		announce(announced)
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

func announce(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default: // a re-read is due already
	}
}

// reload reads the state and wakes the waiters when it changed: the active broker, the
// Pending Switch or the spares' order (OrderChanged). A failed read keeps the
// last view: Postgres being away ends no window.
func (w *StateWatcher) reload(ctx context.Context) {
	st, err := w.Store.Load(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.logger().WarnContext(ctx, "broker state not re-read", "error", err)
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen > 0 && reflect.DeepEqual(st.Pending, w.state.Pending) && !OrderChanged(w.state, st, w.Store.indexes()) {
		return
	}
	w.state = st
	w.gen++
	if w.changed != nil {
		close(w.changed)
	}
	w.changed = make(chan struct{})
}

// Next blocks until the watcher holds a reading newer than generation after (0 takes any
// reading) and returns it with its generation; ok is false when ctx ended first. A reading
// is a view that can lag the database by a notification's delivery, so a caller acting on
// it confirms with a read of its own.
func (w *StateWatcher) Next(ctx context.Context, after uint64) (st State, gen uint64, ok bool) {
	if w == nil { // a nil watcher watches nothing: its callers wait for their own end
		<-ctx.Done()
		return st, gen, false
	}
	for {
		w.mu.Lock()
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		st, gen, changed := w.state, w.gen, w.changed
		w.mu.Unlock()
		if gen > after {
			return st, gen, true
		}
		select {
		case <-ctx.Done():
			return st, gen, false
		case <-changed:
		}
	}
}

func (w *StateWatcher) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}
