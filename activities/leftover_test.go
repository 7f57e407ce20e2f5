package activities

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// ackAll applies nothing and acknowledges everything: these tests are about the spare.
type ackAll struct{}

func (ackAll) ForBroker(int) broker.BatchHandler {
	return broker.BatchHandlerFunc(func(_ context.Context, _ string, ds []amqp.Delivery) ([]broker.Verdict, error) {
		return make([]broker.Verdict, len(ds)), nil
	})
}

// leftoverDrain runs the activity on the brokers at urls with spare 1.
func leftoverDrain(t *testing.T, urls ...string) (LeftoverDrainResult, error) {
	t.Helper()
	eps, err := broker.ParseEndpoints(strings.Join(urls, ","))
	require.NoError(t, err)
	pool := broker.NewPool(eps, nil)
	t.Cleanup(func() { _ = pool.Close() })
	w := &Window{
		Pool: pool, Handlers: ackAll{}, Prefetch: 10, Logger: slog.New(slog.DiscardHandler),
		Topology: broker.Topology{Queues: []string{"issues"}, RetryTTL: time.Minute},
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(w)
	v, err := env.ExecuteActivity(w.LeftoverDrain, LeftoverDrainInput{Queue: "issues", Brokers: []int{1}, Cap: 10})
	var res LeftoverDrainResult
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

// A spare's topology is declared before anything on it can be rejected to its -retry
// queue, so that nothing is dead-lettered into a queue that does not exist (issue 11,
// point 15).
func TestTheLeftoverDrainDeclaresTheSparesTopologyFirst(t *testing.T) {
	active, spare := testenv.NewVhost(t), testenv.NewVhost(t)
	// The producer left one message on the spare's plain queue and declared nothing else.
	ch := channel(t, spare)
	_, err := ch.QueueDeclare("issues", true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.Publish("", "issues", false, false, amqp.Publishing{Body: []byte("{}")}))

	res, err := leftoverDrain(t, active, spare)
	require.NoError(t, err)
	// The plain queue's arguments differ from ours: the spare is skipped with a warning,
	// its message kept, rather than drained with nowhere to dead-letter to.
	require.Equal(t, []int{1}, res.Skipped)
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

// Any failure of a spare, not only a failed dial, is a warning: the window goes on with
// the active broker (issue 11, point 15).
func TestAnyFailureOfASpareIsAWarning(t *testing.T) {
	active, spare := testenv.NewVhost(t), testenv.NewVhost(t)
	ch := channel(t, spare)
	_, err := ch.QueueDeclare("issues", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "issues-retry",
	})
	require.NoError(t, err)
	require.NoError(t, ch.Publish("", "issues", false, false, amqp.Publishing{Body: []byte("{}")}))
	// The spare refuses us reads: basic.get answers 403 ACCESS_REFUSED.
	vhost := spare[strings.LastIndex(spare, "/")+1:]
	out, err := exec.Command("rabbitmqctl", "--quiet", "set_permissions", "-p", vhost, "guest", ".*", ".*", "^$").CombinedOutput()
	require.NoError(t, err, string(out))

	res, err := leftoverDrain(t, active, spare)
	require.NoError(t, err, "a spare's failure does not fail the window")
	require.Equal(t, []int{1}, res.Skipped)
	require.Zero(t, res.Taken[1])
}
