package simulate

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	mathrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/payloads"
)

// Headers of the message contract.
const (
	HeaderEvent    = "x-github-event"
	HeaderDelivery = "x-github-delivery"
)

// Poison kinds: messages the consumer must reject to -error with a reason.
const (
	// PoisonInvalidJSON has both headers and a body that is not JSON.
	PoisonInvalidJSON = "invalid-json"
	// PoisonMissingEvent has no x-github-event header.
	PoisonMissingEvent = "missing-event-header"
	// PoisonMissingDelivery has no x-github-delivery header.
	PoisonMissingDelivery = "missing-delivery-header"
)

var poisonKinds = []string{PoisonInvalidJSON, PoisonMissingEvent, PoisonMissingDelivery}

// Message is one message as the producer publishes it.
type Message struct {
	// Queue is the logical queue, payloads.QueueFor(Event).
	Queue string
	// RoutingKey is where the message is published when it is not Queue: "issues-retry"
	// places it as if a consumer had nacked it. Tests only; the producer never does this.
	RoutingKey string
	// Event is the x-github-event header, Action the payload's action ("" for none).
	Event, Action string
	// DeliveryID is the x-github-delivery header, a fresh GUID.
	DeliveryID string
	// Entity names the typed row the event writes ("pull_request:PR_sim_x_1",
	// "push:<delivery>", ...), "" for an event that has no table.
	Entity string
	// Clock is the entity's clock the payload carries (pull_request.updated_at, a
	// comment's updated_at, ...): the true time of the change, whatever the publish
	// order. Zero for an event whose table keeps queue order (push, create, delete).
	Clock time.Time
	// State is the payload's state of a pull request or issue, "" for other events.
	State string
	// Poison is "" for a good message, else its Poison kind.
	Poison string
	// Extra are headers besides the contract's two, such as broker.HeaderRetryCycles on a
	// message as it comes back from -retry. Tests and the benchmark only.
	Extra amqp.Table
	// Body is the JSON payload.
	Body []byte
}

// Target is the routing key the message is published with.
func (m Message) Target() string {
	if m.RoutingKey != "" {
		return m.RoutingKey
	}
	return m.Queue
}

// Headers are the AMQP headers of the message contract; a poison message lacks one.
func (m Message) Headers() amqp.Table {
	h := amqp.Table{}
	maps.Copy(h, m.Extra)
	if m.Poison != PoisonMissingEvent {
		h[HeaderEvent] = m.Event
	}
	if m.Poison != PoisonMissingDelivery {
		h[HeaderDelivery] = m.DeliveryID
	}
	return h
}

// Entity kinds, the prefix of Message.Entity before the colon.
const (
	EntityPullRequest  = "pull_request"
	EntityIssue        = "issue"
	EntityComment      = "comment"
	EntityPush         = "push"
	EntityBranch       = "branch"
	EntityInstallation = "installation"
)

// Workload says what a run publishes. Each entity goes through a lifecycle whose order
// matters, and the lifecycles are interleaved at random (but reproducibly, from Seed), so
// that a rotation lands in the middle of many of them.
type Workload struct {
	// PullRequests: opened, synchronize ×Syncs, a review and a review comment (created,
	// edited), closed, a late synchronize after closed, reopened, closed.
	PullRequests int
	// Issues: opened, edited, a comment created, labeled, closed, the comment edited, a
	// late edit after closed, reopened, the comment deleted.
	Issues int
	// Pushes are plain pushes, one row each.
	Pushes int
	// Branches: the branch created, two pushes to it, deleted.
	Branches int
	// Installations: created, repositories added, suspended, unsuspended, repositories removed.
	Installations int
	// Ignored are events without a table (check_run, workflow_run): ledgered, not applied.
	Ignored int
	// Poison messages (invalid JSON, a missing header) are spread among the others.
	Poison int
	// Syncs is the number of synchronize events of an open pull request; 0 means 3.
	Syncs int
	// Swapped is how many pull requests and issues (the first ones of each) have two
	// consecutive events of their own published in swapped order, as GitHub sometimes
	// delivers them; their payloads keep their true clocks.
	Swapped int
	// Seed makes the interleaving reproducible.
	Seed uint64
	// RunID names this run's entities, so that runs against one database do not share
	// rows; "" picks a random one.
	RunID string
}

// Total is the number of messages the workload publishes.
func (w Workload) Total() int {
	syncs := w.syncs()
	return w.PullRequests*(8+syncs) + w.Issues*9 + w.Pushes + w.Branches*4 + w.Installations*5 + w.Ignored + w.Poison
}

func (w Workload) syncs() int {
	if w.Syncs <= 0 {
		return 3
	}
	return w.Syncs
}

// Messages builds every message of the workload, in publish order.
func (w Workload) Messages() ([]Message, error) {
	g, err := w.Generator()
	if err != nil {
		return nil, err
	}
	out := make([]Message, 0, w.Total())
	for {
		m, ok, err := g.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, m)
	}
}

// Generator builds the workload's messages one at a time, so that a long run does not
// hold every body in memory.
type Generator struct {
	rng    *mathrand.Rand
	run    string
	idBase int64
	// lifecycles still to publish, each a list of steps consumed from the front.
	lifecycles [][]step
	poisonLeft int
	poisonSent int
	left       int // messages not yet returned, poison included
}

// step is one event of a lifecycle, built when it is its turn.
type step struct {
	event, action, entity string
	// clock is the entity clock to stamp (see Message.Clock), state the payload's state.
	clock time.Time
	state string
	edit  func(p map[string]any)
	// entityFromBody computes the entity from the built body when it depends on it.
	entityFromBody func(m Message, p map[string]any) string
}

// Generator returns a generator of the workload's messages.
func (w Workload) Generator() (*Generator, error) {
	for _, n := range []int{w.PullRequests, w.Issues, w.Pushes, w.Branches, w.Installations, w.Ignored, w.Poison, w.Syncs, w.Swapped} {
		if n < 0 {
			return nil, errors.New("simulate: workload counts must not be negative")
		}
	}
	run := w.RunID
	if run == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		run = hex.EncodeToString(b)
	}
	if strings.ContainsAny(run, " /:") {
		return nil, fmt.Errorf("simulate: run id %q must not contain spaces, slashes or colons", run)
	}
	h := fnv.New32a()
	h.Write([]byte(run))
	g := &Generator{
		rng:        mathrand.New(mathrand.NewPCG(w.Seed, 0x5eed)),
		run:        run,
		idBase:     int64(h.Sum32()%math.MaxInt16+1) * 10_000_000_000,
		poisonLeft: w.Poison,
		left:       w.Total(),
	}
	for k := 1; k <= w.PullRequests; k++ {
		g.lifecycles = append(g.lifecycles, g.swap(g.pullRequest(k, w.syncs()), k <= w.Swapped))
	}
	for k := 1; k <= w.Issues; k++ {
		g.lifecycles = append(g.lifecycles, g.swap(g.issue(k), k <= w.Swapped))
	}
	for k := 1; k <= w.Pushes; k++ {
		g.lifecycles = append(g.lifecycles, []step{g.push("refs/heads/main")})
	}
	for k := 1; k <= w.Branches; k++ {
		g.lifecycles = append(g.lifecycles, g.branch(k))
	}
	for k := 1; k <= w.Installations; k++ {
		g.lifecycles = append(g.lifecycles, g.installation(k))
	}
	for k := 1; k <= w.Ignored; k++ {
		event := []string{"check_run", "workflow_run"}[k%2]
		g.lifecycles = append(g.lifecycles, []step{{event: event, action: "completed"}})
	}
	return g, nil
}

// RunID is the run id that names the entities.
func (g *Generator) RunID() string { return g.run }

// Left is the number of messages still to come.
func (g *Generator) Left() int { return g.left }

// Next returns the next message; ok is false once the workload is done.
func (g *Generator) Next() (m Message, ok bool, err error) {
	if g.left == 0 {
		return Message{}, false, nil
	}
	// Poison is spread evenly: each message is poison with the share of poison left.
	if g.poisonLeft > 0 && g.rng.IntN(g.left) < g.poisonLeft {
		g.poisonLeft--
		g.left--
		m := g.poison()
		return m, true, nil
	}
	// A random lifecycle advances by one step, so lifecycles interleave but each keeps
	// its own order.
	i := g.rng.IntN(len(g.lifecycles))
	st := g.lifecycles[i][0]
	if g.lifecycles[i] = g.lifecycles[i][1:]; len(g.lifecycles[i]) == 0 {
		g.lifecycles[i] = g.lifecycles[len(g.lifecycles)-1]
		g.lifecycles = g.lifecycles[:len(g.lifecycles)-1]
	}
	g.left--
	m, err = build(st)
	if err != nil {
		return Message{}, false, err
	}
	return m, true, nil
}

func build(st step) (Message, error) {
	p, err := template(st.event, st.action)
	if err != nil {
		return Message{}, err
	}
	if st.action != "" {
		p["action"] = st.action
	}
	if st.edit != nil {
		st.edit(p)
	}
	stampClock(st, p)
	body, err := json.Marshal(p)
	if err != nil {
		return Message{}, fmt.Errorf("simulate: encode %s %s: %w", st.event, st.action, err)
	}
	m := Message{Queue: payloads.QueueFor(st.event), Event: st.event, Action: st.action, DeliveryID: payloads.NewDeliveryID(),
		Entity: st.entity, Clock: st.clock, State: st.state, Body: body}
	if st.entityFromBody != nil {
		m.Entity = st.entityFromBody(m, p)
	}
	return m, nil
}

// templates caches the decoded vendored payloads: decoding a 30 kB payload for every
// message would cost more than publishing it.
var (
	templatesMu sync.Mutex
	templates   = map[string]map[string]any{}
)

// template returns a fresh copy of the vendored example of event/action (any example of
// the event when that action has none), decoded with numbers kept as written.
func template(event, action string) (map[string]any, error) {
	templatesMu.Lock()
	defer templatesMu.Unlock()
	key := event + "." + action
	t, ok := templates[key]
	if !ok {
		examples := payloads.Find(event, action)
		if len(examples) == 0 {
			examples = payloads.Find(event, "")
		}
		if len(examples) == 0 {
			return nil, fmt.Errorf("simulate: no vendored example of %s", event)
		}
		dec := json.NewDecoder(bytes.NewReader(examples[0].Body))
		dec.UseNumber()
		if err := dec.Decode(&t); err != nil {
			return nil, fmt.Errorf("simulate: decode %s: %w", examples[0].Name, err)
		}
		templates[key] = t
	}
	return deepCopy(t).(map[string]any), nil
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}

// poison makes a poison message, cycling through the kinds and the queues.
func (g *Generator) poison() Message {
	kind := poisonKinds[g.poisonSent%len(poisonKinds)]
	queues := []string{"pull_requests", "issues", "pushes", "installations"}
	queue := queues[(g.poisonSent/len(poisonKinds)+g.poisonSent)%len(queues)]
	g.poisonSent++
	event := map[string]string{"pull_requests": "pull_request", "issues": "issues", "pushes": "push", "installations": "installation"}[queue]
	m := Message{Queue: queue, Event: event, DeliveryID: payloads.NewDeliveryID(), Poison: kind, Body: []byte(`{}`)}
	if kind == PoisonInvalidJSON {
		m.Body = []byte(`{"action": "opened", "number": 1, "pull_request": {"id": `)
	}
	return m
}

func (g *Generator) id(kind, k int) int64 { return g.idBase + int64(kind)*1_000_000 + int64(k) }

func num(n int64) json.Number { return json.Number(fmt.Sprint(n)) }

func obj(p map[string]any, key string) map[string]any {
	o, _ := p[key].(map[string]any)
	if o == nil {
		o = map[string]any{}
		p[key] = o
	}
	return o
}

func sha() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// pullRequest is the lifecycle of pull request k, with its review and review comment.
func (g *Generator) pullRequest(k, syncs int) []step {
	nodeID := fmt.Sprintf("PR_sim_%s_%d", g.run, k)
	number := int64(k)
	state := "open"
	pr := func(action, newState string) step {
		if newState != "" {
			state = newState
		}
		st := state
		return step{event: "pull_request", action: action, entity: EntityPullRequest + ":" + nodeID, state: st, edit: func(p map[string]any) {
			o := obj(p, "pull_request")
			o["node_id"], o["id"], o["number"] = nodeID, num(g.id(1, k)), num(number)
			o["title"] = fmt.Sprintf("simulated pull request %s/%d", g.run, k)
			o["state"] = st
			o["merged"] = false
			if st == "closed" {
				o["closed_at"] = "2026-01-02T03:04:05Z"
			} else {
				o["closed_at"] = nil
			}
			if action == "synchronize" {
				obj(o, "head")["sha"] = sha()
			}
		}}
	}
	parent := func(p map[string]any, st string) {
		o := obj(p, "pull_request")
		o["node_id"], o["id"], o["number"], o["state"] = nodeID, num(g.id(1, k)), num(number), st
	}
	reviewID := fmt.Sprintf("PRR_sim_%s_%d", g.run, k)
	review := func() step {
		st := state
		return step{event: "pull_request_review", action: "submitted", entity: EntityComment + ":" + reviewID, edit: func(p map[string]any) {
			r := obj(p, "review")
			r["node_id"], r["id"] = reviewID, num(g.id(2, k))
			parent(p, st)
		}}
	}
	commentID := fmt.Sprintf("PRRC_sim_%s_%d", g.run, k)
	comment := func(action string) step {
		st := state
		return step{event: "pull_request_review_comment", action: action, entity: EntityComment + ":" + commentID, edit: func(p map[string]any) {
			c := obj(p, "comment")
			c["node_id"], c["id"] = commentID, num(g.id(3, k))
			c["body"] = fmt.Sprintf("review comment %s (%s)", commentID, action)
			parent(p, st)
		}}
	}
	steps := []step{pr("opened", "open")}
	for range syncs {
		steps = append(steps, pr("synchronize", ""))
	}
	steps = append(steps, review(), comment("created"), comment("edited"),
		pr("closed", "closed"),
		pr("synchronize", ""), // arrives after the close it preceded: must not reopen it
		pr("reopened", "open"),
		pr("closed", "closed"))
	return clocked(steps, map[int]bool{len(steps) - 3: true})
}

// issue is the lifecycle of issue k, with one comment.
func (g *Generator) issue(k int) []step {
	nodeID := fmt.Sprintf("I_sim_%s_%d", g.run, k)
	state := "open"
	is := func(action, newState string) step {
		if newState != "" {
			state = newState
		}
		st := state
		return step{event: "issues", action: action, entity: EntityIssue + ":" + nodeID, state: st, edit: func(p map[string]any) {
			o := obj(p, "issue")
			o["node_id"], o["id"], o["number"] = nodeID, num(g.id(4, k)), num(int64(k))
			o["title"] = fmt.Sprintf("simulated issue %s/%d (%s)", g.run, k, action)
			o["state"] = st
			if st == "closed" {
				o["closed_at"], o["state_reason"] = "2026-01-02T03:04:05Z", "completed"
			} else {
				o["closed_at"], o["state_reason"] = nil, nil
			}
		}}
	}
	commentID := fmt.Sprintf("IC_sim_%s_%d", g.run, k)
	comment := func(action string) step {
		st := state
		return step{event: "issue_comment", action: action, entity: EntityComment + ":" + commentID, edit: func(p map[string]any) {
			c := obj(p, "comment")
			c["node_id"], c["id"] = commentID, num(g.id(5, k))
			c["body"] = fmt.Sprintf("issue comment %s (%s)", commentID, action)
			o := obj(p, "issue")
			o["node_id"], o["id"], o["number"], o["state"] = nodeID, num(g.id(4, k)), num(int64(k)), st
		}}
	}
	return clocked([]step{
		is("opened", "open"),
		is("edited", ""),
		comment("created"),
		is("labeled", ""),
		is("closed", "closed"),
		comment("edited"),
		is("edited", ""), // arrives after the close it preceded: older than the row, only the ledger records it
		is("reopened", "open"),
		comment("deleted"),
	}, map[int]bool{6: true})
}

// push is one push to ref; a push is its own row, keyed by its delivery.
func (g *Generator) push(ref string) step {
	return step{event: "push", edit: func(p map[string]any) {
		p["ref"], p["before"], p["after"] = ref, sha(), sha()
		p["created"], p["deleted"] = false, false
	}, entityFromBody: func(m Message, _ map[string]any) string { return EntityPush + ":" + m.DeliveryID }}
}

// branch is branch k created, pushed to twice and deleted.
func (g *Generator) branch(k int) []step {
	ref := fmt.Sprintf("sim-%s-%d", g.run, k)
	refEvent := func(event string) step {
		return step{event: event, edit: func(p map[string]any) {
			p["ref"], p["ref_type"] = ref, "branch"
		}, entityFromBody: func(_ Message, p map[string]any) string {
			return fmt.Sprintf("%s:%v/branch/%s", EntityBranch, obj(p, "repository")["id"], ref)
		}}
	}
	return []step{refEvent("create"), g.push("refs/heads/" + ref), g.push("refs/heads/" + ref), refEvent("delete")}
}

// installation is the lifecycle of installation k.
func (g *Generator) installation(k int) []step {
	id := g.id(6, k)
	inst := func(event, action string) step {
		return step{event: event, action: action, entity: fmt.Sprintf("%s:%d", EntityInstallation, id), edit: func(p map[string]any) {
			obj(p, "installation")["id"] = num(id)
		}}
	}
	return clocked([]step{
		inst("installation", "created"),
		inst("installation_repositories", "added"),
		inst("installation", "suspend"),
		inst("installation", "unsuspend"),
		inst("installation_repositories", "removed"),
	}, nil)
}

// clocked gives the steps of one entity's lifecycle their true clocks, a minute apart in
// lifecycle order; an event that arrives late (after a close it preceded) is given a
// clock just before the entity's latest one, and a deleted comment keeps its last
// edit's, as GitHub stamps it.
func clocked(steps []step, late map[int]bool) []step {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	last := map[string]time.Time{} // the entity's latest clock so far
	for i := range steps {
		st := &steps[i]
		st.clock = base.Add(time.Duration(i) * time.Minute)
		switch {
		case late[i] && !last[st.entity].IsZero():
			st.clock = last[st.entity].Add(-30 * time.Second)
		case st.action == "deleted" && !last[st.entity].IsZero():
			st.clock = last[st.entity]
		}
		last[st.entity] = st.clock
	}
	return steps
}

// swap publishes two consecutive events of the lifecycle's own entity (not its comments
// or reviews) in swapped order when on; the clocks stay with their events.
func (g *Generator) swap(steps []step, on bool) []step {
	if !on {
		return steps
	}
	var own []int
	for i := 1; i < len(steps); i++ {
		if steps[i].entity == steps[0].entity && steps[i-1].entity == steps[0].entity {
			own = append(own, i)
		}
	}
	if len(own) == 0 {
		return steps
	}
	i := own[g.rng.IntN(len(own))]
	steps[i-1], steps[i] = steps[i], steps[i-1]
	return steps
}

// stampClock writes the step's clock into the field its table reads (ingest's clockOf).
func stampClock(st step, p map[string]any) {
	if st.clock.IsZero() {
		return
	}
	at := st.clock.Format(time.RFC3339)
	switch st.event {
	case "pull_request":
		obj(p, "pull_request")["updated_at"] = at
	case "issues":
		obj(p, "issue")["updated_at"] = at
	case "issue_comment", "pull_request_review_comment":
		obj(p, "comment")["updated_at"] = at
	case "pull_request_review":
		obj(p, "review")["submitted_at"] = at
	case "installation", "installation_repositories":
		obj(p, "installation")["updated_at"] = at
	}
}
