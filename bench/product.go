package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/brokerswitch/brokerswitch/broker"
	"github.com/brokerswitch/brokerswitch/ingest"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
	"github.com/brokerswitch/brokerswitch/workflows"
)

const switchID = workflows.BrokerSwitchWorkflowID

// runProduct is the service end to end: the events wait on a fresh vhost, a worker starts
// in this process (worker.Run, configured as e2e configures it) and the clock stops when
// the ledger holds every one of them as applied.
func runProduct(s *figure, events []payloads.Event, cpuProfile string, rtt time.Duration) throughput {
	ctx := context.Background()
	st := s.newStack(1, stackOptions{rtt: rtt, env: map[string]string{"CONSUMER_WINDOW": "1m", "DRAIN_CHECK_INTERVAL": "250ms"}})
	st.publish(0, events, nil)
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		s.check(err, "cpu profile")
		s.check(pprof.StartCPUProfile(f), "cpu profile")
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	meter := s.cpu.startCPU()
	began := time.Now()
	stop := st.StartWorker()
	s.check(st.waitApplied(ctx, int64(len(events)), 5*time.Minute), "product")
	elapsed := time.Since(began)
	cpu := meter.Stop()
	stop()
	if n := st.errors(ctx); n > 0 {
		s.Fatalf("%d deliveries ended in error", n)
	}
	first, _, err := st.appliedSpan(ctx)
	s.check(err, "ledger span")
	var lasts []struct {
		Queue string
		Last  time.Time
	}
	s.check(st.DB.WithContext(ctx).Raw("SELECT queue, max(applied_at) AS last FROM github_deliveries GROUP BY queue").Scan(&lasts).Error, "ledger")
	done := map[string]time.Duration{}
	for _, l := range lasts {
		done[l.Queue] = s.clock.mono(l.Last).Sub(began)
	}
	return throughput{N: len(events), Elapsed: elapsed, CPU: cpu, Startup: s.clock.mono(first).Sub(began), QueueDone: done,
		Batches: st.batches.summary(st.pgCounted)}
}

// lagConfig is one switch-lag scenario.
type lagConfig struct {
	Name          string
	DrainInterval string  // DRAIN_CHECK_INTERVAL
	Rate          float64 // events per second, steady
	Burst         int     // events published at once right before each rotation
	Rotations     int
	Epoch         time.Duration // steady publishing between a switch and the next rotation
}

// rotation is what one rotation measured.
type rotation struct {
	Lag    time.Duration // old broker's last applied → new broker's first applied
	Wait   time.Duration // producer's rotation → new broker's first applied
	Commit time.Duration // producer's rotation → switch committed (state seen by polling)
}

// lagResult is what one run of a lag scenario gives.
type lagResult struct {
	Rotations []rotation
	Events    int
	Traffic   snapshot // all brokers, the whole run after warm-up
	Dialed    []int    // TCP connections the worker opened to each broker over the run
	Footprint amqpFootprint
	History   historyCost
	CPU       cpuUse
	// Heartbeats and RPCs are the in-process worker's Temporal calls over Seconds.
	Heartbeats, RPCs int64
	Seconds          float64
}

// runLag drives a producer that publishes at a steady rate and rotates to the next of three
// brokers, notifying the service the way the API does, Rotations times. The lag of a
// rotation is the time from the moment the last event published to the old broker was
// applied (ledger applied_at) to the moment the first event published to the new one was.
func runLag(s *figure, cfg lagConfig) lagResult {
	ctx := context.Background()
	const brokers = 3
	st := s.newStack(brokers, stackOptions{count: true, env: map[string]string{"DRAIN_CHECK_INTERVAL": cfg.DrainInterval}})
	stop := st.StartWorker()

	// One producer rotates over the brokers; each Publish returns once confirmed, so every
	// publish to the old broker is confirmed before it moves on, as a producer that rotates
	// because the broker refused it would have them.
	producer := st.producer()
	// Warm up: the windows are consuming broker 0 once one event went through.
	s.check(producer.Publish(ctx, messages(nil, s.corpus(1)...)...), "warm-up")
	s.check(st.waitApplied(ctx, 1, time.Minute), "warm-up")
	trafficBefore := totalTraffic(st)
	rpcBefore := st.rpc.snapshot()
	meter := s.cpu.startCPU()

	// The producer goroutine publishes at cfg.Rate to the current broker; epochOf records,
	// for each delivery id, the epoch (rotation count) it was published in.
	var (
		mu       sync.Mutex
		epochOf  = map[string]int{}
		epoch    int
		produced atomic.Int64
		stopProd = make(chan struct{})
		prodDone = make(chan error, 1)
	)
	publish := func(evs ...payloads.Event) error {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			epochOf[ev.DeliveryID] = epoch
		}
		produced.Add(int64(len(evs)))
		return producer.Publish(ctx, messages(nil, evs...)...)
	}
	stream := &eventStream{c: s.corpusMaker}
	go func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
		defer tick.Stop()
		for {
			select {
			case <-stopProd:
				prodDone <- nil
				return
			case <-tick.C:
				if err := publish(stream.next()); err != nil {
					prodDone <- err
					return
				}
			}
		}
	}()

	var rots []rotation
	rotatedAt := make([]time.Time, cfg.Rotations+1)
	committedAt := make([]time.Time, cfg.Rotations+1)
	for i := 1; i <= cfg.Rotations; i++ {
		time.Sleep(cfg.Epoch)
		if cfg.Burst > 0 {
			s.check(publish(s.corpus(cfg.Burst)...), "burst")
		}
		next := i % brokers
		mu.Lock()
		_, err := producer.Rotate(ctx, next)
		epoch = i
		rotatedAt[i] = time.Now()
		mu.Unlock()
		s.check(err, "rotate")
		st.Notify(next, rotatedAt[i])
		s.check(testenv.WaitUntil(ctx, 2*time.Minute, fmt.Sprintf("switch %d to broker %d", i, next), func() (bool, error) {
			return st.switched(ctx, next)
		}), "switch")
		committedAt[i] = time.Now()
		// The next rotation starts once the new broker's events are being applied.
		s.check(testenv.WaitUntil(ctx, 2*time.Minute, "first event of the new broker applied", func() (bool, error) {
			var n int64
			mu.Lock()
			var ids []string
			for id, e := range epochOf {
				if e == i {
					ids = append(ids, id)
				}
			}
			mu.Unlock()
			if len(ids) == 0 {
				return false, nil
			}
			err := st.DB.WithContext(ctx).Raw("SELECT count(*) FROM github_deliveries WHERE delivery_id IN ? AND applied_at IS NOT NULL", ids).Scan(&n).Error
			return n > 0, err
		}), "new broker")
		s.logf("  %s: rotation %d/%d to broker %d committed after %s", cfg.Name, i, cfg.Rotations, next, committedAt[i].Sub(rotatedAt[i]).Round(time.Millisecond))
	}
	time.Sleep(cfg.Epoch)
	close(stopProd)
	s.check(<-prodDone, "producer")
	total := produced.Load() + 1 // and the warm-up event
	s.check(st.waitApplied(ctx, total, 2*time.Minute), "all applied")
	total-- // the figures count what was published after the warm-up
	cpu := meter.Stop()
	traffic := totalTraffic(st).minus(trafficBefore)
	var heartbeats, rpcs int64
	for method, n := range st.rpc.snapshot() {
		n -= rpcBefore[method]
		if !strings.HasPrefix(method, "Poll") { // long polls wait for work; they are not work
			rpcs += n
		}
		if method == "RecordActivityTaskHeartbeat" {
			heartbeats += n
		}
	}
	footprint, err := rabbitFootprint(st.Vhosts)
	s.check(err, "rabbitmqctl")

	applied, err := st.appliedTimes(ctx)
	s.check(err, "ledger")
	// applied_at is wall-clock time: placed on the monotonic clock, a step of the VM's wall
	// clock during the run does not become lag.
	lastOf, firstOf := map[int]time.Time{}, map[int]time.Time{}
	for id, e := range epochOf {
		wall, ok := applied[id]
		if !ok {
			s.Fatalf("delivery %s of epoch %d not applied", id, e)
		}
		at := s.clock.mono(wall)
		if l, ok := lastOf[e]; !ok || at.After(l) {
			lastOf[e] = at
		}
		if f, ok := firstOf[e]; !ok || at.Before(f) {
			firstOf[e] = at
		}
	}
	for i := 1; i <= cfg.Rotations; i++ {
		rots = append(rots, rotation{
			Lag:    firstOf[i].Sub(lastOf[i-1]),
			Wait:   firstOf[i].Sub(rotatedAt[i]),
			Commit: committedAt[i].Sub(rotatedAt[i]),
		})
	}
	stop()
	hist, err := collectHistory(ctx, st)
	s.check(err, "history")
	return lagResult{Rotations: rots, Events: int(total), Traffic: traffic, Dialed: dialed(st), Footprint: footprint, History: hist, CPU: cpu,
		Heartbeats: heartbeats, RPCs: rpcs, Seconds: cpu.Seconds}
}

// eventStream hands out the corpus one event at a time, in publishing order, so that a
// steady producer feeds every queue as the corpus does.
type eventStream struct {
	c   *corpusMaker
	buf []payloads.Event
}

func (e *eventStream) next() payloads.Event {
	if len(e.buf) == 0 {
		e.buf = e.c.corpus(len(e.c.templates))
	}
	ev := e.buf[0]
	e.buf = e.buf[1:]
	return ev
}

// dialed is how many TCP connections went through each broker's proxy.
func dialed(st *stack) []int {
	out := make([]int, len(st.frames))
	for i, p := range st.frames {
		out[i] = int(p.Connections.Load())
	}
	return out
}

func totalTraffic(st *stack) snapshot {
	var t snapshot
	for _, p := range st.frames {
		t = t.plus(p.snapshot())
	}
	return t
}

// catchUpResult is the 50k backlog at rotation.
type catchUpResult struct {
	Backlog, OnNew int
	Done           time.Duration // worker start → every event applied and the switch complete
	OldApplied     time.Duration // worker start → the old broker's last event applied
	SwitchDone     time.Duration // worker start → switch committed
	PeakRSSMB      float64
	Traffic        snapshot
	Dialed         []int
	Footprint      amqpFootprint
	History        historyCost
	CPU            cpuUse
	Publish        time.Duration
}

// runCatchUp leaves a backlog on the old broker and some events on the new one, records the
// producer's notification, then starts `brokerswitch worker` as its own process with
// default settings and waits until everything is applied and the switch completed. With
// rtt > 0 the worker reaches RabbitMQ and Postgres through delay proxies instead of the
// counting ones, so the frame counts stay empty.
func runCatchUp(s *figure, backlog, onNew int, rtt time.Duration) catchUpResult {
	ctx := context.Background()
	// Default CONSUMER_WINDOW, DRAIN_CHECK_INTERVAL, PREFETCH.
	st := s.newStack(2, stackOptions{count: rtt == 0, rtt: rtt})
	res := catchUpResult{Backlog: backlog, OnNew: onNew}
	began := time.Now()
	// Published in chunks so the corpus never sits whole in memory.
	p := st.producer()
	for left := backlog; left > 0; left -= 1000 {
		s.check(p.PublishTo(ctx, 0, messages(nil, s.corpus(min(left, 1000))...)...), "publish backlog")
	}
	s.check(p.PublishTo(ctx, 1, messages(nil, s.corpus(onNew)...)...), "publish to the new broker")
	_ = p.Close()
	res.Publish = time.Since(began)
	s.logf("  published %d + %d events in %s", backlog, onNew, res.Publish.Round(time.Millisecond))
	rotated := time.Now()
	st.Notify(1, rotated)

	meter := s.cpu.startCPU()
	began = time.Now()
	w := st.startWorkerProcess()
	var footprint amqpFootprint
	var sawFootprint atomic.Bool
	go func() {
		// While the backlog is consumed: the steady footprint of one worker process.
		time.Sleep(5 * time.Second)
		if fp, err := rabbitFootprint(st.Vhosts); err == nil {
			footprint = fp
			sawFootprint.Store(true)
		}
	}()
	total := int64(backlog + onNew)
	var switchSeen time.Time
	s.check(testenv.WaitUntil(ctx, 10*time.Minute, "the catch-up", func() (bool, error) {
		if switchSeen.IsZero() {
			if ok, err := st.switched(ctx, 1); err != nil || !ok {
				return false, err
			}
			switchSeen = time.Now()
		}
		n, err := st.applied(ctx)
		return n >= total, err
	}), "catch-up (worker log: "+w.Log+")")
	res.Done = time.Since(began)
	res.CPU = meter.Stop()
	res.PeakRSSMB = w.PeakRSSMB()
	res.Traffic = totalTraffic(st)
	res.Dialed = dialed(st)
	res.SwitchDone = switchSeen.Sub(began) // seen by polling every 50 ms
	var last time.Time
	err := st.DB.WithContext(ctx).Raw("SELECT max(applied_at) FROM github_deliveries WHERE broker_index = 0").Scan(&last).Error
	s.check(err, "ledger")
	res.OldApplied = s.clock.mono(last).Sub(began)
	if !sawFootprint.Load() {
		footprint, err = rabbitFootprint(st.Vhosts)
		s.check(err, "rabbitmqctl")
	}
	res.Footprint = footprint
	w.Stop()
	if n := st.errors(ctx); n > 0 {
		s.Fatalf("%d deliveries ended in error", n)
	}
	res.History, err = collectHistory(ctx, st)
	s.check(err, "history")
	return res
}

// drainResult is the Leftover Drain's own speed.
type drainResult struct {
	Raw, Ingest throughput
}

// ackAll is a BatchHandler that acks everything: the bare cost of the drain.
type ackAll struct{}

func (ackAll) HandleBatch(_ context.Context, _ string, ds []amqp.Delivery) ([]broker.Verdict, error) {
	return make([]broker.Verdict, len(ds)), nil // the zero Verdict is Ack
}

// runDrain measures broker.Pool.Drain (a consume per batch of PREFETCH=100, one
// multiple-ack per batch) on one queue holding n real events: once with a handler that only
// acks, once with the service's ingest handler writing the typed tables.
func runDrain(s *figure, n int) drainResult {
	ctx := context.Background()
	st := s.newStack(1, stackOptions{})
	const queue = "pull_requests"
	fill := func() []payloads.Event {
		evs := s.corpus(n)
		for i := range evs {
			evs[i].Queue = queue
		}
		st.publish(0, evs, nil)
		return evs
	}
	var res drainResult
	for _, h := range []struct {
		into    *throughput
		handler broker.BatchHandler
	}{
		{&res.Raw, ackAll{}},
		{&res.Ingest, (&ingest.Ingester{DB: st.DB, MaxRetryCycles: 3, Now: time.Now}).ForBroker(0)},
	} {
		fill()
		meter := s.cpu.startCPU()
		began := time.Now()
		taken, err := st.Direct.Drain(ctx, 0, queue, n, st.Config.Prefetch, h.handler)
		s.check(err, "drain")
		*h.into = throughput{N: taken, Elapsed: time.Since(began), CPU: meter.Stop()}
		if taken != n {
			s.Fatalf("drain took %d of %d", taken, n)
		}
	}
	return res
}

// capResult shows the 500-per-cycle cap in the running service.
type capResult struct {
	Leftover int
	Window   time.Duration
	PerCycle []int         // what each Leftover Drain of the queue took
	Cleared  time.Duration // worker start → the last leftover applied
}

// runCap leaves events on a broker that is neither active nor pending, so that only the
// Leftover Drain reads them, and runs the service with a short window: each window takes
// at most LEFTOVER_DRAIN_CAP of them, then consumes the (empty) active broker for the
// rest of the window.
func runCap(s *figure, leftover int, window time.Duration) capResult {
	ctx := context.Background()
	st := s.newStack(2, stackOptions{env: map[string]string{"CONSUMER_WINDOW": window.String()}})
	const queue = "pull_requests"
	evs := s.corpus(leftover)
	for i := range evs {
		evs[i].Queue = queue
	}
	// The producer never announced broker 1, so before UNNOTIFIED_BROKER_GRACE only what
	// came back is read there: these leftovers are messages moved back from -error, as
	// their headers say, as in TestLeftoverDrainStopsAtItsCap.
	st.publish(1, evs, amqp.Table{broker.HeaderRetryCycles: int64(1), broker.HeaderErrorQueue: queue,
		broker.HeaderErrorAt: time.Now().UTC().Format(time.RFC3339), broker.HeaderErrorReason: "moved back by an operator"})
	began := time.Now()
	stop := st.StartWorker()
	s.check(st.waitApplied(ctx, int64(leftover), 5*time.Minute), "leftovers applied")
	cleared := time.Since(began)
	stop()
	hist, err := collectHistory(ctx, st)
	s.check(err, "history")
	var per []int
	for _, n := range hist.LeftoverTaken {
		if n > 0 {
			per = append(per, n)
		}
	}
	return capResult{Leftover: leftover, Window: window, PerCycle: per, Cleared: cleared}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile is the nearest-rank percentile.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[max(0, min(rank, len(s)-1))]
}
