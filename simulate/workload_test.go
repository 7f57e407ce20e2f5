package simulate

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/payloads"
)

var everything = Workload{PullRequests: 4, Issues: 4, Pushes: 5, Branches: 3, Installations: 2, Ignored: 3, Poison: 7, Seed: 7, RunID: "unit"}

// TestWorkloadDecodesLikeTheProducersPayloads: every good message is a payload the consumer
// decodes with the action and delivery the workload says; every poison message is refused.
func TestWorkloadDecodesLikeTheProducersPayloads(t *testing.T) {
	msgs, err := everything.Messages()
	require.NoError(t, err)
	require.Len(t, msgs, everything.Total())

	seen := map[string]bool{}
	poison := map[string]int{}
	for _, m := range msgs {
		require.False(t, seen[m.DeliveryID], "delivery ids are fresh")
		seen[m.DeliveryID] = true
		require.Equal(t, payloads.QueueFor(m.Event), m.Queue, "%s goes to its logical queue", m.Event)
		ev, err := ingest.Decode(amqp.Delivery{Headers: m.Headers(), Body: m.Body})
		if m.Poison != "" {
			poison[m.Poison]++
			require.ErrorIs(t, err, ingest.ErrMalformed, "poison %s", m.Poison)
			continue
		}
		require.NoError(t, err, "%s %s", m.Event, m.Action)
		require.Equal(t, m.Action, ev.Action)
		require.Equal(t, m.DeliveryID, ev.DeliveryID)
		if m.Event == "check_run" || m.Event == "workflow_run" {
			require.Empty(t, m.Entity)
		} else {
			require.NotEmpty(t, m.Entity, "%s %s names its row", m.Event, m.Action)
		}
	}
	require.Equal(t, map[string]int{PoisonInvalidJSON: 3, PoisonMissingEvent: 2, PoisonMissingDelivery: 2}, poison)
}

// TestWorkloadKeepsEachLifecycleInOrder: lifecycles interleave, each in its own order.
func TestWorkloadKeepsEachLifecycleInOrder(t *testing.T) {
	msgs, err := everything.Messages()
	require.NoError(t, err)
	actions := map[string][]string{}
	for _, m := range msgs {
		if m.Entity != "" && (strings.HasPrefix(m.Entity, EntityPullRequest+":") || strings.HasPrefix(m.Entity, EntityIssue+":")) {
			actions[m.Entity] = append(actions[m.Entity], m.Action)
		}
	}
	require.Len(t, actions, 8)
	for entity, got := range actions {
		if strings.HasPrefix(entity, EntityPullRequest) {
			require.Equal(t, []string{"opened", "synchronize", "synchronize", "synchronize", "closed", "synchronize", "reopened", "closed"}, got, entity)
		} else {
			require.Equal(t, []string{"opened", "edited", "labeled", "closed", "edited", "reopened"}, got, entity)
		}
	}
	// Interleaved: the first pull request's lifecycle is not published in one block.
	first, last := -1, -1
	for i, m := range msgs {
		if m.Entity == EntityPullRequest+":PR_sim_unit_1" {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	require.Greater(t, last-first, 10, "lifecycles interleave")

	again, err := everything.Messages()
	require.NoError(t, err)
	for i := range msgs {
		require.Equal(t, msgs[i].Event+" "+msgs[i].Action+" "+msgs[i].Poison, again[i].Event+" "+again[i].Action+" "+again[i].Poison,
			"the seed fixes the interleaving")
		if !strings.HasPrefix(msgs[i].Entity, EntityPush+":") {
			require.Equal(t, msgs[i].Entity, again[i].Entity)
		}
	}
}

func TestWorkloadRefusesBadInput(t *testing.T) {
	_, err := Workload{Issues: -1}.Messages()
	require.Error(t, err)
	_, err = Workload{Issues: 1, RunID: "a:b"}.Messages()
	require.Error(t, err)
	msgs, err := Workload{}.Messages()
	require.NoError(t, err)
	require.Empty(t, msgs)
}

func BenchmarkWorkload(b *testing.B) {
	w := Workload{PullRequests: 10, Issues: 10, Pushes: 10, Branches: 5, Installations: 2, Ignored: 3}
	for b.Loop() {
		_, err := w.Messages()
		require.NoError(b, err)
	}
	b.ReportMetric(float64(w.Total()), "msgs/op")
}

// Each entity's payloads carry its true clock, distinct per event but for a deleted
// comment (GitHub keeps the last edit's); a late event is older than the event before it
// in publish order, and a swapped entity has exactly one more such pair.
func TestWorkloadStampsTrueClocks(t *testing.T) {
	for _, swapped := range []int{0, 2} {
		w := Workload{PullRequests: 3, Issues: 3, Installations: 1, Swapped: swapped, Seed: 3, RunID: "clock"}
		msgs, err := w.Messages()
		require.NoError(t, err)
		last := map[string]Message{}
		inversions := map[string]int{}
		for _, m := range msgs {
			if m.Entity == "" || m.Clock.IsZero() {
				continue
			}
			require.Contains(t, string(m.Body), m.Clock.Format("2006-01-02T15:04:05Z"), "%s %s carries its clock", m.Event, m.Action)
			if prev, ok := last[m.Entity]; ok {
				if m.Action == "deleted" {
					require.True(t, m.Clock.Equal(prev.Clock) || m.Clock.Before(prev.Clock), "a deletion keeps the last edit's clock")
				} else {
					require.False(t, m.Clock.Equal(prev.Clock), "%s: distinct clocks", m.Entity)
				}
				if m.Clock.Before(prev.Clock) {
					inversions[strings.SplitN(m.Entity, ":", 2)[0]]++
				}
			}
			last[m.Entity] = m
		}
		// One late event per pull request and issue; the swapped ones add one each, or
		// swap the late one back into clock order.
		require.Equal(t, 0, inversions[EntityInstallation])
		for _, kind := range []string{EntityPullRequest, EntityIssue} {
			if swapped == 0 {
				require.Equal(t, 3, inversions[kind], kind)
			} else {
				require.NotEqual(t, 3, inversions[kind], "%s: the swaps show", kind)
			}
		}
	}
}
