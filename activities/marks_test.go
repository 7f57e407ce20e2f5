//go:build integration

package activities

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"gorm.io/gorm"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/models/modelstest"
	"github.com/brokerswitch/brokerswitch/windowplan"
)

// marked is a window on real brokers whose Leftover Drain keeps its marks in a real
// Postgres, as the worker has it: the marks the rule reads are those the activity wrote.
type marked struct {
	urls  []string
	store *brokerstate.Store
	dsn   string
	w     *Window
}

// newMarked is a marked window on brokers new vhosts, each with the window's topology.
func newMarked(t *testing.T, brokers int) *marked {
	t.Helper()
	var urls []string
	for range brokers {
		urls = append(urls, testenv.NewVhost(t))
	}
	m := newMarkedOn(t, urls...)
	for i := range urls {
		require.NoError(t, m.w.Pool.DeclareTopology(context.Background(), i, m.w.Topology))
	}
	return m
}

// newMarkedOn is a marked window on the brokers at urls, as their tests left them.
func newMarkedOn(t *testing.T, urls ...string) *marked {
	t.Helper()
	m := &marked{urls: urls}
	eps, err := broker.ParseEndpoints(strings.Join(m.urls, ","))
	require.NoError(t, err)
	pool := broker.NewPool(eps, nil, broker.PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })
	db, dsn := modelstest.NewDB(t)
	m.store, m.dsn = &brokerstate.Store{DB: db}, dsn
	for _, ep := range eps {
		m.store.Brokers = append(m.store.Brokers, brokerstate.Ref{Host: ep.Host, Vhost: ep.Vhost})
	}
	m.w = &Window{
		Pool: pool, Handlers: ackAll{}, Prefetch: 10, Logger: slog.New(slog.DiscardHandler),
		Topology: testTopology(),
		State:    m.store, Marks: m.store, LeftoverDrainCap: 10, UnnotifiedGrace: time.Hour,
	}
	return m
}

// prepare plans a window and drains its spares as PrepareWindow does, without the
// attempt's fence (which needs a worker's lease and a Temporal server).
func (m *marked) prepare(t *testing.T) windowplan.LeftoverDrainResult {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(func(ctx context.Context, queue string) (windowplan.LeftoverDrainResult, error) {
		plan, err := m.w.planWindow(ctx)
		if err != nil {
			return windowplan.LeftoverDrainResult{}, err
		}
		return m.w.leftoverDrain(ctx, leftoverDrainInput{
			Queue: queue, Brokers: plan.Leftover, Ahead: plan.Ahead, Active: plan.ActiveIndex, Cap: plan.LeftoverDrainCap,
		}, nil)
	}, activity.RegisterOptions{Name: "PrepareWindow"})
	v, err := env.ExecuteActivity("PrepareWindow", "issues")
	require.NoError(t, err)
	var out windowplan.LeftoverDrainResult
	require.NoError(t, v.Get(&out))
	return out
}

func (m *marked) update(t *testing.T, fn func(brokerstate.State) brokerstate.State) {
	t.Helper()
	_, err := m.store.Update(context.Background(), func(s brokerstate.State) (brokerstate.State, error) { return fn(s), nil })
	require.NoError(t, err)
}

// notify records the producer's notification that it moved to broker index now.
func (m *marked) notify(t *testing.T, index int) {
	t.Helper()
	ref := m.store.Brokers[index]
	m.update(t, func(s brokerstate.State) brokerstate.State {
		next, _ := s.ApplyNotification(brokerstate.Notification{Index: index, Host: ref.Host, Vhost: ref.Vhost, SwitchedAt: time.Now()}, time.Now())
		return next
	})
}

// commit completes the pending hop, as the BrokerSwitch workflow does after a drain check.
func (m *marked) commit(t *testing.T) {
	t.Helper()
	m.update(t, func(s brokerstate.State) brokerstate.State {
		require.NotNil(t, s.Pending)
		next, ok := s.CompleteHop(s.ActiveIndex, s.Pending.Next(), 1, time.Now())
		require.True(t, ok)
		return next
	})
}

func (m *marked) force(t *testing.T, index int) {
	t.Helper()
	m.update(t, func(s brokerstate.State) brokerstate.State { return s.Force(index, time.Now(), time.Now()) })
}

func (m *marked) publish(t *testing.T, index int) {
	t.Helper()
	publishOne(t, channel(t, m.urls[index]), "issues")
}

// On B the operator forces A; a drain takes what the producer left on B and sees it
// empty; the producer moves to C, and we follow; later drains find B empty and take
// nothing. When the producer comes back to B and publishes before its notification, what
// it publishes there is its future, newer than C's backlog: it waits for the
// notification, and is not read as a straggler of B's old visit.
func TestAReturnToASpareSeenEmptyAfterTheProducerLeftWaits(t *testing.T) {
	const a, b, c = 0, 1, 2
	m := newMarked(t, 3)
	m.notify(t, b)
	m.commit(t)
	m.force(t, a)
	m.publish(t, b)
	require.Equal(t, 1, m.prepare(t).Taken[b], "B is the producer's broker: what it holds is its present")

	m.notify(t, c)
	m.commit(t)
	require.Zero(t, m.prepare(t).Taken[b], "B is empty")

	m.publish(t, b) // the producer is back on B, and its word for B has not come yet
	res := m.prepare(t)
	require.Zero(t, res.Taken[b], "B was seen empty after the producer left it: this is its future")
	require.Len(t, res.Unannounced, 1)
	require.Equal(t, b, res.Unannounced[0].Broker)
}

// A → B; A is drained as a spare and seen empty; the operator forces A, and A's window
// reads it; the producer moves on to C and the switch commits while deliveries of A's
// window go back to A's queue, without x-death. They are older than C's backlog: the
// next window reads them first, rather than hold them as messages never announced.
func TestWhatAForcedBrokerHoldsWhenWeLeaveItIsAStraggler(t *testing.T) {
	const a, b, c = 0, 1, 2
	m := newMarked(t, 3)
	m.notify(t, b)
	m.commit(t)
	require.Zero(t, m.prepare(t).Taken[a], "A is seen empty as a spare")

	m.force(t, a)
	m.notify(t, c)
	m.publish(t, a) // a delivery of A's window, given back when the switch commits
	m.commit(t)
	res := m.prepare(t)
	require.Equal(t, 1, res.Taken[a], "we were reading A until the switch: what it holds is older than C's")
	require.Empty(t, res.Unannounced)
}

// A → B → C with C's word first: A is drained, B holds what the producer published before
// it moved on. The drain check names B as holding the hop, dates it on the marks (where
// the windows' drains see it too), and once B's late word puts B on the route, nothing
// holds the hop any more.
func TestADrainCheckNamesTheSpareThatHoldsTheHop(t *testing.T) {
	const b = 1
	m, s := holdingSpare(t, nil)
	check, err := s.DrainCheck(t.Context(), DrainCheckInput{BrokerIndex: 0})
	require.NoError(t, err)
	require.True(t, check.Drained())
	require.Len(t, check.HeldBy, 1)
	require.Equal(t, b, check.HeldBy[0].Broker)
	require.Equal(t, "issues", check.HeldBy[0].Queue)
	require.Equal(t, time.Hour, check.HeldBy[0].Until.Sub(check.HeldBy[0].Since))
	marks, _, err := m.store.SpareMarks(t.Context(), "issues")
	require.NoError(t, err)
	require.Equal(t, check.HeldBy[0].Since, marks[b].HeldSince, "the windows' drains see the same wait")

	again, err := s.DrainCheck(t.Context(), DrainCheckInput{BrokerIndex: 0})
	require.NoError(t, err)
	require.Equal(t, check.HeldBy[0].Since, again.HeldBy[0].Since, "dated once")

	ref := m.store.Brokers[b]
	m.update(t, func(st brokerstate.State) brokerstate.State {
		next, _ := st.ApplyNotification(brokerstate.Notification{Index: b, Host: ref.Host, Vhost: ref.Vhost,
			SwitchedAt: st.Pending.Target().SwitchedAt.Add(-time.Second)}, time.Now())
		return next
	})
	placed, err := s.DrainCheck(t.Context(), DrainCheckInput{BrokerIndex: 0})
	require.NoError(t, err)
	require.Empty(t, placed.HeldBy, "B is on the route now")
}

// racing is the store of a drain check or a Leftover Drain that runs between, once,
// after its first reading of the marks: what the other one writes meanwhile.
type racing struct {
	*brokerstate.Store
	once    sync.Once
	between func()
}

func (r *racing) SpareMarks(ctx context.Context, queue string) (marks, reached map[int]brokerstate.SpareMark, err error) {
	marks, reached, err = r.Store.SpareMarks(ctx, queue)
	r.once.Do(r.between)
	return marks, reached, err
}

// holdingSpare is A active, C pending and B holding a message the producer never
// announced, with a drain check of A on store.
func holdingSpare(t *testing.T, store stateStore) (*marked, *Switch) {
	t.Helper()
	const b, c = 1, 2
	m := newMarked(t, 3)
	m.publish(t, b)
	m.notify(t, c)
	if store == nil {
		store = m.store
	}
	s := m.switchOn()
	s.Store = store
	return m, s
}

// A drain check reads B's mark; a Leftover Drain marks B seen empty before the check dates
// B as holding the hop. The check writes its date alone: the drain's mark stays.
func TestADrainCheckKeepsWhatADrainMarkedMeanwhile(t *testing.T) {
	const b = 1
	store := &racing{}
	m, s := holdingSpare(t, store)
	store.Store = m.store
	var drained time.Time
	store.between = func() {
		var err error
		if drained, err = m.store.Now(context.Background()); err == nil {
			err = m.store.MarkSpare(context.Background(), b, "issues", brokerstate.SpareMark{DrainedAt: drained})
		}
		require.NoError(t, err)
	}
	check, err := s.DrainCheck(t.Context(), DrainCheckInput{BrokerIndex: 0})
	require.NoError(t, err)
	require.Len(t, check.HeldBy, 1)
	marks, _, err := m.store.SpareMarks(t.Context(), "issues")
	require.NoError(t, err)
	require.Equal(t, drained.Truncate(time.Microsecond), marks[b].DrainedAt, "the drain's mark stays")
	require.Equal(t, check.HeldBy[0].Since, marks[b].HeldSince)
}

// A Leftover Drain reads B's mark; a drain check dates B as holding the hop before the
// drain, which keeps B's message for its notification, dates it too. The first date
// stands: the grace for B's word is counted from it, by both.
func TestADrainKeepsTheDateADrainCheckWroteMeanwhile(t *testing.T) {
	const b = 1
	m, s := holdingSpare(t, nil)
	var check brokerstate.DrainCheck
	var checkErr error
	m.w.Marks = &racing{Store: m.store, between: func() {
		check, checkErr = s.DrainCheck(context.Background(), DrainCheckInput{BrokerIndex: 0})
	}}
	res := m.prepare(t)
	require.NoError(t, checkErr)
	require.Len(t, check.HeldBy, 1)
	require.Zero(t, res.Taken[b])
	require.Len(t, res.Unannounced, 1)
	marks, _, err := m.store.SpareMarks(t.Context(), "issues")
	require.NoError(t, err)
	require.Equal(t, check.HeldBy[0].Since, marks[b].HeldSince, "the check's date stands")
	require.Equal(t, check.HeldBy[0].Since, res.Unannounced[0].Since)
}

// checking applies nothing and acknowledges everything, as ackAll does, but runs each
// batch's checks in a transaction of its own first, as the ingester ends every batch's
// transaction with them; before, when set, runs ahead of the n-th batch (from 1).
type checking struct {
	db     *gorm.DB
	mu     sync.Mutex
	n      int
	before func(n int)
}

func (c *checking) ForActive(index int, checks ...models.Check) broker.BatchHandler {
	return c.ForBroker(index, checks...)
}

func (c *checking) ForBroker(_ int, checks ...models.Check) broker.BatchHandler {
	return broker.BatchHandlerFunc(func(ctx context.Context, _ string, ds []amqp.Delivery) ([]broker.Verdict, error) {
		c.mu.Lock()
		c.n++
		n := c.n
		c.mu.Unlock()
		if c.before != nil {
			c.before(n)
		}
		err := c.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			for _, check := range checks {
				if err := tx.Exec(check.Query, check.Args...).Error; err != nil {
					if refused := check.Refused(err); refused != nil {
						return refused
					}
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return make([]broker.Verdict, len(ds)), nil
	})
}

// A Leftover Drain decides how it reads a spare before its first round. When the
// producer's word that it is back on that broker is recorded while the drain is under way,
// the drain reads no further batch of it: what arrives there from then on is the
// producer's present, and what is left waits, in order, to be read as the broker's new
// place says.
func TestADrainStopsReadingASpareOnceItsNotificationIsRecorded(t *testing.T) {
	const a, b = 0, 1
	m := newMarked(t, 2)
	m.notify(t, b)
	m.commit(t)
	for range 4 {
		m.publish(t, a)
	}
	m.w.Prefetch = 2
	m.w.Handlers = &checking{db: m.store.DB, before: func(n int) {
		if n == 2 {
			m.notify(t, a) // the producer went back to A, between two batches of its drain
		}
	}}
	res := m.prepare(t)
	require.Equal(t, 2, res.Taken[a], "the batch after the notification is not applied")
	q, err := channel(t, m.urls[a]).QueueDeclarePassive("issues", true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, 2, q.Messages, "the rest waits on A")
}

// switchOn is the BrokerSwitch workflow's activities on m's brokers and store.
func (m *marked) switchOn() *Switch {
	return &Switch{Pool: m.w.Pool.(*broker.Pool), Store: m.store, Queues: []string{"issues"}, Now: time.Now,
		Logger: slog.New(slog.DiscardHandler), UnnotifiedGrace: time.Hour}
}

// A → B: the drain check finds A drained, with no consumer on its queue, and the hop
// commits. The producer goes on to C and comes back to A before either word is recorded:
// its first event on A is its future, newer than what it left on C, and a Leftover Drain
// that comes before the words holds it, rather than take it for a straggler of A.
func TestAnUnannouncedReturnToTheBrokerAHopLeftWaits(t *testing.T) {
	const a, b = 0, 1
	m := newMarked(t, 3)
	m.notify(t, b)
	check, err := m.switchOn().DrainCheck(t.Context(), DrainCheckInput{BrokerIndex: a})
	require.NoError(t, err)
	require.True(t, check.Drained())
	require.Equal(t, []string{"issues"}, check.Idle)
	m.commit(t)

	m.publish(t, a)
	res := m.prepare(t)
	require.Zero(t, res.Taken[a], "A was seen idle when the hop left it: this is the producer's future")
	require.Len(t, res.Unannounced, 1)
	require.Equal(t, a, res.Unannounced[0].Broker)
}

// A → B, but a consumer still holds a delivery of A's queue when the drain check finds A
// drained: the check does not name the queue idle, and the delivery, given back after the
// commit, is read as the straggler it is.
func TestWhatAConsumerHeldWhenTheHopCommittedIsAStraggler(t *testing.T) {
	const a, b = 0, 1
	m := newMarked(t, 2)
	m.notify(t, b)
	m.publish(t, a)
	ch := channel(t, m.urls[a])
	ds, err := ch.Consume("issues", "window-on-a", false, false, false, false, nil)
	require.NoError(t, err)
	select {
	case <-ds:
	case <-t.Context().Done():
		t.Fatal("no delivery")
	}
	check, err := m.switchOn().DrainCheck(t.Context(), DrainCheckInput{BrokerIndex: a})
	require.NoError(t, err)
	require.True(t, check.Drained(), "nothing ready")
	require.Empty(t, check.Idle, "a consumer holds the queue")
	m.commit(t)
	require.NoError(t, ch.Close()) // the delivery goes back to A's queue

	res := m.prepare(t)
	require.Equal(t, 1, res.Taken[a])
	require.Empty(t, res.Unannounced)
}

// consuming runs m's window on broker index, with the process's state watcher, as an
// activity until the test ends or the returned stop is called, which returns its error;
// handled receives each batch's size.
func (m *marked) consuming(t *testing.T, index int, handled chan<- int) (stop func() error) {
	t.Helper()
	watcher := &brokerstate.StateWatcher{Store: m.store, DSN: m.dsn}
	testenv.RunInBackground(t, watcher.Run)
	m.w.Watcher = watcher
	m.w.Handlers = counting{handled}
	planned, err := m.store.Load(t.Context())
	require.NoError(t, err)

	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	stopping := make(chan struct{})
	env.RegisterActivityWithOptions(func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-stopping:
			case <-ctx.Done():
			}
			cancel()
		}()
		return m.w.consume(ctx, ConsumeInput{Queue: "issues", BrokerIndex: index, Window: time.Hour}, planned, nil)
	}, activity.RegisterOptions{Name: "Consume"})
	ended := make(chan error, 1)
	go func() {
		_, err := env.ExecuteActivity("Consume")
		ended <- err
	}()
	return func() error {
		close(stopping)
		return <-ended
	}
}

// consumers waits until broker index's queue has want consumers.
func (m *marked) consumers(t *testing.T, index, want int, what string) {
	t.Helper()
	require.NoError(t, testenv.WaitUntil(t.Context(), time.Minute, what, func() (bool, error) {
		c, err := m.w.Pool.QueueCounts(t.Context(), index, []string{"issues"})
		return err == nil && c["issues"].Consumers == want, err
	}))
}

// A window consumes A; once the producer's word that it left A is recorded, the window
// lets go of its consumer while A's queue is quiet, so that a drain check sees the queue
// idle, and takes the consumer again when a message comes (a retry coming back, say).
func TestAWindowOnTheBrokerTheProducerLeftLetsGoOfItsConsumerWhileItIsQuiet(t *testing.T) {
	const a, b = 0, 1
	m := newMarked(t, 2)
	handled := make(chan int, 10)
	stop := m.consuming(t, a, handled)
	m.consumers(t, a, 1, "the window's consumer")
	m.notify(t, b) // the watcher hears of it from Postgres
	m.consumers(t, a, 0, "the window to let go")

	m.publish(t, a)
	select {
	case n := <-handled:
		require.Equal(t, 1, n)
	case <-time.After(time.Minute):
		t.Fatal("the message that came was not read")
	}
	m.consumers(t, a, 0, "the window to let go again")
	require.NoError(t, stop())
}

// The producer has left A, whose backlog a window starts to read over a slow link: its
// consumer takes longer than the quiet time to get its first delivery, yet it does not
// let go while the queue holds messages for it (it would ask again and again, and read
// nothing), and reads the whole backlog.
func TestALeavingWindowKeepsItsConsumerWhileItsQueueHoldsWork(t *testing.T) {
	const a, b = 0, 1
	fast := []string{testenv.NewVhost(t), testenv.NewVhost(t)}
	m := newMarkedOn(t, testenv.ThroughDelay(t, fast[a], 2*releaseAfter), fast[b])
	for i := range fast {
		require.NoError(t, m.w.Pool.DeclareTopology(t.Context(), i, m.w.Topology))
	}
	const backlog = 5
	ch := channel(t, fast[a])
	for range backlog {
		publishOne(t, ch, "issues")
	}
	m.notify(t, b)
	handled := make(chan int, backlog)
	stop := m.consuming(t, a, handled)
	for read := 0; read < backlog; {
		select {
		case n := <-handled:
			read += n
		case <-time.After(time.Minute):
			t.Fatalf("the window read %d of the backlog of %d", read, backlog)
		}
	}
	require.NoError(t, stop())
}

// counting acknowledges everything and says how many deliveries each batch had.
type counting struct{ batches chan<- int }

func (c counting) ForActive(index int, _ ...models.Check) broker.BatchHandler {
	return c.ForBroker(index)
}

func (c counting) ForBroker(int, ...models.Check) broker.BatchHandler {
	return broker.BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]broker.Verdict, error) {
		c.batches <- len(ds)
		return make([]broker.Verdict, len(ds)), nil
	})
}
