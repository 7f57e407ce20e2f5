//go:build integration

package activities

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/windowplan"
)

// ackAll applies nothing and acknowledges everything: these tests are about the spare.
type ackAll struct{}

func (a ackAll) ForActive(index int, _ ...models.Check) broker.BatchHandler {
	return a.ForBroker(index)
}

func (ackAll) ForBroker(int, ...models.Check) broker.BatchHandler {
	return broker.BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]broker.Verdict, error) {
		return make([]broker.Verdict, len(ds)), nil
	})
}

// testTopology is the issues queue as the tests' RabbitMQ pass declares it (classic unless
// BROKERSWITCH_TEST_QUEUE_TYPE says quorum).
func testTopology() broker.Topology {
	return broker.Topology{Queues: []string{"issues"}, RetryTTL: time.Minute, Type: broker.QueueType(testenv.QueueType())}
}

// leftoverDrain runs the activity on the brokers at urls with spare 1.
func leftoverDrain(t *testing.T, urls ...string) (windowplan.LeftoverDrainResult, error) {
	t.Helper()
	return leftoverDrainOf(t, LeftoverDrainInput{Queue: "issues", Brokers: []int{1}, Cap: 10}, urls...)
}

// leftoverDrainOf runs the activity with in on the brokers at urls, against a broker
// state of its own in which the producer was on every spare of in.Brokers, in their
// order, before it moved to in.Active and we followed: what those spares hold is
// stragglers, so these tests are about the spares' brokers, not about the marks.
func leftoverDrainOf(t *testing.T, in LeftoverDrainInput, urls ...string) (windowplan.LeftoverDrainResult, error) {
	t.Helper()
	m := newMarkedOn(t, urls...)
	if len(in.Brokers) > 0 {
		for _, idx := range append(slices.Clone(in.Brokers), in.Active) {
			m.notify(t, idx)
			m.commit(t)
		}
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	// The drain runs inside PrepareWindow; here on its own, in an activity of its own,
	// without the attempt's fence (which needs a worker's lease and a Temporal server).
	env.RegisterActivityWithOptions(func(ctx context.Context, in LeftoverDrainInput) (windowplan.LeftoverDrainResult, error) {
		return m.w.leftoverDrain(ctx, in, nil)
	}, activity.RegisterOptions{Name: "LeftoverDrain"})
	v, err := env.ExecuteActivity("LeftoverDrain", in)
	var res windowplan.LeftoverDrainResult
	if err == nil {
		require.NoError(t, v.Get(&res))
	}
	return res, err
}

func channel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return ch
}

// publishOne leaves one message on queue through ch and returns once the broker confirms
// it: a drain that follows must find it, and on a quorum queue an unconfirmed publish may
// not be in the queue yet when the next connection counts it.
func publishOne(t *testing.T, ch *amqp.Channel, queue string) {
	t.Helper()
	require.NoError(t, ch.Confirm(false))
	confirm, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", queue, false, false, amqp.Publishing{Body: []byte("{}")})
	require.NoError(t, err)
	acked, err := confirm.WaitContext(t.Context())
	require.NoError(t, err)
	require.True(t, acked, "the broker refused the message")
}

// publishOnPlainQueue declares issues on the broker at url with its dead-letter arguments
// only, as a producer might, and leaves one message on it.
func publishOnPlainQueue(t *testing.T, url string) {
	t.Helper()
	ch := channel(t, url)
	_, err := ch.QueueDeclare("issues", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "issues-retry",
	})
	require.NoError(t, err)
	publishOne(t, ch, "issues")
}

// setReads sets guest's read permission on the vhost of url (3.10's rabbitmqctl): "^$"
// refuses consume and basic.get with 403 ACCESS_REFUSED.
func setReads(t *testing.T, url, read string) {
	t.Helper()
	vhost := url[strings.LastIndex(url, "/")+1:]
	out, err := exec.Command("rabbitmqctl", "--quiet", "set_permissions", "-p", vhost, "guest", ".*", ".*", read).CombinedOutput()
	require.NoError(t, err, string(out))
}

// A spare's topology is declared before anything on it can be rejected to its -retry
// queue, so that nothing is dead-lettered into a queue that does not exist.
func TestTheLeftoverDrainDeclaresTheSparesTopologyFirst(t *testing.T) {
	active, spare := testenv.NewVhost(t), testenv.NewVhost(t)
	// The producer left one message on the spare's plain queue and declared nothing else.
	ch := channel(t, spare)
	_, err := ch.QueueDeclare("issues", true, false, false, false, nil)
	require.NoError(t, err)
	publishOne(t, ch, "issues")

	res, err := leftoverDrain(t, active, spare)
	// The plain queue's arguments differ from ours: the spare is not drained with nowhere
	// to dead-letter to, and since it holds a message, the attempt fails rather than read
	// the active broker past it.
	require.ErrorContains(t, err, "1 messages ready")
	require.Zero(t, res.Taken[1])
	q, err := channel(t, spare).QueueDeclarePassive("issues", true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, 1, q.Messages, "the message waits on the spare")

	// A spare with nothing declared gets the whole topology before it is read.
	empty := testenv.NewVhost(t)
	res, err = leftoverDrain(t, active, empty)
	require.NoError(t, err)
	require.Empty(t, res.Skipped)
	for _, name := range []string{"issues", "issues-retry", "issues-error"} {
		_, err := channel(t, empty).QueueDeclarePassive(name, true, false, false, false, nil)
		require.NoError(t, err, "%s declared on the spare", name)
	}
}

// A spare that fails other than by dial (a refused read, a refused declaration, a channel
// closed mid-drain) while it holds messages is not read around: the attempt fails, is
// counted, and is retried, so that the active broker does not overtake what it holds. One
// that holds nothing ready is only a warning.
func TestASpareThatFailsWhileItHoldsMessagesIsNotReadAround(t *testing.T) {
	active, spare := testenv.NewVhost(t), testenv.NewVhost(t)
	publishOnPlainQueue(t, spare)
	// The spare refuses us reads: consume and basic.get answer 403 ACCESS_REFUSED.
	setReads(t, spare, "^$")

	res, err := leftoverDrain(t, active, spare)
	require.ErrorContains(t, err, "which the active broker must not overtake")
	require.Zero(t, res.Taken[1])

	setReads(t, spare, ".*")
	_, err = channel(t, spare).QueuePurge("issues", false)
	require.NoError(t, err)
	setReads(t, spare, "^$")
	res, err = leftoverDrain(t, active, spare)
	require.NoError(t, err, "a failed spare that holds nothing ready does not hold the window")
	require.Equal(t, []int{1}, res.Skipped)
}

// A spare ahead of the active broker (the producer's broker after a cancel) is read only
// once the active broker's queue and its -retry sibling are empty: its messages are newer.
func TestASpareAheadWaitsForTheActiveBacklog(t *testing.T) {
	active, behind, ahead := testenv.NewVhost(t), testenv.NewVhost(t), testenv.NewVhost(t)
	eps, err := broker.ParseEndpoints(strings.Join([]string{active, behind, ahead}, ","))
	require.NoError(t, err)
	pool := broker.NewPool(eps, nil, broker.PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })
	for i := range eps {
		require.NoError(t, pool.DeclareTopology(context.Background(), i, testTopology()))
	}
	publishOne(t, channel(t, behind), "issues")
	publishOne(t, channel(t, ahead), "issues")
	publishOne(t, channel(t, active), "issues-retry") // a backlog, even one waiting in -retry, holds the spare
	in := LeftoverDrainInput{Queue: "issues", Brokers: []int{1}, Ahead: []int{2}, Active: 0, Cap: 10}

	res, err := leftoverDrainOf(t, in, active, behind, ahead)
	require.NoError(t, err)
	require.Equal(t, 1, res.Taken[1], "the spare behind is read")
	require.Equal(t, []int{2}, res.Held, "the spare ahead waits")
	require.Zero(t, res.Taken[2])

	_, err = channel(t, active).QueuePurge("issues-retry", false)
	require.NoError(t, err)
	res, err = leftoverDrainOf(t, in, active, behind, ahead)
	require.NoError(t, err)
	require.Empty(t, res.Held)
	require.Equal(t, 1, res.Taken[2], "read once the active broker is empty")
}

// hold takes one delivery of queue at url on a consumer of its own and never settles it,
// as the batch of a connection gone half-open: the broker counts it unacknowledged, not
// ready, until it reaps that connection.
func hold(t *testing.T, url, queue string) {
	t.Helper()
	ch := channel(t, url)
	require.NoError(t, ch.Qos(1, 0, false))
	ds, err := ch.Consume(queue, "half-open", false, false, false, false, nil)
	require.NoError(t, err)
	select {
	case <-ds:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery to hold")
	}
}

// A failed spare whose only message is held unacknowledged by a consumer (the drain's own
// connection, half-open) holds nothing ready, and still holds a message older than the
// active broker's: the attempt fails rather than read past it.
func TestAFailedSpareWhoseMessageIsUnacknowledgedIsNotReadAround(t *testing.T) {
	active, spare := testenv.NewVhost(t), testenv.NewVhost(t)
	publishOnPlainQueue(t, spare)
	hold(t, spare, "issues")
	setReads(t, spare, "^$")

	res, err := leftoverDrain(t, active, spare)
	require.ErrorContains(t, err, "which the active broker must not overtake")
	require.ErrorContains(t, err, "1 consumers")
	require.Empty(t, res.Skipped)
}

// The active broker's queue counts as empty only with no consumer on it: deliveries a
// consumer holds unsettled come back to its head, older than what a spare ahead holds.
func TestASpareAheadWaitsForTheActiveBrokersUnacknowledgedBacklog(t *testing.T) {
	active, ahead := testenv.NewVhost(t), testenv.NewVhost(t)
	eps, err := broker.ParseEndpoints(strings.Join([]string{active, ahead}, ","))
	require.NoError(t, err)
	pool := broker.NewPool(eps, nil, broker.PoolSettings{})
	t.Cleanup(func() { _ = pool.Close() })
	for i := range eps {
		require.NoError(t, pool.DeclareTopology(context.Background(), i, testTopology()))
	}
	publishOne(t, channel(t, active), "issues")
	publishOne(t, channel(t, ahead), "issues")
	hold(t, active, "issues")

	res, err := leftoverDrainOf(t, LeftoverDrainInput{Queue: "issues", Ahead: []int{1}, Active: 0, Cap: 10}, active, ahead)
	require.NoError(t, err)
	require.Equal(t, []int{1}, res.Held, "the spare ahead waits for the delivery held on the active broker")
	require.Zero(t, res.Taken[1])
}
