package stacktest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/models"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// Notify posts the producer's notification that it now publishes to broker index, through
// the HTTP API as a producer does: the host in capitals, since hosts match without case.
func (s *Stack) Notify(index int, switchedAt time.Time) {
	s.T.Helper()
	ep := s.Config.Brokers[index]
	body := fmt.Sprintf(`{"host": %q, "vhost": %q, "switchedAt": %q}`, strings.ToUpper(ep.Host), url.PathEscape(ep.Vhost),
		switchedAt.UTC().Format(time.RFC3339Nano))
	status, answer := s.Call(http.MethodPost, "/api/v1/broker/pending-switch", ProducerToken, body)
	if status != http.StatusOK && status != http.StatusAccepted {
		s.T.Fatalf("notification answered %d: %s", status, answer)
	}
}

// Call sends a request to the API with a bearer token and returns the status and body.
func (s *Stack) Call(method, path, token, body string) (int, string) {
	s.T.Helper()
	req, err := http.NewRequest(method, s.API.URL+path, strings.NewReader(body))
	check(s.T, err, "request")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.API.Client().Do(req)
	check(s.T, err, method+" "+path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	check(s.T, err, method+" "+path)
	return resp.StatusCode, string(b)
}

// Signal sends a signal to the BrokerSwitch workflow, starting it if needed, as the API does.
func (s *Stack) Signal(name string, arg any) {
	s.T.Helper()
	_, err := s.Temporal.SignalWithStartWorkflow(context.Background(), workflows.BrokerSwitchWorkflowID, name, arg,
		workflows.BrokerSwitchStartOptions(s.Config.TaskQueue), workflows.BrokerSwitch, workflows.BrokerSwitchInput{})
	check(s.T, err, "signal "+name)
}

// State reads the broker state from Postgres.
func (s *Stack) State() brokerstate.State {
	s.T.Helper()
	st, err := s.Store.Load(context.Background())
	check(s.T, err, "load the broker state")
	return st
}

// Counts reads the ready counts of queues on broker index, directly.
func (s *Stack) Counts(index int, queues ...string) map[string]int {
	s.T.Helper()
	c, err := s.Direct.ReadyCounts(context.Background(), index, queues)
	check(s.T, err, "ready counts")
	return c
}

// Publish sends events to broker index as the producer does, each confirmed.
func (s *Stack) Publish(index int, events ...payloads.Event) {
	s.T.Helper()
	ctx := context.Background()
	ch, err := s.Direct.Channel(ctx, index)
	check(s.T, err, "channel")
	defer ch.Close()
	check(s.T, ch.Confirm(false), "confirm mode")
	for _, ev := range events {
		conf, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", ev.Queue, false, false, amqp.Publishing{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			Headers:      amqp.Table{"x-github-event": ev.Event, "x-github-delivery": ev.DeliveryID},
			Body:         ev.Body,
		})
		check(s.T, err, "publish")
		ok, err := conf.WaitContext(ctx)
		check(s.T, err, "publish")
		if !ok {
			s.T.Fatalf("broker nacked a publish")
		}
	}
}

// PublishRaw sends one message with the given headers and body to queue on broker index.
func (s *Stack) PublishRaw(index int, queue string, headers amqp.Table, body []byte) {
	s.T.Helper()
	ch, err := s.Direct.Channel(context.Background(), index)
	check(s.T, err, "channel")
	defer ch.Close()
	check(s.T, ch.PublishWithContext(context.Background(), "", queue, false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Headers: headers, Body: body}), "publish")
}

// History is the history of one run of a workflow of the stack's namespace.
func (s *Stack) History(ctx context.Context, id, run string) (*historypb.History, error) {
	it := s.Temporal.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s/%s: %w", id, run, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h, nil
}

// Switched tells whether broker index is the active one with no switch pending.
func (s *Stack) Switched(index int) bool {
	s.T.Helper()
	st := s.State()
	return st.ActiveIndex == index && st.Pending == nil
}

// Applied counts the ledger's deliveries applied or ignored: every outcome but an error.
func (s *Stack) Applied() int64 { return s.countDeliveries("outcome <> 'error'") }

// AppliedFrom counts the deliveries consumed from broker index and applied or ignored.
func (s *Stack) AppliedFrom(index int) int64 {
	return s.countDeliveries("outcome <> 'error' AND broker_index = ?", index)
}

// InError counts the ledger's deliveries that ended in error.
func (s *Stack) InError() int64 { return s.countDeliveries("outcome = 'error'") }

func (s *Stack) countDeliveries(where string, args ...any) int64 {
	s.T.Helper()
	var n int64
	check(s.T, s.DB.Model(&models.Delivery{}).Where(where, args...).Count(&n).Error, "count the ledger")
	return n
}

// Ready adds up the messages ready in queues on broker index. Unlike Counts it returns
// the error, for a wait to try again.
func (s *Stack) Ready(index int, queues ...string) (int, error) {
	c, err := s.Direct.ReadyCounts(context.Background(), index, queues)
	total := 0
	for _, n := range c {
		total += n
	}
	return total, err
}

// Consumed tells whether every queue of broker index has one consumer, as when the
// windows consume it. Like Ready it returns the error, for a wait to try again.
func (s *Stack) Consumed(index int) (bool, error) {
	counts, err := s.Direct.QueueCounts(context.Background(), index, s.Config.Queues)
	if err != nil || len(counts) != len(s.Config.Queues) {
		return false, err
	}
	for _, c := range counts {
		if c.Consumers != 1 {
			return false, nil
		}
	}
	return true, nil
}

// ErrorQueues are the -error queues of the stack's queues.
func (s *Stack) ErrorQueues() []string {
	var names []string
	for _, q := range s.Config.Queues {
		names = append(names, broker.ErrorQueue(q))
	}
	return names
}

// ProducerConfig is a producer of the stack's topology that publishes to its brokers
// directly, broker 0 first, and notifies its API with the producer token when told to:
// simulate.NotifyNone, never on its own.
func (s *Stack) ProducerConfig() simulate.Config {
	return simulate.Config{
		Brokers: s.Direct.Endpoints(), Queues: s.Config.Queues, RetryTTL: s.Config.RetryTTL, QueueType: s.Config.QueueType,
		APIURL: s.API.URL, Token: ProducerToken, HTTPClient: s.API.Client(), Notify: simulate.NotifyNone,
	}
}
