//go:build integration

package e2e

// The soak: random fault schedules (soak_schedule_test.go) played against the real
// service, each checked by the oracle. `make test` plays a few short schedules from seeds
// drawn at random; `make soak` plays them for SOAK_DURATION and writes the table to
// SOAK.md; SOAK_SEED replays one schedule. Every seed that found a bug stays as a
// regression in TestSoakRegressions.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/brokerswitch/brokerswitch/activities"
	"github.com/brokerswitch/brokerswitch/brokerstate"
	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/stacktest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/simulate"
	"github.com/brokerswitch/brokerswitch/workflows"
)

// reversedDoubleRotation lets schedules draw a double rotation whose notifications arrive
// newest first: the producer's trail places the middle broker on the route by its
// switchedAt (brokerstate/trail.go). Seeds recorded before it was on keep their options.
const reversedDoubleRotation = true

// unsettledSchedules lets schedules draw late and lost notifications and cancels without
// settling first. Seeds recorded before it was on keep their options.
const unsettledSchedules = true

// cutSchedules lets schedules cut a spare while it holds leftovers, and a worker off from
// Temporal while its batch is slow to settle. Seeds recorded before it was on
// keep their options.
const cutSchedules = true

// forceHopSchedules lets schedules draw a force followed by a hop out and a return to an
// old broker, and drainCutOffSchedules a worker cut off from Temporal in the middle of a
// Leftover Drain. Seeds recorded before they were on keep their options.
const (
	forceHopSchedules    = true
	drainCutOffSchedules = true
)

// seenReturnSchedules makes a rotation that publishes before announcing a broker wait
// until the service has seen that broker empty since the producer left it
// (scheduleOptions.seenReturns), and firstBurstHeld counts the first burst among what
// broker 0 holds (scheduleOptions.holdsFirstBurst). Seeds recorded before they were on
// keep their options.
const (
	seenReturnSchedules = true
	firstBurstHeld      = true
)

// pausedWorkers lets schedules SIGSTOP a worker, silentLinkSchedules silence a worker's
// links without closing them, and lateFirstWordSchedules send a double rotation's first
// word after its second hop committed or while that hop waits for it
// (soak_slow_test.go). Seeds recorded before they were on keep their options.
const (
	pausedWorkers          = true
	silentLinkSchedules    = true
	lateFirstWordSchedules = true
)

// soakOptions are the options TestSoak draws its schedules with.
func soakOptions() scheduleOptions {
	return scheduleOptions{reversedDoubleRotation: reversedDoubleRotation, unsettled: unsettledSchedules, cuts: cutSchedules, killHolder: true,
		forceHops: forceHopSchedules, drainCutOff: drainCutOffSchedules, seenReturns: seenReturnSchedules, holdsFirstBurst: firstBurstHeld,
		pauses: pausedWorkers, silentLinks: silentLinkSchedules, lateFirstWord: lateFirstWordSchedules}
}

// soakShortSchedules is how many short schedules `make test` plays: each takes under a
// minute on two cores.
const soakShortSchedules = 3

// soakEnv is a soak deployment's configuration: short windows and timeouts, so that what
// a fault sets off (a window retried on another worker, a stop that settles) plays out
// within a schedule.
func soakEnv() map[string]string {
	env := map[string]string{
		"CONSUMER_WINDOW":     "5s",
		"WORKER_STOP_TIMEOUT": "10s",
	}
	// SOAK_LOG_LEVEL=debug, with SOAK_KEEP, leaves a failed seed's replay the workers'
	// whole story.
	if level := os.Getenv("SOAK_LOG_LEVEL"); level != "" {
		env["LOG_LEVEL"] = level
	}
	return env
}

// TestSoak plays random fault schedules and checks each with the oracle. Without
// SOAK_SEED or SOAK_DURATION it plays soakShortSchedules short ones, as `make test` does.
func TestSoak(t *testing.T) {
	t.Parallel() // it mostly waits for its processes: it overlaps the other waiting tests
	opts := soakOptions()
	tally := newSoakTally()
	tally.load = loadAverage()
	began := time.Now()
	var seeds []uint64
	if v := os.Getenv("SOAK_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "SOAK_SEED")
		seeds = append(seeds, seed)
	}
	var until time.Time
	if v := os.Getenv("SOAK_DURATION"); v != "" && len(seeds) == 0 {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "SOAK_DURATION")
		until = began.Add(d)
	}
	if len(seeds) == 0 && until.IsZero() {
		for len(seeds) < soakShortSchedules {
			if seed := rand.Uint64(); generateSchedule(seed, opts).short() {
				seeds = append(seeds, seed)
			}
		}
	}
	t.Logf("soak seeds: %v (replay one with SOAK_SEED=<seed> go test -tags integration -run 'TestSoak$' ./e2e/)", seeds)
	play := func(seed uint64) {
		sc := generateSchedule(seed, opts)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { playSchedule(t, sc, tally) })
	}
	for _, seed := range seeds {
		play(seed)
	}
	for !until.IsZero() && time.Now().Before(until) {
		play(tally.nextSeed(opts))
	}
	tally.took = time.Since(began)
	tally.print(os.Stdout)
	if path := os.Getenv("SOAK_REPORT"); path != "" {
		require.NoError(t, tally.writeReport(path, os.Getenv("SOAK_DURATION")))
	}
}

// soakTally adds up what the soak did, for its table.
type soakTally struct {
	schedules, failed       int
	failedSeeds             []uint64
	published               int
	lost, duplicated, order int
	// excused counts the deliveries applied after newer ones where docs/tables.md says the
	// order cannot be kept, each named by its schedule (excuses).
	excused  int
	faults   map[string]int
	restarts int
	took     time.Duration
	// load is the load average when the soak began: the machine is shared.
	load string
}

func newSoakTally() *soakTally { return &soakTally{faults: map[string]int{}} }

// nextSeed draws a seed at random, preferring, among a few drawn, one whose schedule
// injects something the soak has not injected yet: a long soak then injects every kind
// early. Each seed still draws its own schedule, so any can be replayed.
func (s *soakTally) nextSeed(opts scheduleOptions) uint64 {
	first := rand.Uint64()
	for seed, tries := first, 0; tries < 50; seed, tries = rand.Uint64(), tries+1 {
		for _, st := range generateSchedule(seed, opts).steps {
			if k := st.faultKind(); k != "" && s.faults[k] == 0 {
				return seed
			}
		}
	}
	return first
}

// print writes the soak's table.
func (s *soakTally) print(w io.Writer) {
	fmt.Fprintln(w, "\nsoak: random fault schedules checked by the oracle")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "duration\t%s\n", s.took.Round(time.Second))
	fmt.Fprintf(tw, "schedules run\t%d (%d failed %v)\n", s.schedules, s.failed, s.failedSeeds)
	fmt.Fprintf(tw, "events published\t%d\n", s.published)
	fmt.Fprintf(tw, "lost / duplicated / reordered\t%d / %d / %d\n", s.lost, s.duplicated, s.order)
	fmt.Fprintf(tw, "applied after newer events, excused by docs/tables.md\t%d\n", s.excused)
	fmt.Fprintf(tw, "workers restarted after exiting on their own\t%d\n", s.restarts)
	for _, k := range s.kinds() {
		fmt.Fprintf(tw, "injected: %s\t%d\n", k, s.faults[k])
	}
	tw.Flush()
}

func (s *soakTally) kinds() []string { return slices.Sorted(maps.Keys(s.faults)) }

// Markers of the part of SOAK.md that writeReport rewrites; the rest is written by hand.
const (
	soakTableBegin = "<!-- soak table: written by make soak -->"
	soakTableEnd   = "<!-- end of soak table -->"
)

// writeReport writes the table into SOAK.md between its markers, or a new SOAK.md with
// the table alone.
func (s *soakTally) writeReport(path, duration string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", soakTableBegin)
	fmt.Fprintf(&b, "`make soak SOAK_DURATION=%s` on %s (load average %s at the start: the machine is shared), finished %s UTC.\n\n",
		duration, hostDescription(), s.load, time.Now().UTC().Format("2006-01-02 15:04"))
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| duration | %s |\n", s.took.Round(time.Second))
	fmt.Fprintf(&b, "| schedules run | %d |\n", s.schedules)
	fmt.Fprintf(&b, "| schedules failed | %d %v |\n", s.failed, s.failedSeeds)
	fmt.Fprintf(&b, "| events published | %d |\n", s.published)
	fmt.Fprintf(&b, "| lost | %d |\n| duplicated | %d |\n| reordered | %d |\n", s.lost, s.duplicated, s.order)
	fmt.Fprintf(&b, "| applied after newer events where docs/tables.md excuses it (a spare cut while it holds leftovers) | %d |\n", s.excused)
	fmt.Fprintf(&b, "| workers restarted after exiting on their own | %d |\n", s.restarts)
	fmt.Fprintf(&b, "\n| injected | count |\n|---|---|\n")
	for _, k := range s.kinds() {
		fmt.Fprintf(&b, "| %s | %d |\n", k, s.faults[k])
	}
	fmt.Fprintf(&b, "%s\n", soakTableEnd)
	table := b.String()

	out := "# Soak\n\n" + table
	if old, err := os.ReadFile(path); err == nil {
		text := string(old)
		i, j := strings.Index(text, soakTableBegin), strings.Index(text, soakTableEnd)
		if i >= 0 && j > i {
			out = text[:i] + table + strings.TrimPrefix(text[j+len(soakTableEnd):], "\n")
		}
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		return fmt.Errorf("write the soak report: %w", err)
	}
	return nil
}

// loadAverage is the first field of /proc/loadavg, "?" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	load, _, _ := strings.Cut(string(b), " ")
	return load
}

// hostDescription says what the soak ran on.
func hostDescription() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s (%d CPUs)", host, runtime.NumCPU())
}

// soakWorker is a worker process of a schedule, with the proxy through which it alone
// reaches Temporal.
type soakWorker struct {
	num   int
	proc  *process
	proxy *testenv.Proxy
	// gone: the schedule killed or stopped it; otherwise an exit is a crash, and the
	// worker is started again as a supervisor (Kubernetes, Compose) would.
	gone bool
	// isolated: its Temporal proxy is cut.
	isolated bool
	started  time.Time
	restarts int
	// links are the worker's own proxies, env the environment that sends it through them.
	links workerLinks
	env   map[string]string
}

// soakRun plays one schedule.
type soakRun struct {
	t       *testing.T
	s       *stack
	dev     *dedicatedTemporal
	p       *simulate.Producer
	log     string
	workers map[int]*soakWorker
	tally   *soakTally
	// seqs is, for each step played, the producer's last sequence number before it;
	// began when it began.
	seqs  []int64
	began []time.Time
	sc    schedule
	// cut are the brokers whose proxy is cut.
	cut map[int]bool
	// logs are the log files of every worker process started, restarts included.
	logs []string
}

// playSchedule builds a deployment of its own (three brokers behind proxies, Postgres
// behind a proxy, a Temporal dev server it can restart), plays every step, and checks the
// result with the oracle.
func playSchedule(t *testing.T, sc schedule, tally *soakTally) {
	tally.schedules++
	t.Cleanup(func() {
		if t.Failed() {
			tally.failed++
			tally.failedSeeds = append(tally.failedSeeds, sc.seed)
			t.Logf("SOAK FAILURE of seed %d; replay: SOAK_SEED=%d go test -tags integration -count=1 -run 'TestSoak$' -v ./e2e/\n%s", sc.seed, sc.seed, sc)
		}
	})
	t.Logf("%s", sc)
	dev := startDedicatedTemporal(t)
	s := newStackWith(t, stacktest.Options{Brokers: soakBrokers, PGProxy: true, Temporal: dev.target(t), Env: soakEnv()})
	// The stack's cleanups replay the histories: Temporal must run, whatever the schedule
	// left when it failed.
	t.Cleanup(func() {
		if !dev.Up() {
			dev.start(t)
		}
	})
	r := &soakRun{t: t, s: s, dev: dev, workers: map[int]*soakWorker{}, tally: tally, sc: sc, cut: map[int]bool{}}
	r.p, r.log = s.producer(nil)
	// Registered after the stack's cleanups, so run before them: the database and the
	// logs are still there.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if r.dev.Up() {
			t.Logf("pending activities as the schedule failed:\n%s", r.pendingActivities())
		}
		if dir := os.Getenv("SOAK_KEEP"); dir != "" {
			r.keep(filepath.Join(dir, fmt.Sprintf("seed-%d", sc.seed)))
		}
	})
	r.startWorker(1)
	for i, st := range sc.steps {
		t.Logf("step %d: %s", i+1, st)
		r.began = append(r.began, time.Now())
		r.seqs = append(r.seqs, r.lastSeq())
		r.supervise()
		r.do(i, st)
		if k := st.faultKind(); k != "" {
			tally.faults[k]++
		}
	}
}

// do plays one step.
func (r *soakRun) do(i int, st step) {
	ctx := context.Background()
	t, s, p := r.t, r.s, r.p
	switch st.kind {
	case stepPublish:
		require.NoError(t, p.Publish(ctx, s.workload(st.burst)...))
	case stepRetryTail:
		tail := s.workload(simulate.Workload{Issues: 1, RunID: fmt.Sprintf("tail%d", i)})[0]
		tail.RoutingKey = "issues-retry"
		require.NoError(t, p.PublishTo(ctx, p.Active(), tail))
	case stepRotateNow, stepRotateTwice:
		n := r.rotate(st.broker)
		r.notify(n)
		if st.kind == stepRotateTwice {
			r.notify(n)
		}
	case stepRotateLate:
		n := r.rotateUnannounced(st.broker)
		require.NoError(t, p.Publish(ctx, s.workload(st.burst)...))
		time.Sleep(st.delay) // the notification is late: what the step is about
		r.notify(n)
		if st.twice {
			r.notify(n)
		}
	case stepRotateSilent:
		r.rotateUnannounced(st.broker)
		require.NoError(t, p.Publish(ctx, s.workload(st.burst)...))
	case stepRotateReversed:
		msgs := s.workload(st.burst)
		first := r.rotateUnannounced(st.active)
		require.NoError(t, p.Publish(ctx, msgs[:len(msgs)/2]...))
		second := r.rotateUnannounced(st.broker)
		require.NoError(t, p.Publish(ctx, msgs[len(msgs)/2:]...))
		r.notify(second)
		r.notify(first)
	case stepForce:
		r.force(st.broker)
		if r.sc.opts.cuts {
			r.waitActive(st.broker)
		}
	case stepCancel:
		r.cancel(st)
	case stepCutBroker:
		if st.role == roleLeftovers {
			held := 0
			for _, n := range s.Counts(st.broker, s.Config.Queues...) {
				held += n
			}
			t.Logf("broker %d holds %d messages as it is cut", st.broker, held)
		}
		r.cutBroker(st.broker)
	case stepRestoreBroker:
		r.restoreBroker(st.broker)
	case stepCutPostgres:
		s.PGProxy.Cut()
	case stepRestorePostgres:
		s.PGProxy.Restore(t)
	case stepRestartPostgres:
		r.restartPostgres()
	case stepStopTemporal:
		r.dev.stop(t)
	case stepStartTemporal:
		r.dev.start(t)
	case stepKillWorker:
		w := r.workers[st.worker]
		w.gone = true
		w.proc.Kill()
		r.startWorker(st.next)
	case stepTermWorker:
		w := r.workers[st.worker]
		w.gone = true
		w.proc.Stop()
		r.startWorker(st.next)
	case stepKillHolder:
		r.killHolder()
	case stepAddWorker:
		r.startWorker(st.next)
	case stepIsolateWorker:
		r.workers[st.worker].proxy.Cut()
		r.workers[st.worker].isolated = true
	case stepRejoinWorker:
		r.workers[st.worker].proxy.Restore(t)
		r.workers[st.worker].isolated = false
	case stepCutOffSlow:
		r.cutOffSlow(st)
	case stepForceHopReturn:
		r.forceHopReturn(st)
	case stepCutOffDrain:
		r.cutOffDrain(st)
	case stepPauseWorker:
		r.pauseWorker(st)
	case stepSilenceLink:
		r.silenceLink(st)
	case stepRotateReversedLate:
		r.rotateReversedLate(st)
	case stepPause:
		// The faults in place must last: nothing is awaited, time passes.
		time.Sleep(st.pause)
	case stepSettle:
		r.waitSettled(st.active)
	case stepFinish:
		if st.force {
			r.force(st.active)
		}
		r.finish(st.active)
	default:
		t.Fatalf("step kind %d is not played", st.kind)
	}
}

// waitActive waits until broker b is active with nothing pending: a forced switch, or a
// switch announced, applied.
func (r *soakRun) waitActive(b int) {
	r.t.Helper()
	r.s.waitUntil(fmt.Sprintf("broker %d active, nothing pending", b), 2*time.Minute, func() (bool, string) {
		r.supervise()
		st := r.s.State()
		return st.ActiveIndex == b && st.Pending == nil, fmt.Sprintf("active %d, pending %v", st.ActiveIndex, st.Pending != nil)
	})
}

// forceHopReturn plays stepForceHopReturn: a force, a hop out announced, and a return to
// an old broker announced only after the producer published there. The return waits
// until every queue of that broker was seen empty after the producer left it
// (waitSeenEmpty), whatever the schedule's options: the step is drawn only with
// scheduleOptions.forceHops. Nothing is excused: the oracle checks the order strictly.
func (r *soakRun) forceHopReturn(st step) {
	t, s, p := r.t, r.s, r.p
	ctx := context.Background()
	if st.here {
		r.rotateUnannounced(st.broker)
		require.NoError(t, p.Publish(ctx, s.workload(st.burst)...))
		r.force(st.broker)
		r.waitActive(st.broker)
	} else {
		r.force(st.broker)
		r.waitActive(st.broker)
		require.NoError(t, p.Publish(ctx, s.workload(st.burst)...))
	}
	r.notify(r.rotate(st.hop))
	require.NoError(t, p.Publish(ctx, s.workload(st.hopBurst)...))
	r.waitActive(st.hop)
	r.waitSeenEmpty(st.back)
	n := r.rotate(st.back)
	require.NoError(t, p.Publish(ctx, s.workload(st.backBurst)...))
	time.Sleep(st.delay) // the notification is late: what the step is about
	r.notify(n)
}

// rotateUnannounced is rotate for a rotation that publishes to broker to before the
// producer announces it: with scheduleOptions.seenReturns it first waits for
// waitSeenEmpty.
func (r *soakRun) rotateUnannounced(to int) simulate.Notice {
	r.t.Helper()
	if r.sc.opts.seenReturns {
		r.waitSeenEmpty(to)
	}
	return r.rotate(to)
}

// waitSeenEmpty waits until what the producer publishes on broker b ahead of its word
// cannot overtake an older event: no queue of b would be read as stragglers, as the
// Leftover Drain reads it (brokerstate.State.ReadSpare, from the marks the drains
// wrote: b was never left, or was seen empty since the producer left it), or everything
// published so far is applied. Otherwise, docs/tables.md says, what it publishes there
// is taken for stragglers and applied at once, ahead of older events still waiting.
func (r *soakRun) waitSeenEmpty(b int) {
	t, s := r.t, r.s
	t.Helper()
	began := time.Now()
	s.waitUntil(fmt.Sprintf("broker %d seen empty since the producer left it, on every queue", b), 2*time.Minute, func() (bool, string) {
		r.supervise()
		state := s.State()
		var waiting []string
		for _, q := range s.Config.Queues {
			marks, reached, err := s.Store.SpareMarks(context.Background(), q)
			require.NoError(t, err)
			reading := state.ReadSpare(b, state.CurrentMark(b, marks[b]), state.CurrentMark(b, reached[b]), time.Now(), config.DefaultUnnotifiedBrokerGrace)
			if reading == brokerstate.ReadStragglers {
				waiting = append(waiting, q)
			}
		}
		if len(waiting) > 0 && s.settled(expect(r.p.Records())) {
			return true, ""
		}
		return len(waiting) == 0, fmt.Sprintf("read as stragglers: %v, and older events wait", waiting)
	})
	if waited := time.Since(began); waited > 100*time.Millisecond {
		t.Logf("broker %d returned to after %s: seen empty since the producer left it, or nothing older waits", b, waited.Round(10*time.Millisecond))
	}
}

// rotate moves the producer to broker to; the notification is the step's to send.
func (r *soakRun) rotate(to int) simulate.Notice {
	r.t.Helper()
	n, err := r.p.Rotate(context.Background(), to)
	require.NoError(r.t, err)
	return n
}

// notify sends a notification as the producer does. With the Temporal dev server down the
// API records it and answers 502 (the workflow reads Postgres again on its own); anything
// else but 200 and 202 fails the schedule.
func (r *soakRun) notify(n simulate.Notice) {
	r.t.Helper()
	res, err := r.p.Notify(context.Background(), n)
	if err != nil && res.Status == http.StatusBadGateway && !r.dev.Up() {
		r.t.Logf("notification recorded while Temporal is down: %s", res.Body)
		return
	}
	require.NoError(r.t, err)
}

// force asks the operator's forced switch over HTTP. When it is not committed within the
// API's wait (no worker reaches Temporal and Postgres meanwhile), the operator sends it
// again as a signal, which the workflow applies once it runs.
func (r *soakRun) force(to int) {
	r.t.Helper()
	status, body := r.s.Call(http.MethodPost, fmt.Sprintf("/api/v1/broker/switch/%d", to), stacktest.OperatorToken, "")
	switch status {
	case http.StatusOK:
	case http.StatusGatewayTimeout, http.StatusBadGateway:
		r.t.Logf("forced switch answered %d (%s); sent again as a signal", status, strings.TrimSpace(body))
		r.s.Signal(workflows.SignalForceSwitch, activities.ForceSwitchInput{Index: to, AskedAt: time.Now().UTC()})
	default:
		r.t.Fatalf("forced switch to %d answered %d: %s", to, status, body)
	}
}

// cancel plays the operator's cancel where it keeps the order: the active broker is empty
// (a settle came before) and cut, so that the producer's switch waits for the cancel.
func (r *soakRun) cancel(st step) {
	r.t.Helper()
	s := r.s
	active, already := st.active, false
	if st.backlog {
		active, already = r.cutActive(st.active)
	} else {
		r.cutBroker(active)
	}
	r.notify(r.rotate(st.broker))
	s.waitFor("the pending switch recorded", 30*time.Second, func() bool { return s.State().Pending != nil })
	require.NoError(r.t, r.p.Publish(context.Background(), s.workload(st.burst)...))
	// The operator asks again when the workflow has not answered within the API's wait (a
	// starved worker fails its workflow tasks meanwhile): a cancel names the switch it
	// cancels, and with nothing pending it changes nothing.
	s.waitUntil("the cancel", time.Minute, func() (bool, string) {
		status, body := s.Call(http.MethodDelete, "/api/v1/broker/pending-switch", stacktest.OperatorToken, "")
		switch status {
		case http.StatusOK, http.StatusAccepted, http.StatusGatewayTimeout:
		default:
			r.t.Fatalf("the cancel answered %d: %s", status, body)
		}
		return s.State().Pending == nil, fmt.Sprintf("the cancel answered %d: %s", status, strings.TrimSpace(body))
	})
	require.Equal(r.t, active, s.State().ActiveIndex, "a cancel does not move")
	if !already {
		r.restoreBroker(active)
	}
}

// cutActive cuts the broker the service reads now, for a cancel with a backlog: the
// schedule drew the cancel while the switch to the last hop of the route was still
// pending (drawn) but the model cannot know whether that switch committed since. The
// broker stays cut if it was already (already).
func (r *soakRun) cutActive(drawn int) (active int, already bool) {
	r.t.Helper()
	for {
		before := r.s.State()
		active = before.ActiveIndex
		already = r.cut[active]
		r.cutBroker(active)
		if r.holdsSwitch(active, before.LastDrainCheck) {
			if active != drawn {
				r.t.Logf("the service reads broker %d, not broker %d as drawn: the switch away from %d committed", active, drawn, drawn)
			}
			return active, already
		}
		r.t.Logf("the switch away from broker %d committed as it was cut (on a drain check that counted it before); cutting the broker it moved to", active)
		if !already {
			r.restoreBroker(active)
		}
	}
}

// holdsSwitch waits until the cut broker active holds the switch away from it, and says
// whether it does (false: the switch committed meanwhile). A drain check that counted the
// broker empty before the cut still commits after it, so the cut holds only once nothing
// is pending or a drain check newer than prev found the broker unreachable: the workflow
// checks and commits one hop at a time, so no earlier count is still on its way.
func (r *soakRun) holdsSwitch(active int, prev *brokerstate.DrainCheck) bool {
	r.t.Helper()
	var st brokerstate.State
	r.s.waitUntil(fmt.Sprintf("a drain check of cut broker %d", active), time.Minute, func() (bool, string) {
		st = r.s.State()
		c := st.LastDrainCheck
		switch {
		case st.ActiveIndex != active, st.Pending == nil:
			return true, ""
		case c != nil && c.BrokerIndex == active && !c.Reachable && (prev == nil || !c.CheckedAt.Equal(prev.CheckedAt)):
			return true, ""
		}
		return false, fmt.Sprintf("last drain check %+v", c)
	})
	// Read once with the condition: once it holds, nothing can commit the hop while the
	// broker stays cut, so a later read would say the same.
	return st.ActiveIndex == active
}

// cutBroker cuts broker b's proxy, noting it; restoreBroker restores it.
func (r *soakRun) cutBroker(b int) {
	r.s.Proxies[b].Cut()
	r.cut[b] = true
}

func (r *soakRun) restoreBroker(b int) {
	r.t.Helper()
	if r.cut[b] {
		r.s.Proxies[b].Restore(r.t)
		delete(r.cut, b)
	}
}

// restartPostgres ends every worker connection, as a restart does, and takes new ones at
// once. The server itself is shared with the other tests on this machine, so it is not
// restarted: to the workers the two look the same.
func (r *soakRun) restartPostgres() {
	s := r.s
	s.PGProxy.Cut()
	s.waitUntil("the worker's Postgres backends to end", 30*time.Second, func() (bool, string) {
		n := s.workerBackends()
		return n == 0, fmt.Sprintf("%d left", n)
	})
	s.PGProxy.Restore(r.t)
}

// startWorker starts worker num with links of its own (workerLinks).
func (r *soakRun) startWorker(num int) {
	r.t.Helper()
	links, env := r.newWorkerLinks()
	w := &soakWorker{num: num, proxy: links.temporal, links: links, env: env}
	r.workers[num] = w
	r.launch(w)
}

// killHolder SIGKILLs the worker, not isolated, that the leases show holding the most
// windows, and starts it again: its peers take its windows over once its lease expires.
func (r *soakRun) killHolder() {
	held := r.s.windowsHeld()
	var victim *soakWorker
	for _, num := range r.workerNums() {
		w := r.workers[num]
		if w.gone || w.isolated || w.proc.Exited() {
			continue
		}
		if victim == nil || count(held, w.proc.identity()) > count(held, victim.proc.identity()) {
			victim = w
		}
	}
	if victim == nil {
		return
	}
	victim.proc.Kill()
	victim.restarts++
	r.launch(victim)
}

func (r *soakRun) launch(w *soakWorker) {
	name := fmt.Sprintf("worker-%d", w.num)
	if w.restarts > 0 {
		name += fmt.Sprintf("-restart-%d", w.restarts)
	}
	w.proc = r.s.startWorkerProcessWith(name, w.env)
	w.started = time.Now()
	r.logs = append(r.logs, w.proc.Log)
}

// keep copies what a failed schedule leaves behind into dir (SOAK_KEEP): every worker's
// log, the producer's log, the steps with the time each began, and the ledger's and the
// typed rows' writes and the switches in commit order, with Postgres' time of each.
func (r *soakRun) keep(dir string) {
	t := r.t
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("SOAK_KEEP: %v", err)
		return
	}
	for _, path := range append(slices.Clone(r.logs), r.log) {
		if b, err := os.ReadFile(path); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o644)
		}
	}
	var steps strings.Builder
	for i, at := range r.began {
		fmt.Fprintf(&steps, "%s step %d: %s\n", at.UTC().Format("15:04:05.000"), i+1, r.sc.steps[i])
	}
	_ = os.WriteFile(filepath.Join(dir, "steps.txt"), []byte(steps.String()), 0o644)
	dump := func(name, query string) {
		rows, err := r.s.DB.Raw(query).Rows()
		if err != nil {
			t.Logf("SOAK_KEEP %s: %v", name, err)
			return
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var b strings.Builder
		b.WriteString(strings.Join(cols, "\t") + "\n")
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				break
			}
			for i, v := range vals {
				if i > 0 {
					b.WriteString("\t")
				}
				if tm, ok := v.(time.Time); ok {
					v = tm.UTC().Format("15:04:05.000000")
				}
				fmt.Fprint(&b, v)
			}
			b.WriteString("\n")
		}
		_ = os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644)
	}
	dump("audit.tsv", `SELECT a.id, a.at, a.tx, a.tbl, a.key, a.delivery_id, d.queue, d.broker_index
		FROM test_audit a LEFT JOIN github_deliveries d ON d.delivery_id = a.delivery_id ORDER BY a.id`)
	dump("switches.tsv", "SELECT id, value FROM test_switches ORDER BY id")
	dump("settings.tsv", "SELECT * FROM settings")
	dump("spare_marks.tsv", "SELECT * FROM spare_marks")
	if r.dev.Up() {
		var trails strings.Builder
		for _, q := range r.s.Config.Queues {
			fmt.Fprintf(&trails, "%s:\n  %s\n", q, strings.Join(r.s.windowTrail(q), "\n  "))
		}
		_ = os.WriteFile(filepath.Join(dir, "windows.txt"), []byte(trails.String()), 0o644)
		_ = os.WriteFile(filepath.Join(dir, "pending.txt"), []byte(r.pendingActivities()), 0o644)
	}
	t.Logf("SOAK_KEEP: the failed schedule's logs and tables are in %s", dir)
}

// pendingActivities lists, for every long-running workflow, the activities Temporal shows
// pending and which worker it last handed each to: a schedule that stood still shows an
// attempt started on a worker that does not run it, or one no worker polls for.
func (r *soakRun) pendingActivities() string {
	ids := []string{workflows.BrokerSwitchWorkflowID}
	for _, q := range r.s.Config.Queues {
		ids = append(ids, workflows.QueueWindowWorkflowID(q))
	}
	var b strings.Builder
	for _, id := range ids {
		desc, err := r.s.Temporal.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", id, err)
			continue
		}
		fmt.Fprintf(&b, "%s (run %s):\n", id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
		for _, pa := range desc.GetPendingActivities() {
			worker := "?"
			if w := r.workerOf(pa.GetLastWorkerIdentity()); w != nil {
				worker = strconv.Itoa(w.num)
			}
			fmt.Fprintf(&b, "  %s %s %s attempt %d, last worker %s (%s), started %s, last failure %q\n",
				pa.GetActivityId(), pa.GetActivityType().GetName(), pa.GetState(), pa.GetAttempt(), worker,
				pa.GetLastWorkerIdentity(), pa.GetLastStartedTime().AsTime().UTC().Format("15:04:05.000"),
				pa.GetLastFailure().GetMessage())
		}
	}
	return b.String()
}

// supervise starts again a worker that exited on its own: a worker started while Temporal
// or Postgres is away exits at once, and a supervisor restarts it, after a pause.
func (r *soakRun) supervise() {
	for _, num := range r.workerNums() {
		w := r.workers[num]
		if w.gone || !w.proc.Exited() || time.Since(w.started) < 2*time.Second {
			continue
		}
		r.t.Logf("worker %d exited on its own (%v); restarted", w.num, w.proc.Err())
		w.restarts++
		r.tally.restarts++
		r.launch(w)
	}
}

func (r *soakRun) workerNums() []int { return slices.Sorted(maps.Keys(r.workers)) }

// waitSettled waits until everything published so far is applied (poison in -error) and
// broker active is the active broker with nothing pending.
func (r *soakRun) waitSettled(active int) {
	r.t.Helper()
	s := r.s
	s.waitUntil(fmt.Sprintf("everything published applied and broker %d active", active), 2*time.Minute, func() (bool, string) {
		r.supervise()
		e := expect(r.p.Records())
		st := s.State()
		pending := "none"
		if st.Pending != nil {
			pending = fmt.Sprintf("%v", st.Pending.Route)
		}
		return s.settled(e) && st.ActiveIndex == active && st.Pending == nil,
			fmt.Sprintf("%d of %d good events in the ledger, active %d, pending %s", s.deliveries(), len(e.good), st.ActiveIndex, pending)
	})
}

// finish waits until everything is drained with the active broker where the producer is,
// then runs the oracle.
func (r *soakRun) finish(active int) {
	r.t.Helper()
	require.Equal(r.t, active, r.p.Active(), "the schedule ends where the producer is")
	r.waitSettled(active)
	ex := excuses(r.sc, r.seqs)
	v := r.s.verifyExcusing(r.log, time.Minute, ex)
	r.t.Logf("EXCUSED seed=%d %s", r.sc.seed, v.excusedLine(ex))
	r.tally.excused += v.Excused
	r.tally.published += v.Published
	r.tally.lost += v.Lost
	r.tally.duplicated += v.Duplicates
	r.tally.order += v.OrderViolations
	r.s.report(v, "-")
}

// soakRegression is a seed whose schedule found a bug, with the options it was drawn with
// (turning reversedDoubleRotation on changes what a seed draws) and the schedule as it was
// drawn then: should the generator change, the seed would draw another schedule and test
// nothing in particular, so the test fails instead and asks for a new seed of the bug.
type soakRegression struct {
	seed     uint64
	opts     scheduleOptions
	bug      string
	schedule string
}

// soakRegressions are the bugs the soak found, each replayed by `make test`.
func soakRegressions() []soakRegression {
	return []soakRegression{{
		seed: 4046107636596888648,
		bug: "a notification recorded while Temporal was down waited an hour: the idle watch saw it, " +
			"its answer was lost with Temporal away, and without a heartbeat nothing failed it",
		schedule: `schedule of seed 4046107636596888648 (15 steps):
   1. publish 9 events
   2. publish 60 events
   3. publish 9 events with 4 poison
   4. let it run for 4.139s
   5. let it run for 951ms
   6. stop the Temporal dev server
   7. publish 19 events
   8. rotate to broker 2 and notify
   9. start the Temporal dev server again
  10. wait until everything published is applied, broker 2 active
  11. rotate to broker 0, publish 48 events there, then notify late
  12. cut broker 2 (active)
  13. start worker 2 beside the others
  14. restore broker 2
  15. wait until everything is drained, broker 0 active`,
	}, {
		seed: 3650416446803315636,
		bug: "the harness, not the service: on a starved machine (load 14 on 2 CPUs) the BrokerSwitch " +
			"workflow's tasks failed the SDK's 1 s deadlock detector for over 45 s, the operator's cancel " +
			"was answered 504 and the schedule failed; the operator now asks again, as the API's answer says",
		schedule: `schedule of seed 3650416446803315636 (17 steps):
   1. publish 23 events
   2. wait until everything published is applied, broker 0 active
   3. rotate to broker 2, publish 25 events there, then notify late
   4. let it run for 1.999s
   5. wait until everything published is applied, broker 2 active
   6. cut the active broker 2, rotate to broker 1 and notify, publish 18 events, the operator cancels the pending switch, restore broker 2
   7. cut the workers off from Postgres
   8. let the workers reach Postgres again
   9. cut broker 0 (spare)
  10. restore broker 0
  11. cut broker 0 (spare)
  12. restore broker 0
  13. publish 69 events
  14. wait until everything published is applied, broker 2 active
  15. cut the active broker 2, rotate to broker 0 and notify, publish 27 events, the operator cancels the pending switch, restore broker 2
  16. the operator forces a switch to broker 0, where the producer is
  17. wait until everything is drained, broker 0 active`,
	}, {
		seed: 13092512888517572527,
		opts: scheduleOptions{reversedDoubleRotation: true},
		bug: "a poison message copied to -error twice: the broker confirmed the copy, the connection was cut " +
			"before the original's ack reached it, and the redelivered original was copied again; the copy and " +
			"the ack now commit in one AMQP transaction",
		schedule: `schedule of seed 13092512888517572527 (10 steps):
   1. publish 75 events
   2. let it run for 2.243s
   3. publish 11 events with 5 poison
   4. cut broker 2 (spare)
   5. cut broker 0 (active)
   6. restore broker 0
   7. restore broker 2
   8. wait until everything published is applied, broker 0 active
   9. rotate to broker 2, publish 49 events there, then notify late
  10. wait until everything is drained, broker 2 active`,
	}, {
		seed: 4123488167245989217,
		opts: scheduleOptions{reversedDoubleRotation: true, unsettled: true},
		bug: "issues-error on broker 0 held one poison message twice: its copy was confirmed, the active broker " +
			"was cut (step 13) before the original's ack, and the redelivered original was copied again; drawn " +
			"before the copy and the ack committed in one AMQP transaction, and clean since",
		schedule: `schedule of seed 4123488167245989217 (18 steps):
   1. publish 23 events
   2. the operator forces a switch to broker 0, where the producer is
   3. publish 10 events with 4 poison
   4. publish 2 events with 3 poison
   5. cut the workers off from Postgres
   6. SIGKILL worker 1, start worker 2
   7. publish 56 events
   8. stop the Temporal dev server
   9. publish 5 events
  10. let the workers reach Postgres again
  11. rotate to broker 1 and notify twice
  12. rotate to broker 2 without notifying, publish 65 events there
  13. cut broker 0 (active)
  14. SIGKILL worker 2, start worker 3
  15. let it run for 2.727s
  16. restore broker 0
  17. start the Temporal dev server again
  18. the operator forces a switch to broker 2; wait until everything is drained`,
	}, {
		seed: 835,
		opts: scheduleOptions{reversedDoubleRotation: true, unsettled: true, cuts: true},
		bug: "the harness, not the service: a cancel with a backlog cut the broker the model took for the active " +
			"one, but the switch away from it had committed meanwhile (the model cannot know how fast a backlog " +
			"drains), so the pending switch was not held and the cancel 'moved'; the cancel now cuts the broker the " +
			"service reads, and then waits for a drain check that finds it cut: a check that counted it empty just " +
			"before the cut committed the hop just after it (seen on a fresh machine's CI, 2026-12-07)",
		schedule: `schedule of seed 835 (8 steps):
   1. publish 83 events
   2. let it run for 1.147s
   3. rotate to broker 1, publish 35 events there, notify twice after 4.757s
   4. let it run for 4.348s
   5. cut the broker the service reads (broker 0, unless its switch committed), rotate to broker 2 and notify, publish 23 events, the operator cancels the pending switch, restore the cut broker
   6. cut broker 1 (spare holding leftovers)
   7. restore broker 1
   8. the operator forces a switch to broker 2; wait until everything is drained`,
	}, {
		seed: 12136938564412898988,
		opts: scheduleOptions{reversedDoubleRotation: true, unsettled: true, cuts: true},
		bug: "the harness, not the service: a window fenced after its batch committed put the batch back " +
			"unsettled, and the oracle looked at the queues before another window had taken those messages " +
			"again and acknowledged them as duplicates; settled now waits for every queue to be empty",
		schedule: `schedule of seed 12136938564412898988 (8 steps):
   1. publish 14 events
   2. start worker 2 beside the others
   3. hold the ledger (a slow Postgres), publish 20 events, cut the worker whose window holds a batch off from Temporal, release the ledger once its window runs elsewhere, let it reach Temporal again
   4. cut broker 0 (active)
   5. cut worker 1 off from Temporal alone (it keeps RabbitMQ and Postgres)
   6. restore broker 0
   7. let worker 1 reach Temporal again
   8. wait until everything is drained, broker 0 active`,
	}, {
		seed: 14928533974141784647,
		opts: scheduleOptions{reversedDoubleRotation: true, unsettled: true, cuts: true, killHolder: true},
		bug: "a window kept consuming broker 0 after the switch away from it committed: the Postgres cut had " +
			"dropped its worker's LISTEN connection, its window started on 0 just before the commit, and the " +
			"producer returned to 0 at once; 0's new events were applied ahead of 2's (21 reordered) until the " +
			"state watcher's 10 s re-read ended the window; each consume batch's transaction now ends with a check " +
			"that holds the broker state's lock shared and fails unless its broker is still active (brokerstate.Store.ActiveCheck). " +
			"Later (2026-12-07) 9 pushes of broker 2 were applied after one of 0: a Leftover Drain between the unannounced " +
			"return to 0 and its word took 0's first new event for a straggler, the commit of 0 → 1 having cleared 0's marks; " +
			"the commit now dates as seen empty the queues its drain check saw idle (brokerstate.DrainCheck.Idle)",
		schedule: `schedule of seed 14928533974141784647 (14 steps):
   1. publish 34 events
   2. rotate to broker 1 and notify twice
   3. let it run for 1.258s
   4. cut the workers off from Postgres
   5. let it run for 3.769s
   6. let the workers reach Postgres again
   7. wait until everything published is applied, broker 1 active
   8. rotate to broker 2, publish 42 events, rotate to broker 0, notify broker 0 then broker 2 (reversed)
   9. wait until everything published is applied, broker 0 active
  10. rotate to broker 1, publish 37 events there, then notify late
  11. start worker 2 beside the others
  12. SIGKILL worker 2, start worker 3
  13. publish 34 events with 1 poison
  14. wait until everything is drained, broker 1 active`,
	}, {
		seed: 1842229863488799017,
		opts: scheduleOptions{reversedDoubleRotation: true, unsettled: true, cuts: true, killHolder: true, forceHops: true, drainCutOff: true, seenReturns: true},
		bug: "the generator, not the service: 123 ms after the switch away from broker 1 committed, the producer " +
			"returned to 1 unannounced (step 7) before any drain had seen 1 empty, which docs/tables.md says cannot " +
			"be kept: its new events were read as stragglers ahead of broker 0's leftovers (10 reordered); a " +
			"rotation that publishes before announcing a broker now waits until the service has seen it empty",
		schedule: `schedule of seed 1842229863488799017 (16 steps):
   1. publish 11 events
   2. rotate to broker 1, publish 51 events there, notify twice after 2.066s
   3. wait until everything published is applied, broker 1 active
   4. rotate to broker 0, publish 65 events, rotate to broker 2, notify broker 2 then broker 0 (reversed)
   5. publish 55 events
   6. the operator forces a switch to broker 2, where the producer is
   7. rotate to broker 1 without notifying, publish 27 events there
   8. SIGTERM worker 1, start worker 2
   9. the operator forces a switch to broker 1, where the producer is
  10. SIGKILL worker 2, start worker 3
  11. publish 24 events
  12. start worker 4 beside the others
  13. publish 34 events
  14. wait until everything published is applied, broker 1 active
  15. rotate to broker 2, publish 31 events, rotate to broker 0, notify broker 0 then broker 2 (reversed)
  16. wait until everything is drained, broker 0 active`,
	}, {
		seed: 4705365045541963028,
		opts: scheduleOptions{reversedDoubleRotation: true, unsettled: true, cuts: true, killHolder: true, forceHops: true, drainCutOff: true, seenReturns: true, holdsFirstBurst: true},
		bug: "the earlier hop's word came after the later one's, and broker 1 was empty: the hop 1 → 2 committed " +
			"at its first drain check while broker 0 held what the producer published there before it moved on, " +
			"and broker 0's late word then landed behind broker 2 (3 pull requests of 0 applied after a newer one " +
			"of 2); a drained broker's hop now waits while a spare holds messages no word places (brokerstate.State.CommitHold)",
		schedule: `schedule of seed 4705365045541963028 (17 steps):
   1. publish 27 events
   2. stop the Temporal dev server
   3. rotate to broker 2, publish 41 events there, notify once after 2.06s
   4. rotate to broker 1 and notify
   5. let it run for 2.502s
   6. put one issues event in issues-retry on the producer's broker (a -retry tail)
   7. put one issues event in issues-retry on the producer's broker (a -retry tail)
   8. start worker 2 beside the others
   9. start the Temporal dev server again
  10. wait until everything published is applied, broker 1 active
  11. rotate to broker 0, publish 18 events, rotate to broker 2, notify broker 2 then broker 0 (reversed)
  12. wait until everything published is applied, broker 2 active
  13. cut broker 2 (active), publish 11 events there, rotate to broker 0 without notifying, the operator forces a switch to it; hold the ledger (a slow Postgres), restore broker 2, cut the worker whose Leftover Drain holds a batch of it off from Temporal, release the ledger once the drain runs elsewhere, let it reach Temporal again
  14. wait until everything published is applied, broker 0 active
  15. cut worker 2 off from Temporal alone (it keeps RabbitMQ and Postgres)
  16. let worker 2 reach Temporal again
  17. wait until everything is drained, broker 0 active`,
	}}
}

// regressionsAtOnce is how many of TestSoakRegressions' seeds replay at once. Each has a
// stack of its own and mostly waits for its processes, so one after another they were
// the e2e package's long pole (430 s of its run); all at once, their worker processes
// would crowd a 2-core machine's other tests.
const regressionsAtOnce = 3

// TestSoakRegressions replays every seed that found a bug.
func TestSoakRegressions(t *testing.T) {
	t.Parallel() // as TestSoak
	slots := make(chan struct{}, regressionsAtOnce)
	for _, reg := range soakRegressions() {
		t.Run(fmt.Sprintf("seed=%d", reg.seed), func(t *testing.T) {
			t.Parallel()
			sc := generateSchedule(reg.seed, reg.opts)
			require.Equal(t, reg.schedule, sc.String(),
				"the generator no longer draws the schedule that found %q: find the bug's seed again", reg.bug)
			slots <- struct{}{}
			defer func() { <-slots }()
			// A tally of its own: nothing reads it, and the replays run side by side.
			playSchedule(t, sc, newSoakTally())
		})
	}
}

// lastSeq is the producer's last sequence number so far, 0 before the first publish.
func (r *soakRun) lastSeq() int64 {
	var last int64
	for _, rec := range r.p.Records() {
		last = max(last, rec.Seq)
	}
	return last
}

// excuses computes, from a schedule and the producer's sequence number before each step
// (seqs), the deliveries docs/tables.md lets be applied after newer ones. The generator draws
// one such case: a spare cut while it holds leftovers, which the window reads around (docs/tables.md,
// "What order cannot be kept", a spare that cannot be reached). What it held, everything
// published to it since the last settle, may follow newer events of other brokers.
func excuses(sc schedule, seqs []int64) []excuse {
	var out []excuse
	var settled int64
	for i, st := range sc.steps {
		if st.kind == stepSettle {
			settled = seqs[i]
		}
		if st.kind != stepCutBroker || st.role != roleLeftovers {
			continue
		}
		for k := i + 1; k < len(sc.steps); k++ {
			if sc.steps[k].kind == stepRestoreBroker && sc.steps[k].broker == st.broker {
				out = append(out, excuse{Broker: st.broker, From: settled, To: seqs[k],
					Why: fmt.Sprintf("cut at step %d as a spare holding leftovers, restored at step %d", i+1, k+1)})
				break
			}
		}
	}
	return out
}

// cutOffSlow plays stepCutOffSlow: with the ledger held, as a slow Postgres holds it, a
// window's batch waits in hand; its worker is cut off from Temporal, which gives the
// window to another worker once the worker's lease expires. The cut-off window must have
// fenced itself by then (stopped consuming, its batch given back unsettled): the ledger is
// released only once the window runs elsewhere, and what the cut-off window still did after
// that the oracle sees as a duplicate or a reorder.
func (r *soakRun) cutOffSlow(st step) {
	release := &ledgerHold{release: r.s.holdLedger()}
	defer release.once()
	require.NoError(r.t, r.p.Publish(context.Background(), r.s.workload(st.burst)...))
	r.cutOffHolder("", release)
}

// cutOffDrain plays stepCutOffDrain, cutOffSlow's case for a Leftover Drain: the active
// broker is cut while the producer publishes there and moves on unannounced, and the
// operator forces the switch to where it went, so that the cut broker holds a backlog
// that only the Leftover Drain reads. With the ledger held the broker comes back; a
// drain takes a batch of it, which waits on the ledger; its worker is cut off from
// Temporal, and the ledger is released once Temporal has given the drain to another
// worker. A drain cancels its consumer before it handles a batch, so the successor sees
// nobody on the queue: only the fence keeps it from reading behind that batch. The
// producer publishes nothing on the forced broker until the step's settle, so that the
// windows that read around the cut broker meanwhile (docs/tables.md: a spare that cannot
// be reached) apply nothing newer.
func (r *soakRun) cutOffDrain(st step) {
	t, s := r.t, r.s
	r.cutBroker(st.active)
	require.NoError(t, r.p.Publish(context.Background(), s.workload(st.burst)...))
	r.rotate(st.broker)
	r.force(st.broker)
	r.waitActive(st.broker)
	release := &ledgerHold{release: s.holdLedger()}
	defer release.once()
	r.restoreBroker(st.active)
	r.cutOffHolder("PrepareWindow", release)
}

// ledgerHold releases a held ledger once, whichever comes first: the step's release or
// its deferred one when the step fails.
type ledgerHold struct {
	release func()
	done    bool
}

func (h *ledgerHold) once() {
	if !h.done {
		h.done = true
		h.release()
	}
}

// cutOffHolder finds, through Temporal, a worker not cut off whose activity attempt
// (of activityType, any when "") holds a batch unacknowledged while the ledger is held,
// cuts it off from Temporal, waits until Temporal has given that activity to another
// attempt, releases the ledger, and lets the worker reach Temporal again.
func (r *soakRun) cutOffHolder(activityType string, ledger *ledgerHold) {
	t, s := r.t, r.s
	t.Helper()
	var holder *soakWorker
	var queue, activity, kind string
	var attempt int32
	s.waitUntil("a worker's "+cmp.Or(activityType, "window")+" to hold a batch the held ledger keeps unsettled", 2*time.Minute, func() (bool, string) {
		r.supervise()
		inHand := r.unacknowledged()
		for _, q := range s.Config.Queues {
			if inHand[q] == 0 {
				continue
			}
			desc, err := s.Temporal.DescribeWorkflowExecution(context.Background(), workflows.QueueWindowWorkflowID(q), "")
			if err != nil {
				return false, err.Error()
			}
			for _, pa := range desc.GetPendingActivities() {
				if pa.GetState() != enumspb.PENDING_ACTIVITY_STATE_STARTED ||
					activityType != "" && pa.GetActivityType().GetName() != activityType {
					continue
				}
				if w := r.workerOf(pa.GetLastWorkerIdentity()); w != nil && !w.isolated {
					holder, queue, activity, attempt, kind = w, q, pa.GetActivityId(), pa.GetAttempt(), pa.GetActivityType().GetName()
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("messages in hand: %v", inHand)
	})
	t.Logf("worker %d's window of %s holds a batch in %s (activity %s, attempt %d): cut off from Temporal", holder.num, queue, kind, activity, attempt)
	holder.proxy.Cut()
	holder.isolated = true
	cut := time.Now()
	s.waitUntil("the cut-off window to run on another worker", 3*time.Minute, func() (bool, string) {
		r.supervise()
		desc, err := s.Temporal.DescribeWorkflowExecution(context.Background(), workflows.QueueWindowWorkflowID(queue), "")
		if err != nil {
			return false, err.Error()
		}
		for _, pa := range desc.GetPendingActivities() {
			if pa.GetActivityId() == activity && pa.GetAttempt() == attempt {
				return false, fmt.Sprintf("activity %s attempt %d still %s on %s", activity, attempt, pa.GetState(), pa.GetLastWorkerIdentity())
			}
		}
		return true, ""
	})
	t.Logf("the window of %s left worker %d %s after the cut; the ledger is released", queue, holder.num, time.Since(cut).Round(100*time.Millisecond))
	ledger.once()
	holder.proxy.Restore(t)
	holder.isolated = false
}

// unacknowledged counts, per queue, the messages consumers hold unacknowledged on every
// broker (`rabbitmqctl list_queues messages_unacknowledged`).
func (r *soakRun) unacknowledged() map[string]int {
	r.t.Helper()
	out := map[string]int{}
	for _, vhost := range r.s.Vhosts {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		text, err := exec.CommandContext(ctx, "rabbitmqctl", "--quiet", "list_queues", "-p", vhost, "name", "messages_unacknowledged").Output()
		cancel()
		require.NoError(r.t, err, "rabbitmqctl list_queues")
		for _, line := range strings.Split(string(text), "\n") {
			fields := strings.Fields(line)
			if len(fields) != 2 {
				continue
			}
			if n, err := strconv.Atoi(fields[1]); err == nil {
				out[fields[0]] += n
			}
		}
	}
	return out
}

// workerOf finds the worker process a Temporal worker identity names: the SDK's default
// identity begins with the process id.
func (r *soakRun) workerOf(identity string) *soakWorker {
	for _, num := range r.workerNums() {
		w := r.workers[num]
		if !w.gone && strings.HasPrefix(identity, fmt.Sprintf("%d@", w.proc.Pid())) {
			return w
		}
	}
	return nil
}
