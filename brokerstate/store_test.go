//go:build integration

package brokerstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
)

var (
	brokerA = brokerstate.Ref{Host: "a.example.com", Vhost: "/"}
	brokerB = brokerstate.Ref{Host: "b.example.com", Vhost: "prod"}
	brokerC = brokerstate.Ref{Host: "c.example.com", Vhost: "prod"}
)

// openMigrated opens a fresh database with every migration applied.
func openMigrated(t *testing.T) *gorm.DB {
	t.Helper()
	db, _ := modelstest.NewDB(t)
	return db
}

func TestStoredBrokersFollowTheirEndpointWhenTheListIsReordered(t *testing.T) {
	ctx := context.Background()
	db := openMigrated(t)
	store := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerB, brokerC}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
		st = st.Force(1, at, at) // active: b
		next, _ := st.ApplyNotification(brokerstate.Notification{Index: 2, Host: brokerC.Host, Vhost: brokerC.Vhost, SwitchedAt: at}, at)
		return next, nil
	})
	require.NoError(t, err)

	reordered := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerC, brokerB, brokerA}}
	st, err := reordered.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.ActiveIndex, "b is still active")
	reordered.Brokers = []brokerstate.Ref{brokerB, brokerC, brokerA}
	st, err = reordered.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, st.ActiveIndex, "b moved to position 0 and is still the active broker")
	require.Equal(t, 1, st.Pending.Target().Index, "the route's target follows c")
}

func TestARemovedBrokerCanBeRepairedByAForcedSwitch(t *testing.T) {
	ctx := context.Background()
	db := openMigrated(t)
	store := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerB}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return st.Force(1, at, at), nil })
	require.NoError(t, err)

	without := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerC}}
	_, err = without.Load(ctx)
	require.ErrorContains(t, err, "force a switch", "the active broker b is gone: reading it is an error that says what to do")
	stored, err := without.LoadAllowingRemoved(ctx)
	require.NoError(t, err, "the force path reads the state as stored")
	require.Equal(t, -1, stored.ActiveIndex)

	_, err = without.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return st.Force(0, at, at), nil })
	require.NoError(t, err)
	st, err := without.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, st.ActiveIndex)
}

func TestAPendingSwitchToARemovedBrokerReadsAsNone(t *testing.T) {
	ctx := context.Background()
	db := openMigrated(t)
	store := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerB}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
		next, _ := st.ApplyNotification(brokerstate.Notification{Index: 1, Host: brokerB.Host, Vhost: brokerB.Vhost, SwitchedAt: at}, at)
		return next, nil
	})
	require.NoError(t, err)
	st, err := (&brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerC}}).Load(ctx)
	require.NoError(t, err)
	require.Nil(t, st.Pending)
}

// The brokers notified at the mark are stored with it, so that a duplicate is told from
// a second rotation in the same second by every process.
func TestTheBrokersAtTheMarkAreStored(t *testing.T) {
	ctx := context.Background()
	store := &brokerstate.Store{DB: openMigrated(t), Brokers: []brokerstate.Ref{brokerA, brokerB, brokerC}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, n := range []brokerstate.Notification{
		{Index: 1, Host: brokerB.Host, Vhost: brokerB.Vhost, SwitchedAt: at},
		{Index: 2, Host: brokerC.Host, Vhost: brokerC.Vhost, SwitchedAt: at},
	} {
		_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
			next, outcome := st.ApplyNotification(n, at)
			require.Equal(t, brokerstate.NotificationRecorded, outcome)
			return next, nil
		})
		require.NoError(t, err)
	}
	st, err := store.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, []brokerstate.Ref{brokerB, brokerC}, st.SeenAtMark)
	_, outcome := st.ApplyNotification(brokerstate.Notification{Index: 1, Host: brokerB.Host, Vhost: brokerB.Vhost, SwitchedAt: at}, at)
	require.Equal(t, brokerstate.NotificationStale, outcome)
}

// The trail is kept in Postgres and follows its brokers when the configuration is
// reordered.
func TestTheTrailIsStored(t *testing.T) {
	db := openMigrated(t)
	refs := []brokerstate.Ref{{Host: "a.example", Vhost: "/"}, {Host: "b.example", Vhost: "/"}, {Host: "c.example", Vhost: "/"}}
	store := &brokerstate.Store{DB: db, Brokers: refs}
	ctx := context.Background()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, err := store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		next, outcome := cur.ApplyNotification(brokerstate.Notification{Index: 2, Host: "c.example", Vhost: "/", SwitchedAt: at}, at)
		require.Equal(t, brokerstate.NotificationRecorded, outcome)
		return next.CancelPending(time.Time{}, at), nil
	})
	require.NoError(t, err)
	// The same brokers, listed in another order: c.example is now index 0.
	reordered := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{refs[2], refs[0], refs[1]}}
	st, err := reordered.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.ActiveIndex)
	_, ahead := st.Spares([]int{0, 1, 2})
	require.Equal(t, []int{0}, ahead, "the producer's broker, by host and vhost")
	again, err := reordered.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
		next, _ := cur.ApplyNotification(brokerstate.Notification{Index: 0, Host: "c.example", Vhost: "/", SwitchedAt: at}, at)
		return next, nil
	})
	require.NoError(t, err)
	require.Equal(t, st.Trail, again.Trail, "the same visit again is a duplicate after a reload")
}

// The commit that moves the active broker away marks the broker it leaves, and the
// Leftover Drain's marks are kept by endpoint and read back.
func TestSpareMarksFollowTheirEndpoint(t *testing.T) {
	ctx := context.Background()
	db := openMigrated(t)
	store := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerB, brokerC}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return st.Force(1, at, at), nil })
	require.NoError(t, err)
	require.NoError(t, store.MarkSpare(ctx, 2, "issues", brokerstate.SpareMark{LastVisit: at, HeldSince: at}))

	reordered := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerC, brokerB, brokerA}}
	marks, reached, err := reordered.SpareMarks(ctx, "issues")
	require.NoError(t, err)
	require.Equal(t, map[int]brokerstate.SpareMark{2: {Reached: true}}, reached, "a was active, and is at 2 now")
	require.Equal(t, at.Truncate(time.Microsecond), marks[0].HeldSince, "c's mark, now at 0")
	require.Equal(t, at.Truncate(time.Microsecond), marks[0].LastVisit)
	other, _, err := reordered.SpareMarks(ctx, "pushes")
	require.NoError(t, err)
	require.Empty(t, other)
}

// HoldSpare writes a held-since date and nothing else: a date seen empty written since the
// caller read the mark stays, an earlier held-since date stays, a mark made under an
// earlier visit is replaced, and one made under another visit since is left alone.
func TestHoldingASpareKeepsWhatOthersMarked(t *testing.T) {
	ctx := context.Background()
	store := &brokerstate.Store{DB: openMigrated(t), Brokers: []brokerstate.Ref{brokerA, brokerB}}
	visit := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	drained, held, later := visit.Add(time.Minute), visit.Add(2*time.Minute), visit.Add(3*time.Minute)
	mark := func() brokerstate.SpareMark {
		marks, _, err := store.SpareMarks(ctx, "issues")
		require.NoError(t, err)
		return marks[1]
	}

	since, err := store.HoldSpare(ctx, 1, "issues", time.Time{}, brokerstate.SpareMark{LastVisit: visit, HeldSince: held})
	require.NoError(t, err)
	require.Equal(t, held, since, "no mark yet: this one")
	require.NoError(t, store.MarkSpare(ctx, 1, "issues", brokerstate.SpareMark{LastVisit: visit, DrainedAt: drained}))
	since, err = store.HoldSpare(ctx, 1, "issues", time.Time{}, brokerstate.SpareMark{LastVisit: visit, HeldSince: held})
	require.NoError(t, err)
	require.Equal(t, held, since)
	require.Equal(t, brokerstate.SpareMark{LastVisit: visit, DrainedAt: drained, HeldSince: held}, mark(), "seen empty, kept")
	since, err = store.HoldSpare(ctx, 1, "issues", visit, brokerstate.SpareMark{LastVisit: visit, HeldSince: later})
	require.NoError(t, err)
	require.Equal(t, held, since, "dated once")
	require.Equal(t, held, mark().HeldSince)

	next := visit.Add(time.Hour)
	since, err = store.HoldSpare(ctx, 1, "issues", visit, brokerstate.SpareMark{LastVisit: next, HeldSince: later})
	require.NoError(t, err)
	require.Equal(t, later, since)
	require.Equal(t, brokerstate.SpareMark{LastVisit: next, HeldSince: later}, mark(), "the mark of the visit read says nothing of the next")

	since, err = store.HoldSpare(ctx, 1, "issues", visit, brokerstate.SpareMark{LastVisit: visit, HeldSince: held})
	require.NoError(t, err)
	require.Zero(t, since, "read under a visit the mark has left")
	require.Equal(t, brokerstate.SpareMark{LastVisit: next, HeldSince: later}, mark(), "left alone")
}

// Update dates each new visit of the trail on Postgres' clock, once; a visit already on
// the trail keeps its date.
func TestVisitsAreDatedWhenRecorded(t *testing.T) {
	ctx := context.Background()
	store := &brokerstate.Store{DB: openMigrated(t), Brokers: []brokerstate.Ref{brokerA, brokerB, brokerC}}
	note := func(index int, ref brokerstate.Ref, at time.Time) brokerstate.State {
		st, err := store.Update(ctx, func(cur brokerstate.State) (brokerstate.State, error) {
			next, _ := cur.ApplyNotification(brokerstate.Notification{Index: index, Host: ref.Host, Vhost: ref.Vhost, SwitchedAt: at}, at)
			return next, nil
		})
		require.NoError(t, err)
		return st
	}
	before, err := store.Now(ctx)
	require.NoError(t, err)
	producer := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // a producer's clock far behind
	first := note(1, brokerB, producer).Trail.Visits[0]
	after, err := store.Now(ctx)
	require.NoError(t, err)
	require.WithinRange(t, first.SeenAt, before.Truncate(time.Microsecond), after)
	require.Empty(t, note(1, brokerB, producer).Pending.Route[0].SeenAt, "a route does not show it")

	st := note(2, brokerC, producer.Add(time.Minute))
	require.Equal(t, first.SeenAt, st.Trail.Visits[0].SeenAt, "kept")
	require.True(t, st.Trail.Visits[1].SeenAt.After(first.SeenAt))
	loaded, err := store.LoadAllowingRemoved(ctx)
	require.NoError(t, err)
	require.Equal(t, st.Trail, loaded.Trail)
}

// Leaving a broker we were active on clears what its queues' marks said: we read it since.
func TestLeavingABrokerClearsItsQueuesMarks(t *testing.T) {
	ctx := context.Background()
	store := &brokerstate.Store{DB: openMigrated(t), Brokers: []brokerstate.Ref{brokerA, brokerB}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	require.NoError(t, store.MarkSpare(ctx, 1, "issues", brokerstate.SpareMark{DrainedAt: at, HeldSince: at}))
	force := func(index int) {
		_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return st.Force(index, at, at), nil })
		require.NoError(t, err)
	}
	force(1)
	marks, _, err := store.SpareMarks(ctx, "issues")
	require.NoError(t, err)
	require.Equal(t, at, marks[1].DrainedAt, "kept while B is active")
	force(0)
	marks, reached, err := store.SpareMarks(ctx, "issues")
	require.NoError(t, err)
	require.Equal(t, brokerstate.SpareMark{}, marks[1])
	require.True(t, reached[1].Reached)
}

// A batch that passed the check holds the active broker until it commits: a switch's
// commit waits for it, and a check after the switch's commit sees the new active broker.
func TestASwitchWaitsForTheBatchesThatHoldTheActiveBroker(t *testing.T) {
	ctx := context.Background()
	db := openMigrated(t)
	store := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerB}}
	check := func(tx *gorm.DB, index int) error {
		query, args := store.ActiveCheck(index)
		err := tx.Exec(query, args...).Error
		if refused := store.NotActive(err); refused != nil {
			return refused
		}
		return err
	}
	refused := func(index int) error {
		tx := db.Begin()
		defer tx.Rollback()
		return check(tx, index)
	}
	require.ErrorIs(t, refused(1), brokerstate.ErrNotActive, "nothing stored: broker 0 is active")

	batch := db.Begin()
	require.NoError(t, batch.Error)
	defer batch.Rollback()
	require.NoError(t, check(batch, 0))

	committed := make(chan error, 1)
	go func() {
		at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) { return st.Force(1, at, at), nil })
		committed <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int64
		err := db.Raw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())").Scan(&waiting).Error
		return err == nil && waiting > 0
	}, 10*time.Second, 10*time.Millisecond, "the switch never waited for the batch")
	select {
	case err := <-committed:
		t.Fatalf("the switch committed while a batch held the active broker (err %v)", err)
	default:
	}
	require.NoError(t, batch.Commit().Error)
	select {
	case err := <-committed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the switch did not commit once the batch had")
	}

	err := refused(0)
	require.ErrorIs(t, err, brokerstate.ErrNotActive)
	require.ErrorContains(t, err, "broker 0 (host a.example.com, vhost /) is no longer the active one")
	require.NoError(t, refused(1))
	// The endpoint is what names the active broker: reordered, b is still active.
	reordered := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{{Host: "B.EXAMPLE.COM", Vhost: "prod"}, brokerA}}
	query, args := reordered.ActiveCheck(0)
	require.NoError(t, db.Exec(query, args...).Error)
	query, args = reordered.ActiveCheck(1)
	require.ErrorIs(t, reordered.NotActive(db.Exec(query, args...).Error), brokerstate.ErrNotActive)
	require.Nil(t, store.NotActive(errors.New("another error")))
}

// Under a database whose default isolation is REPEATABLE READ, an Update that waited for
// the lock still reads what the one holding it wrote: its snapshot is not taken before
// the lock.
func TestAnUpdateReadsWhatTheLockHolderWroteWhateverTheDefaultIsolation(t *testing.T) {
	ctx := context.Background()
	admin, dsn := modelstest.NewDB(t)
	require.NoError(t, admin.Exec("DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation TO ''repeatable read''', current_database()); END $$").Error)
	db, err := models.Open(ctx, dsn) // new connections take the new default
	require.NoError(t, err)
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	var level string
	require.NoError(t, db.Raw("SHOW default_transaction_isolation").Scan(&level).Error)
	require.Equal(t, "repeatable read", level)
	store := &brokerstate.Store{DB: db, Brokers: []brokerstate.Ref{brokerA, brokerB}}

	locked, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
			close(locked)
			<-release
			return st.Force(1, time.Time{}, time.Now()), nil
		})
		first <- err
	}()
	<-locked
	seen := make(chan int, 1)
	second := make(chan error, 1)
	go func() {
		_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
			seen <- st.ActiveIndex
			return st, nil
		})
		second <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int64
		require.NoError(t, admin.Raw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&waiting).Error)
		return waiting > 0
	}, 10*time.Second, 10*time.Millisecond, "the second update never waited for the lock")
	close(release)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.Equal(t, 1, <-seen, "the update that waited read a snapshot from before the lock")
}

// A Pending Switch is dated on Postgres' clock when it is written, whatever clock its
// writer read (another instance's, or its own before it waited for the lock): a force
// asked for after the recording, on that clock, drops it.
func TestAPendingSwitchIsDatedOnTheDatabasesClock(t *testing.T) {
	ctx := context.Background()
	store := &brokerstate.Store{DB: openMigrated(t), Brokers: []brokerstate.Ref{brokerA, brokerB}}
	ahead := time.Now().Add(time.Hour) // the recording instance's clock
	_, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
		st, _ = st.ApplyNotification(brokerstate.Notification{Index: 1, Host: brokerB.Host, Vhost: brokerB.Vhost, SwitchedAt: time.Now()}, ahead)
		return st, nil
	})
	require.NoError(t, err)
	asked, err := store.Now(ctx)
	require.NoError(t, err)
	st, err := store.Update(ctx, func(st brokerstate.State) (brokerstate.State, error) {
		require.NotNil(t, st.Pending)
		require.False(t, st.Pending.RecordedAt.After(asked), "recorded at %s, after the force was asked for at %s", st.Pending.RecordedAt, asked)
		return st.Force(0, asked, asked), nil
	})
	require.NoError(t, err)
	require.Nil(t, st.Pending, "the operator knew of it when it asked")
}
