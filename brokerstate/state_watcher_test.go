//go:build integration

package brokerstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

// startWatcher runs a StateWatcher on a fresh database until the test ends and returns it
// with a store on the same database, once its first reading is in.
func startWatcher(t *testing.T, refresh time.Duration) (*brokerstate.StateWatcher, *brokerstate.Store, uint64) {
	t.Helper()
	ctx := context.Background()
	db, dsn := modelstest.NewDB(t) // the DSN for the watcher's LISTEN connection
	store := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerB}}
	w := &brokerstate.StateWatcher{Store: store, DSN: dsn, Refresh: refresh}
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(watchCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	first, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, gen, ok := w.Next(first, 0)
	require.True(t, ok, "no first reading")
	require.Equal(t, 0, st.ActiveIndex)
	return w, store, gen
}

func TestAWatcherHearsACommittedChangeThroughNotify(t *testing.T) {
	// The fallback is an hour away: only the NOTIFY can bring the change within the test.
	w, store, gen := startWatcher(t, time.Hour)
	// The first reading is taken once LISTEN is in place: from now on only the NOTIFY
	// can bring a change before the fallback.
	_, err := store.Update(context.Background(), func(st brokerstate.State) (brokerstate.State, error) {
		return st.Force(1, time.Time{}, time.Now()), nil
	})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, next, ok := w.Next(ctx, gen)
	require.True(t, ok, "the committed switch was not announced")
	require.Greater(t, next, gen)
	require.Equal(t, 1, st.ActiveIndex)
}

func TestAWatcherRereadsOnATimerWhatNoNotifyAnnounced(t *testing.T) {
	w, store, gen := startWatcher(t, 200*time.Millisecond)
	// A write that bypasses Update sends no NOTIFY, as a lost notification would.
	require.NoError(t, store.DB.Exec(`INSERT INTO settings (key, value, updated_at) VALUES (?, ?, now())
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, brokerstate.KeyActiveEndpoint, `{"host":"b.example.com","vhost":"prod"}`).Error)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, ok := w.Next(ctx, gen)
	require.True(t, ok, "the fallback re-read did not see the change")
	require.Equal(t, 1, st.ActiveIndex)
}

// After a cancel, the producer's return to the active broker moves neither the active
// broker nor the route, but puts the canceled broker behind it: a window reading the
// active broker must hear of it.
func TestAWatcherHearsASpareChangeItsPlace(t *testing.T) {
	w, store, gen := startWatcher(t, time.Hour)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Second)
	update := func(fn func(brokerstate.State) brokerstate.State) {
		t.Helper()
		_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return fn(st), nil })
		require.NoError(t, err)
	}
	note := func(ref brokerstate.Ref, index int, at time.Time) brokerstate.Notification {
		return brokerstate.Notification{Index: index, Host: ref.Host, Vhost: ref.Vhost, SwitchedAt: at}
	}
	update(func(st brokerstate.State) brokerstate.State {
		st, _ = st.ApplyNotification(note(brokerB, 1, at.Add(-time.Minute)), at)
		return st.CancelPending(time.Time{}, at)
	})
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, gen, ok := w.Next(wait, gen)
	require.True(t, ok)

	update(func(st brokerstate.State) brokerstate.State {
		st, _ = st.ApplyNotification(note(brokerA, 0, at), at)
		return st
	})
	st, _, ok := w.Next(wait, gen)
	require.True(t, ok, "the return to the active broker was not heard")
	behind, _ := st.Spares([]int{0, 1})
	require.Equal(t, []int{1}, behind)
}
