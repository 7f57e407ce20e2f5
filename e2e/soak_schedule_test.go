//go:build integration

package e2e

// The soak's schedule generator: from a seed alone, a timeline of producer actions,
// operator orders and faults, built by a model of the deployment so that every schedule
// stays inside what the docs promise to keep in order. The same seed gives the same
// schedule, so a failing seed replays.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/simulate"
)

// roleLeftovers is the role of a broker cut while it is a spare that may hold leftovers.
const roleLeftovers = "spare holding leftovers"

// soakBrokers is how many brokers a soak deployment has: enough for a double rotation
// with a spare left over.
const soakBrokers = 3

// stepKind is what one step of a schedule does.
type stepKind int

const (
	stepPublish            stepKind = iota // a burst of events on the producer's broker
	stepRetryTail                          // one event put in a -retry queue, as a consumer's nack does
	stepRotateNow                          // rotate and notify at once
	stepRotateTwice                        // rotate and notify twice
	stepRotateLate                         // rotate, publish a burst, only then notify
	stepRotateSilent                       // rotate, publish a burst, never notify
	stepRotateReversed                     // rotate twice, notify the second hop before the first
	stepForce                              // the operator forces a switch to where the producer is
	stepCancel                             // the operator cancels a Pending Switch the producer asked for
	stepCutBroker                          // a broker's proxy is cut
	stepRestoreBroker                      // and restored
	stepCutPostgres                        // the workers' Postgres proxy is cut
	stepRestorePostgres                    // and restored
	stepRestartPostgres                    // every worker backend ends and Postgres takes connections again at once
	stepStopTemporal                       // the Temporal dev server stops
	stepStartTemporal                      // and starts again, with its state
	stepKillWorker                         // SIGKILL a worker, and start another
	stepTermWorker                         // SIGTERM a worker, and start another
	stepAddWorker                          // one more worker process: two at once
	stepIsolateWorker                      // cut one worker off from Temporal alone
	stepRejoinWorker                       // and let it reach Temporal again
	stepCutOffSlow                         // a worker cut off from Temporal while its batch waits on a held ledger
	stepPause                              // let the service run while the faults last
	stepSettle                             // heal nothing, wait until everything published so far is applied
	stepFinish                             // the end: everything drained, the active broker where the producer is
	stepKillHolder                         // SIGKILL the worker holding the most windows, and start it again
	stepForceHopReturn                     // a force, a hop out of the forced broker (or the producer's), a return announced late
	stepCutOffDrain                        // a worker cut off from Temporal while its Leftover Drain's batch waits on a held ledger
	stepPauseWorker                        // SIGSTOP a worker for a while, then SIGCONT
	stepSilenceLink                        // a worker's link (Postgres, a broker, Temporal, or all) stops forwarding without closing, for a while
	stepRotateReversedLate                 // rotate twice, notify the second hop, the first only once that hop committed or waits for it
)

// The links stepSilenceLink silences: one of a worker's, or all of them at once.
const (
	linkPostgres = "Postgres"
	linkBroker   = "broker"
	linkTemporal = "Temporal"
	linkAll      = "Postgres, every broker and Temporal"
)

// Bounds of how long a worker is paused or a link stays silent: up to slowLong in the
// soak, up to slowShort in the short schedules `make test` plays.
const (
	slowMin   = 5 * time.Second
	slowLong  = 90 * time.Second
	slowShort = 20 * time.Second
)

// step is one entry of a schedule.
type step struct {
	kind stepKind
	// broker is the target of a rotation, force or cut; role says what it was to the
	// model when it was cut ("active", "on the route", "spare").
	broker int
	role   string
	// worker numbers the worker process a step acts on; next is the one started after.
	worker, next int
	// burst is published by stepPublish and by the rotations that publish.
	burst simulate.Workload
	// pause is how long stepPause, stepPauseWorker and stepSilenceLink last.
	pause time.Duration
	// link is what stepSilenceLink silences (linkPostgres, linkBroker to broker, linkTemporal,
	// linkAll); firstEmpty says that stepRotateReversedLate publishes nothing on its first hop.
	link       string
	firstEmpty bool
	// delay is how long after its burst stepRotateLate notifies; twice: it notifies twice.
	delay time.Duration
	twice bool
	// active is, for stepSettle and stepFinish, the broker the service reads once settled.
	active int
	// force says that stepFinish forces a switch to the producer's broker first.
	force bool
	// backlog says that stepCancel came without a settle: the active broker may have one.
	backlog bool
	// For stepForceHopReturn: here says that the producer moved to the forced broker
	// (broker) before the force, unannounced, from active; otherwise the operator forced
	// broker while the producer stayed on active. The producer then hops to hop, announced,
	// publishing hopBurst, and returns to back, publishing backBurst there delay before
	// announcing it.
	here                bool
	hop, back           int
	hopBurst, backBurst simulate.Workload
}

// String says what the step does, in words.
func (s step) String() string {
	burst := func() string {
		w := s.burst
		out := fmt.Sprintf("%d events", w.Total()-w.Poison)
		if w.Poison > 0 {
			out += fmt.Sprintf(" with %d poison", w.Poison)
		}
		return out
	}
	switch s.kind {
	case stepPublish:
		return "publish " + burst()
	case stepRetryTail:
		return "put one issues event in issues-retry on the producer's broker (a -retry tail)"
	case stepRotateNow:
		return fmt.Sprintf("rotate to broker %d and notify", s.broker)
	case stepRotateTwice:
		return fmt.Sprintf("rotate to broker %d and notify twice", s.broker)
	case stepRotateLate:
		if s.delay > 0 {
			times := "once"
			if s.twice {
				times = "twice"
			}
			return fmt.Sprintf("rotate to broker %d, publish %s there, notify %s after %s", s.broker, burst(), times, s.delay)
		}
		return fmt.Sprintf("rotate to broker %d, publish %s there, then notify late", s.broker, burst())
	case stepRotateSilent:
		return fmt.Sprintf("rotate to broker %d without notifying, publish %s there", s.broker, burst())
	case stepRotateReversed:
		return fmt.Sprintf("rotate to broker %d, publish %s, rotate to broker %d, notify broker %d then broker %d (reversed)",
			s.active, burst(), s.broker, s.broker, s.active)
	case stepForce:
		return fmt.Sprintf("the operator forces a switch to broker %d, where the producer is", s.broker)
	case stepCancel:
		if s.backlog {
			return fmt.Sprintf("cut the broker the service reads (broker %d, unless its switch committed), rotate to broker %d and notify, publish %s, the operator cancels the pending switch, restore the cut broker",
				s.active, s.broker, burst())
		}
		return fmt.Sprintf("cut the active broker %d, rotate to broker %d and notify, publish %s, the operator cancels the pending switch, restore broker %d",
			s.active, s.broker, burst(), s.active)
	case stepCutBroker:
		return fmt.Sprintf("cut broker %d (%s)", s.broker, s.role)
	case stepRestoreBroker:
		return fmt.Sprintf("restore broker %d", s.broker)
	case stepCutPostgres:
		return "cut the workers off from Postgres"
	case stepRestorePostgres:
		return "let the workers reach Postgres again"
	case stepRestartPostgres:
		return "restart Postgres (every worker connection ends, new ones are taken at once)"
	case stepStopTemporal:
		return "stop the Temporal dev server"
	case stepStartTemporal:
		return "start the Temporal dev server again"
	case stepKillWorker:
		return fmt.Sprintf("SIGKILL worker %d, start worker %d", s.worker, s.next)
	case stepKillHolder:
		return "SIGKILL the worker holding the most windows, start it again"
	case stepTermWorker:
		return fmt.Sprintf("SIGTERM worker %d, start worker %d", s.worker, s.next)
	case stepAddWorker:
		return fmt.Sprintf("start worker %d beside the others", s.next)
	case stepIsolateWorker:
		return fmt.Sprintf("cut worker %d off from Temporal alone (it keeps RabbitMQ and Postgres)", s.worker)
	case stepRejoinWorker:
		return fmt.Sprintf("let worker %d reach Temporal again", s.worker)
	case stepCutOffSlow:
		return fmt.Sprintf("hold the ledger (a slow Postgres), publish %s, cut the worker whose window holds a batch off from Temporal, "+
			"release the ledger once its window runs elsewhere, let it reach Temporal again", burst())
	case stepForceHopReturn:
		first := fmt.Sprintf("the operator forces a switch to broker %d while the producer stays on broker %d, which publishes %s", s.broker, s.active, burst())
		if s.here {
			first = fmt.Sprintf("rotate to broker %d without notifying, publish %s there, the operator forces a switch to it", s.broker, burst())
		}
		return fmt.Sprintf("%s; rotate to broker %d and notify, publish %d events there; once broker %d is seen empty, "+
			"return to broker %d, publish %d events there, notify after %s", first, s.hop, s.hopBurst.Total(), s.back, s.back, s.backBurst.Total(), s.delay)
	case stepCutOffDrain:
		return fmt.Sprintf("cut broker %d (active), publish %s there, rotate to broker %d without notifying, the operator forces a switch to it; "+
			"hold the ledger (a slow Postgres), restore broker %d, cut the worker whose Leftover Drain holds a batch of it off from Temporal, "+
			"release the ledger once the drain runs elsewhere, let it reach Temporal again",
			s.active, burst(), s.broker, s.active)
	case stepPauseWorker:
		return fmt.Sprintf("SIGSTOP worker %d, publish %s, SIGCONT it %s after the SIGSTOP", s.worker, burst(), s.pause)
	case stepSilenceLink:
		switch s.link {
		case linkAll:
			return fmt.Sprintf("worker %d's links to %s go silent without closing, publish %s, they speak again %s after", s.worker, s.link, burst(), s.pause)
		case linkBroker:
			return fmt.Sprintf("worker %d's link to broker %d goes silent without closing, publish %s, it speaks again %s after", s.worker, s.broker, burst(), s.pause)
		}
		return fmt.Sprintf("worker %d's link to %s goes silent without closing, publish %s, it speaks again %s after", s.worker, s.link, burst(), s.pause)
	case stepRotateReversedLate:
		hops := fmt.Sprintf("publish %d of %s, rotate to broker %d, publish the rest", (s.burst.Total()+1)/2, burst(), s.broker)
		if s.firstEmpty {
			hops = fmt.Sprintf("publish nothing, rotate to broker %d, publish %s", s.broker, burst())
		}
		return fmt.Sprintf("rotate to broker %d, %s, notify broker %d; once its hop committed or waits for broker %d, notify broker %d (late)",
			s.active, hops, s.broker, s.active, s.active)
	case stepPause:
		return fmt.Sprintf("let it run for %s", s.pause)
	case stepSettle:
		return fmt.Sprintf("wait until everything published is applied, broker %d active", s.active)
	case stepFinish:
		if s.force {
			return fmt.Sprintf("the operator forces a switch to broker %d; wait until everything is drained", s.active)
		}
		return fmt.Sprintf("wait until everything is drained, broker %d active", s.active)
	}
	return fmt.Sprintf("step %d", s.kind)
}

// faultKind names the fault or action a step injects, for the soak's table; "" for steps
// that inject nothing (waits, restores).
func (s step) faultKind() string {
	switch s.kind {
	case stepPublish:
		if s.burst.Poison > 0 {
			return "poison messages"
		}
		return "publish burst"
	case stepRetryTail:
		return "-retry tail"
	case stepRotateNow:
		return "rotate, notify in order"
	case stepRotateTwice:
		return "rotate, notify twice"
	case stepRotateLate:
		switch {
		case s.delay >= time.Minute:
			return "rotate, publish, notify minutes late"
		case s.twice:
			return "rotate, publish, notify late twice"
		case s.delay > 0:
			return "rotate, publish, notify seconds late"
		}
		return "rotate, notify late"
	case stepRotateSilent:
		return "rotate, never notify"
	case stepRotateReversed:
		return "double rotation, notified reversed"
	case stepForce:
		return "operator force"
	case stepCancel:
		if s.backlog {
			return "operator cancel with a backlog"
		}
		return "operator cancel"
	case stepCutBroker:
		return "broker cut (" + s.role + ")"
	case stepCutPostgres:
		return "Postgres cut"
	case stepRestartPostgres:
		return "Postgres restart"
	case stepStopTemporal:
		return "Temporal restart"
	case stepKillWorker:
		return "worker SIGKILL"
	case stepKillHolder:
		return "windows' holder SIGKILL"
	case stepTermWorker:
		return "worker SIGTERM"
	case stepAddWorker:
		return "two workers at once"
	case stepIsolateWorker:
		return "worker cut off from Temporal"
	case stepCutOffSlow:
		return "worker cut off from Temporal, its batch slow to settle"
	case stepForceHopReturn:
		if s.here {
			return "force to the producer's broker, a hop out of it, a return"
		}
		return "force away from the producer's broker, a hop out, a return"
	case stepCutOffDrain:
		return "worker cut off from Temporal in a Leftover Drain, its batch slow to settle"
	case stepPauseWorker:
		return "worker paused (SIGSTOP)"
	case stepSilenceLink:
		if s.link == linkAll {
			return "worker's links all silent"
		}
		return "worker's " + s.link + " link silent"
	case stepRotateReversedLate:
		if s.firstEmpty {
			return "double rotation, the first word after the hop committed"
		}
		return "double rotation, the first word after the hop waits for it"
	case stepFinish:
		if s.force {
			return "operator force"
		}
	}
	return ""
}

// schedule is a seed's timeline.
type schedule struct {
	seed  uint64
	opts  scheduleOptions
	steps []step
}

// String lists the steps, numbered.
func (sc schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule of seed %d (%d steps):", sc.seed, len(sc.steps))
	for i, st := range sc.steps {
		fmt.Fprintf(&b, "\n  %2d. %s", i+1, st)
	}
	return b.String()
}

// scheduleOptions shape what a generator may draw.
type scheduleOptions struct {
	// reversedDoubleRotation lets the generator draw a double rotation whose notifications
	// arrive newest first. The producer's trail places the late hop by its switchedAt, so
	// the oracle checks the order strictly; it is an option so that seeds pinned before the
	// trail existed still draw the schedules they drew then.
	reversedDoubleRotation bool
	// unsettled lets the generator draw what the docs promise about late and missing notifications without
	// settling first: a rotation whose notification comes seconds or minutes after the
	// producer's first publish there (once or twice), one never notified, and a cancel
	// while the active broker still has a backlog.
	unsettled bool
	// cuts lets the generator cut a spare while it holds leftovers, which docs/tables.md lists
	// among the orders not kept (the oracle excuses exactly what that spare held), and cut a
	// worker off from Temporal while its batch is slow to settle, which the window's fence
	// keeps in order.
	cuts bool
	// killHolder lets the generator SIGKILL the worker that holds the most windows, so
	// that a peer takes them over once its lease expires.
	killHolder bool
	// forceHops lets the generator draw a force followed by a hop out and a return to a
	// broker the producer used before, announced after it published there: the sequence
	// in which a spare's marks go stale (brokerstate.SpareMark).
	forceHops bool
	// drainCutOff lets the generator cut a worker off from Temporal while its Leftover
	// Drain holds a batch of a spare that waits on a held ledger: the drain's fence must
	// give the batch back before its successor reads the spare.
	drainCutOff bool
	// seenReturns: a rotation that publishes to a broker before announcing it (late,
	// never, or either hop of a reversed double rotation) waits, as it is played,
	// until the service has seen that broker empty since the producer left it or nothing
	// older waits, and is
	// drawn to a broker the producer used before only where the service can drain it
	// (Temporal, Postgres and a worker that reaches both, the broker not cut). Without it a producer back on a
	// broker we had not seen empty yet is what docs/tables.md says cannot be kept: what it
	// publishes there is taken for stragglers.
	seenReturns bool
	// holdsFirstBurst counts the schedule's first burst among what broker 0 holds, as
	// every later burst counts on its broker: without it a rotation could return to 0
	// before 0 was drained (A → B → A), which docs/tables.md says cannot be kept.
	holdsFirstBurst bool
	// pauses lets the generator SIGSTOP a worker beside a live one for slowMin to slowLong
	// (slowShort in a short schedule): its peers must read its queues again, and what it
	// does when it wakes must be refused or harmless.
	pauses bool
	// silentLinks lets the generator silence, without closing, a worker's link to
	// Postgres, to a broker, to Temporal, or all three, for as long as a pause lasts.
	silentLinks bool
	// lateFirstWord lets the generator draw a double rotation whose first word arrives
	// only once the second hop committed (nothing was published on the first broker) or
	// shows it waits for that broker (the commit hold).
	lateFirstWord bool
}

// modelWorker is a worker process as the model knows it.
type modelWorker struct {
	num      int
	isolated bool
}

// model is what the generator knows of the deployment: where the producer is, which
// brokers may still hold what it published, and which faults are in place. It draws only
// steps whose outcome the docs promise: no broker that may hold leftovers is cut while
// it is a spare, spares holding leftovers are in index order when a force makes them so,
// and a producer that publishes before notifying (or never) does so only once everything
// before was applied.
type model struct {
	rng      *rand.Rand
	opts     scheduleOptions
	steps    []step
	producer int
	// route is the route as the service will know it, from the broker it reads to the
	// producer's last notified broker.
	route []int
	// holds are the brokers published to since the last settle, in the producer's order.
	holds []int
	// unnotified: the producer's broker is not on the route (never notified, or cancelled).
	unnotified bool
	cut        map[int]bool
	pgCut      bool
	temporal   bool // the dev server runs
	workers    []modelWorker
	nextWorker int
	bursts     int
}

// generateSchedule draws the schedule of a seed.
func generateSchedule(seed uint64, opts scheduleOptions) schedule {
	m := &model{
		rng:        rand.New(rand.NewPCG(seed, 0x50a4)),
		opts:       opts,
		route:      []int{0},
		cut:        map[int]bool{},
		temporal:   true,
		workers:    []modelWorker{{num: 1}},
		nextWorker: 2,
	}
	n := 5 + m.rng.IntN(12)
	m.emit(step{kind: stepPublish, burst: m.burst(false)})
	if opts.holdsFirstBurst {
		m.published()
	}
	for len(m.steps) < n {
		m.draw()
	}
	m.healAll()
	m.emit(step{kind: stepFinish, active: m.producer, force: m.unnotified})
	sc := schedule{seed: seed, opts: opts, steps: m.steps}
	if sc.short() {
		sc.shortenSlowFaults()
	}
	return sc
}

// shortenSlowFaults scales every pause of a worker and every silent link of a short
// schedule from slowMin–slowLong down to slowMin–slowShort, so that `make test`'s
// schedules stay short; the seed still draws the same steps.
func (sc schedule) shortenSlowFaults() {
	for i, st := range sc.steps {
		if st.kind == stepPauseWorker || st.kind == stepSilenceLink {
			scale := float64(slowShort-slowMin) / float64(slowLong-slowMin)
			sc.steps[i].pause = slowMin + time.Duration(float64(st.pause-slowMin)*scale).Round(100*time.Millisecond)
		}
	}
}

// slowFault draws how long a worker is paused or a link silent, between slowMin and
// slowLong.
func (m *model) slowFault() time.Duration {
	return slowMin + time.Duration(m.rng.Int64N(int64(slowLong-slowMin)/int64(100*time.Millisecond)+1))*100*time.Millisecond
}

// shortSchedule tells the schedules `make test` runs: few steps, so that a few of them
// fit the CI budget.
func (sc schedule) short() bool { return len(sc.steps) <= 10 }

func (m *model) emit(s step) { m.steps = append(m.steps, s) }

// burst draws a workload of about 10 to 130 events, named after the seed's burst count so
// that bursts do not share entities.
func (m *model) burst(poison bool) simulate.Workload {
	m.bursts++
	u := 1 + m.rng.IntN(4)
	w := simulate.Workload{
		PullRequests: m.rng.IntN(u + 1), Issues: m.rng.IntN(u + 1), Pushes: m.rng.IntN(3*u + 1),
		Branches: m.rng.IntN(u), Installations: m.rng.IntN(u), Ignored: m.rng.IntN(u),
		Seed: m.rng.Uint64(), RunID: fmt.Sprintf("b%d", m.bursts),
	}
	if w.Total() == 0 {
		w.Pushes = 1
	}
	if poison {
		w.Poison = 1 + m.rng.IntN(5)
	}
	return w
}

// published notes a publish on the producer's broker.
func (m *model) published() {
	if !slices.Contains(m.holds, m.producer) {
		m.holds = append(m.holds, m.producer)
	}
}

// spare tells whether the service reads broker b only by the Leftover Drain.
func (m *model) spare(b int) bool { return !slices.Contains(m.route, b) }

// cuttable: any broker but a spare that may hold leftovers, which the Leftover Drain would
// skip while the active broker's newer events are applied; with scheduleOptions.cuts such a
// spare too (the oracle excuses what it holds), unless the producer publishes there.
func (m *model) cuttable(b int) bool {
	return !m.cut[b] && (!m.leftovers(b) || m.opts.cuts && b != m.producer)
}

// leftovers tells whether broker b is a spare that may hold what the producer published.
func (m *model) leftovers(b int) bool { return m.spare(b) && slices.Contains(m.holds, b) }

// fresh are the brokers a rotation may go to: neither on the route nor holding anything
// unapplied, so that no route is cut short and no spare holds two generations.
func (m *model) fresh() []int {
	var out []int
	for b := range soakBrokers {
		if b != m.producer && !slices.Contains(m.route, b) && !slices.Contains(m.holds, b) {
			out = append(out, b)
		}
	}
	return out
}

// forceable: a force to the producer's broker makes every other broker a spare; those
// that may hold leftovers must be reachable and, as spares are drained in index order,
// in the producer's order.
func (m *model) forceable() bool {
	if !m.temporal {
		return false
	}
	// With scheduleOptions.cuts, a force is drawn only where it can be applied at once (a
	// worker reaches Temporal and Postgres), and the harness waits until it is: the steps
	// after it are drawn for the route it makes. A force left waiting on Postgres while the
	// producer returned to the old active broker unannounced was A → B → A, an order
	// docs/tables.md says cannot be kept: the model would have drawn a schedule whose
	// outcome the service does not promise.
	if m.opts.cuts && (m.pgCut || m.healthyWorkers() == 0) {
		return false
	}
	last := -1
	for _, b := range m.holds {
		if b == m.producer {
			continue
		}
		if m.cut[b] || b < last {
			return false
		}
		last = b
	}
	return true
}

func (m *model) healthyWorkers() int {
	n := 0
	for _, w := range m.workers {
		if !w.isolated {
			n++
		}
	}
	return n
}

// draw appends one step, or a few when the chosen one needs the deployment settled first.
func (m *model) draw() {
	type choice struct {
		weight int
		do     func()
	}
	var choices []choice
	add := func(weight int, ok bool, do func()) {
		if ok {
			choices = append(choices, choice{weight, do})
		}
	}
	add(4, true, func() { m.emit(step{kind: stepPublish, burst: m.burst(false)}); m.published() })
	add(1, true, func() { m.emit(step{kind: stepPublish, burst: m.burst(true)}); m.published() })
	add(1, true, func() { m.emit(step{kind: stepRetryTail}); m.published() })
	fresh := m.fresh()
	// Once the producer went where it never told us, it is followed only by a force.
	rotate := !m.opts.unsettled || !m.unnotified
	if m.opts.unsettled {
		m.drawUnsettled(add, fresh)
	}
	add(3, rotate && len(fresh) > 0, func() {
		kind := stepRotateNow
		if m.rng.IntN(3) == 0 {
			kind = stepRotateTwice
		}
		to := fresh[m.rng.IntN(len(fresh))]
		m.emit(step{kind: kind, broker: to})
		m.producer, m.unnotified = to, false
		m.route = append(m.route, to)
	})
	// Publishing before notifying, or never, keeps the order only when nothing older waits:
	// the deployment settles first (docs/tables.md, "What order cannot be kept").
	add(1, rotate, func() {
		m.settle()
		to := m.fresh()[m.rng.IntN(len(m.fresh()))]
		m.emit(step{kind: stepRotateLate, broker: to, burst: m.burst(false)})
		m.producer, m.unnotified = to, false
		m.route = append(m.route, to)
		m.published()
	})
	add(1, rotate, func() {
		m.settle()
		to := m.fresh()[m.rng.IntN(len(m.fresh()))]
		m.emit(step{kind: stepRotateSilent, broker: to, burst: m.burst(false)})
		m.producer, m.unnotified = to, true
		m.published()
	})
	// After a settle the route is the producer's broker alone: two fresh brokers remain.
	add(1, m.opts.reversedDoubleRotation && !m.unnotified, func() {
		m.settle()
		fresh := m.fresh()
		first, second := fresh[0], fresh[1]
		if m.rng.IntN(2) == 0 {
			first, second = second, first
		}
		m.emit(step{kind: stepRotateReversed, active: first, broker: second, burst: m.burst(false)})
		m.producer = first
		m.published()
		m.producer, m.unnotified = second, false
		m.route = append(m.route, first, second)
	})
	add(1, m.forceable(), func() {
		m.emit(step{kind: stepForce, broker: m.producer})
		m.route, m.unnotified = []int{m.producer}, false
		m.cutLeftoversSoon()
	})
	// A cancel keeps the order when the active broker is empty (docs/design.md): it follows a
	// settle, with the active broker cut so that the switch waits for the cancel.
	add(1, rotate, func() {
		m.settle()
		from := m.route[0]
		to := m.fresh()[m.rng.IntN(len(m.fresh()))]
		m.emit(step{kind: stepCancel, active: from, broker: to, burst: m.burst(false)})
		m.producer, m.unnotified = to, true
		m.published()
	})
	var cuttable []int
	for b := range soakBrokers {
		if m.cuttable(b) {
			cuttable = append(cuttable, b)
		}
	}
	add(3, len(cuttable) > 0, func() {
		b := cuttable[m.rng.IntN(len(cuttable))]
		role := "spare"
		switch {
		case b == m.route[0]:
			role = "active"
		case !m.spare(b):
			role = "on the route"
		case m.leftovers(b):
			role = roleLeftovers
		}
		m.emit(step{kind: stepCutBroker, broker: b, role: role})
		m.cut[b] = true
	})
	add(3, len(m.cut) > 0, func() {
		b := m.anyCut()
		m.emit(step{kind: stepRestoreBroker, broker: b})
		delete(m.cut, b)
	})
	add(1, !m.pgCut, func() { m.emit(step{kind: stepCutPostgres}); m.pgCut = true })
	add(3, m.pgCut, func() { m.emit(step{kind: stepRestorePostgres}); m.pgCut = false })
	add(1, !m.pgCut, func() { m.emit(step{kind: stepRestartPostgres}) })
	add(1, m.temporal, func() { m.emit(step{kind: stepStopTemporal}); m.temporal = false })
	add(3, !m.temporal, func() { m.emit(step{kind: stepStartTemporal}); m.temporal = true })
	add(2, true, func() {
		kind := stepKillWorker
		if m.rng.IntN(2) == 0 {
			kind = stepTermWorker
		}
		i := m.rng.IntN(len(m.workers))
		s := step{kind: kind, worker: m.workers[i].num, next: m.nextWorker}
		m.workers[i] = modelWorker{num: m.nextWorker}
		m.nextWorker++
		m.emit(s)
	})
	// The holder is found by its lease, which needs Postgres and Temporal; a peer must be
	// there to take its windows over.
	add(2, m.opts.killHolder && m.temporal && !m.pgCut && m.healthyWorkers() >= 2, func() {
		m.emit(step{kind: stepKillHolder})
	})
	add(1, len(m.workers) < 3, func() {
		m.emit(step{kind: stepAddWorker, next: m.nextWorker})
		m.workers = append(m.workers, modelWorker{num: m.nextWorker})
		m.nextWorker++
	})
	// An isolated worker is meant to be taken over while it still runs: another worker
	// must be there to do it.
	add(2, m.healthyWorkers() >= 2, func() {
		var healthy []int
		for i, w := range m.workers {
			if !w.isolated {
				healthy = append(healthy, i)
			}
		}
		i := healthy[m.rng.IntN(len(healthy))]
		m.workers[i].isolated = true
		m.emit(step{kind: stepIsolateWorker, worker: m.workers[i].num})
	})
	// The held batch must be one a window took: the producer's broker is read (announced,
	// nothing cut), and another worker reaches Temporal to take the window over.
	add(2, m.opts.cuts && m.temporal && !m.pgCut && len(m.cut) == 0 && !m.unnotified && m.healthyWorkers() >= 2, func() {
		m.emit(step{kind: stepCutOffSlow, burst: m.burst(false)})
		m.published()
	})
	if m.opts.forceHops {
		m.drawForceHop(add, rotate)
	}
	m.drawSlow(add, rotate)
	// After the settle the producer's broker is active and read, the other two are fresh,
	// and every worker reaches Temporal: a peer takes the cut-off worker's drain over.
	add(2, m.opts.drainCutOff && rotate && len(m.workers) >= 2, func() {
		m.settle()
		from := m.producer
		to := m.fresh()[m.rng.IntN(len(m.fresh()))]
		m.emit(step{kind: stepCutOffDrain, active: from, broker: to, burst: m.burst(false)})
		// The step ends once everything it published is applied.
		m.producer = to
		m.route = []int{to}
		m.emit(step{kind: stepSettle, active: to})
	})
	add(3, m.healthyWorkers() < len(m.workers), func() {
		for i, w := range m.workers {
			if w.isolated {
				m.workers[i].isolated = false
				m.emit(step{kind: stepRejoinWorker, worker: w.num})
				return
			}
		}
	})
	add(3, true, func() {
		m.emit(step{kind: stepPause, pause: time.Duration(500+m.rng.IntN(4000)) * time.Millisecond})
	})

	total := 0
	for _, c := range choices {
		total += c.weight
	}
	r := m.rng.IntN(total)
	for _, c := range choices {
		if r < c.weight {
			c.do()
			return
		}
		r -= c.weight
	}
}

// drawForceHop adds the choice of scheduleOptions.forceHops, after a settle: nothing older
// waits, and all three brokers take part. Either the producer moves to a broker unannounced
// and the operator forces the switch there (here), or the operator forces a switch to a
// broker the producer is not on, which makes the producer's broker a spare read by the
// Leftover Drain while the producer goes on publishing there (docs/tables.md: after a
// force the operator's hand wins, and the forced broker is empty). Then the producer hops
// to the third broker, announced, and returns to a broker it used before, publishing
// there before its notification: a spare seen empty after the producer left it, whose
// new messages are its future and wait for that notification.
func (m *model) drawForceHop(add func(int, bool, func()), rotate bool) {
	add(1, rotate, func() {
		m.settle()
		from := m.producer
		fresh := m.fresh()
		forced := fresh[m.rng.IntN(len(fresh))]
		hop := fresh[0] + fresh[1] - forced
		st := step{kind: stepForceHopReturn, active: from, broker: forced, hop: hop, here: m.rng.IntN(2) == 0,
			burst: m.burst(false), hopBurst: m.burst(false), backBurst: m.burst(false),
			delay: time.Duration(1000+m.rng.IntN(3000)) * time.Millisecond}
		// The producer returns to a broker it published to: its own before the force,
		// or, when it moved to the forced one, that one.
		st.back = from
		if st.here && m.rng.IntN(2) == 0 {
			st.back = forced
		}
		m.emit(st)
		m.producer = st.back
		m.route = []int{hop, st.back}
		m.holds = []int{hop, st.back}
	})
}

// drawSlow adds the choices of scheduleOptions.pauses, silentLinks and lateFirstWord: a
// world that is slow rather than dead.
func (m *model) drawSlow(add func(int, bool, func()), rotate bool) {
	// A peer must be there to read the worker's queues while it is paused or cut off: one
	// more worker is started first when none is.
	slowable := m.healthyWorkers() >= 2 || len(m.workers) < 3
	slowWorker := func() int {
		if m.healthyWorkers() < 2 {
			m.emit(step{kind: stepAddWorker, next: m.nextWorker})
			m.workers = append(m.workers, modelWorker{num: m.nextWorker})
			m.nextWorker++
		}
		var healthy []int
		for _, w := range m.workers {
			if !w.isolated {
				healthy = append(healthy, w.num)
			}
		}
		return healthy[m.rng.IntN(len(healthy))]
	}
	add(2, m.opts.pauses && slowable, func() {
		w := slowWorker()
		m.emit(step{kind: stepPauseWorker, worker: w, pause: m.slowFault(), burst: m.burst(false)})
		m.published()
	})
	add(2, m.opts.silentLinks && slowable, func() {
		w := slowWorker()
		links := []string{linkPostgres, linkBroker, linkTemporal, linkAll}
		st := step{kind: stepSilenceLink, worker: w, link: links[m.rng.IntN(len(links))], pause: m.slowFault(), burst: m.burst(false)}
		if st.link == linkBroker {
			st.broker = m.rng.IntN(soakBrokers)
		}
		m.emit(st)
		m.published()
	})
	// As the reversed double rotation, after a settle: two fresh brokers remain. The
	// harness waits for the second hop, which needs Temporal, Postgres and a worker.
	add(1, m.opts.lateFirstWord && rotate && !m.unnotified, func() {
		m.settle()
		fresh := m.fresh()
		first, second := fresh[0], fresh[1]
		if m.rng.IntN(2) == 0 {
			first, second = second, first
		}
		st := step{kind: stepRotateReversedLate, active: first, broker: second, burst: m.burst(false), firstEmpty: m.rng.IntN(2) == 0}
		m.emit(st)
		if st.firstEmpty {
			// The hop to the second commits over the empty first broker, which its late
			// word leaves a spare, empty.
			m.route = append(m.route, second)
		} else {
			m.producer = first
			m.published()
			m.route = append(m.route, first, second)
		}
		m.producer, m.unnotified = second, false
		m.published()
	})
}

// drawUnsettled adds the choices of scheduleOptions.unsettled: the orders the producer's
// notifications keep even when they come late, or never, with older events still waiting.
func (m *model) drawUnsettled(add func(int, bool, func()), fresh []int) {
	if m.opts.seenReturns {
		// Only a broker the service can drain is seen empty.
		fresh = slices.DeleteFunc(slices.Clone(fresh), func(b int) bool { return m.used(b) && (!m.drains() || m.cut[b]) })
	}
	ok := !m.unnotified && len(fresh) > 0
	add(2, ok, func() {
		to := fresh[m.rng.IntN(len(fresh))]
		st := step{kind: stepRotateLate, broker: to, burst: m.burst(false),
			delay: time.Duration(1000+m.rng.IntN(7000)) * time.Millisecond, twice: m.rng.IntN(3) == 0}
		if m.rng.IntN(6) == 0 {
			st.delay = time.Duration(60+m.rng.IntN(60)) * time.Second
		}
		m.emit(st)
		m.producer = to
		m.route = append(m.route, to)
		m.published()
	})
	add(1, ok, func() {
		to := fresh[m.rng.IntN(len(fresh))]
		m.emit(step{kind: stepRotateSilent, broker: to, burst: m.burst(false)})
		m.producer, m.unnotified = to, true
		m.published()
	})
	// The active broker cut makes the switch wait for the cancel; the route's brokers and
	// the new one become spares ahead of it. The cancel is the workflow's to apply: it
	// needs Temporal, and a worker that reaches it and Postgres.
	add(1, ok && !m.cut[m.route[0]] && m.temporal && !m.pgCut && m.healthyWorkers() > 0, func() {
		to := fresh[m.rng.IntN(len(fresh))]
		m.emit(step{kind: stepCancel, active: m.route[0], broker: to, burst: m.burst(false), backlog: true})
		m.route = m.route[:1]
		m.producer, m.unnotified = to, true
		m.published()
		m.cutLeftoversSoon()
	})
}

// drains tells whether the service can drain a spare now: Temporal runs, Postgres is
// reachable, and a worker reaches both.
func (m *model) drains() bool { return m.temporal && !m.pgCut && m.healthyWorkers() > 0 }

// used tells whether the producer has published to broker b, or been told to, in the
// steps so far: a return there is read by the broker's marks.
func (m *model) used(b int) bool {
	if b == 0 {
		return true
	}
	for _, s := range m.steps {
		switch s.kind {
		case stepRotateNow, stepRotateTwice, stepRotateLate, stepRotateSilent, stepCancel, stepCutOffDrain:
			if s.broker == b {
				return true
			}
		case stepRotateReversed, stepForceHopReturn, stepRotateReversedLate:
			if s.broker == b || s.active == b || s.hop == b {
				return true
			}
		}
	}
	return false
}

// cutLeftoversSoon: with scheduleOptions.cuts, half the time, cut at once one of the spares
// a force or a cancel just left holding leftovers, while its drain has most likely not
// ended (a cut drawn later finds most spares drained already).
func (m *model) cutLeftoversSoon() {
	if !m.opts.cuts || m.rng.IntN(2) == 0 {
		return
	}
	var spares []int
	for b := range soakBrokers {
		if m.leftovers(b) && m.cuttable(b) {
			spares = append(spares, b)
		}
	}
	if len(spares) == 0 {
		return
	}
	b := spares[m.rng.IntN(len(spares))]
	m.emit(step{kind: stepCutBroker, broker: b, role: roleLeftovers})
	m.cut[b] = true
}

// anyCut is the lowest cut broker, so that the draw does not depend on map order.
func (m *model) anyCut() int {
	for b := range soakBrokers {
		if m.cut[b] {
			return b
		}
	}
	return -1
}

// healAll restores every fault, in a fixed order.
func (m *model) healAll() {
	for len(m.cut) > 0 {
		b := m.anyCut()
		m.emit(step{kind: stepRestoreBroker, broker: b})
		delete(m.cut, b)
	}
	if m.pgCut {
		m.emit(step{kind: stepRestorePostgres})
		m.pgCut = false
	}
	if !m.temporal {
		m.emit(step{kind: stepStartTemporal})
		m.temporal = true
	}
	for i, w := range m.workers {
		if w.isolated {
			m.workers[i].isolated = false
			m.emit(step{kind: stepRejoinWorker, worker: w.num})
		}
	}
}

// settle heals every fault and waits until everything published so far is applied: the
// service then reads the last broker of the route, and no broker holds anything.
func (m *model) settle() {
	m.healAll()
	m.route = m.route[len(m.route)-1:]
	m.holds = nil
	m.emit(step{kind: stepSettle, active: m.route[0]})
}
