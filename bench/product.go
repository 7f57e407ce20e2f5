package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
	"github.com/brokerswitch/brokerswitch/payloads"
)

// runProduct is the service end to end: the events wait on a fresh vhost, a worker starts
// in this process (worker.Run, configured as e2e configures it) and the clock stops when
// the ledger holds every one of them as applied.
func runProduct(s *figure, events []payloads.Event, cpuProfile string, rtt time.Duration) throughput {
	st := s.newStack(1, stackOptions{rtt: rtt, env: map[string]string{"CONSUMER_WINDOW": "1m", "DRAIN_CHECK_INTERVAL": "250ms"}})
	st.publish(0, events, nil)
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		s.check(err, "cpu profile")
		s.check(pprof.StartCPUProfile(f), "cpu profile")
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	meter := startCPU()
	began := time.Now()
	stop := st.StartWorker()
	s.check(st.waitApplied(int64(len(events)), 5*time.Minute), "product")
	elapsed := time.Since(began)
	cpu := meter.Stop()
	stop()
	if n := st.InError(); n > 0 {
		s.Fatalf("%d deliveries ended in error", n)
	}
	var first time.Time
	s.check(st.DB.Raw("SELECT min(applied_at) FROM github_deliveries").Scan(&first).Error, "ledger")
	return throughput{N: len(events), Elapsed: elapsed, CPU: cpu, Startup: s.clock.mono(first).Sub(began),
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
	Lag  time.Duration // old broker's last applied → new broker's first applied
	Wait time.Duration // producer's rotation → new broker's first applied
}

// lagResult is what one run of a lag scenario gives.
type lagResult struct {
	Rotations []rotation
	Events    int
	Traffic   testenv.FrameSnapshot // all brokers, the whole run after warm-up
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
	s.check(st.waitApplied(1, time.Minute), "warm-up")
	trafficBefore := st.traffic.Snapshot()

	// The producer goroutine publishes at cfg.Rate to the current broker; byEpoch holds the
	// delivery ids published in each epoch (rotation count).
	var mu sync.Mutex
	epoch, byEpoch := 0, make([][]string, cfg.Rotations+1)
	publish := func(evs ...payloads.Event) error {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			byEpoch[epoch] = append(byEpoch[epoch], ev.DeliveryID)
		}
		return producer.Publish(ctx, messages(nil, evs...)...)
	}
	next := s.stream()
	stopProducer := atRate(cfg.Rate, func() error { return publish(next()) })

	rotatedAt := make([]time.Time, cfg.Rotations+1)
	for i := 1; i <= cfg.Rotations; i++ {
		time.Sleep(cfg.Epoch)
		if cfg.Burst > 0 {
			s.check(publish(s.corpus(cfg.Burst)...), "burst")
		}
		next := i % brokers
		// The new broker's earlier epochs were drained before the switches away from it.
		fromNext := st.AppliedFrom(next)
		mu.Lock()
		_, err := producer.Rotate(ctx, next)
		epoch = i
		rotatedAt[i] = time.Now()
		mu.Unlock()
		s.check(err, "rotate")
		st.Notify(next, rotatedAt[i])
		s.check(testenv.WaitUntil(ctx, 2*time.Minute, fmt.Sprintf("switch %d to broker %d", i, next), func() (bool, error) {
			return st.Switched(next), nil
		}), "switch")
		committed := time.Since(rotatedAt[i])
		// The next rotation starts once the new broker's events are being applied.
		s.check(testenv.WaitUntil(ctx, 2*time.Minute, "first event of the new broker applied", func() (bool, error) {
			return st.AppliedFrom(next) > fromNext, nil
		}), "new broker")
		s.logf("  %s: rotation %d/%d to broker %d committed after %s", cfg.Name, i, cfg.Rotations, next, committed.Round(time.Millisecond))
	}
	time.Sleep(cfg.Epoch)
	_, err := stopProducer()
	s.check(err, "producer")
	total := 0 // published after the warm-up
	for _, ids := range byEpoch {
		total += len(ids)
	}
	s.check(st.waitApplied(int64(total)+1, 2*time.Minute), "all applied")
	traffic := st.traffic.Snapshot().Minus(trafficBefore)
	// applied_at is wall-clock time: placed on the monotonic clock, a step of the VM's wall
	// clock during the run does not become lag.
	applied := st.appliedTimes()
	firstOf, lastOf := make([]time.Time, cfg.Rotations+1), make([]time.Time, cfg.Rotations+1)
	for e, ids := range byEpoch {
		for _, id := range ids {
			wall, ok := applied[id]
			if !ok {
				s.Fatalf("delivery %s of epoch %d not applied", id, e)
			}
			at := s.clock.mono(wall)
			if firstOf[e].IsZero() || at.Before(firstOf[e]) {
				firstOf[e] = at
			}
			if at.After(lastOf[e]) {
				lastOf[e] = at
			}
		}
	}
	var rots []rotation
	for i := 1; i <= cfg.Rotations; i++ {
		rots = append(rots, rotation{
			Lag:  firstOf[i].Sub(lastOf[i-1]),
			Wait: firstOf[i].Sub(rotatedAt[i]),
		})
	}
	stop()
	return lagResult{Rotations: rots, Events: total, Traffic: traffic}
}

// catchUpResult is the 50k backlog at rotation.
type catchUpResult struct {
	Backlog, OnNew int
	Done           time.Duration // worker start → every event applied and the switch complete
	OldApplied     time.Duration // worker start → the old broker's last event applied
	SwitchDone     time.Duration // worker start → switch committed
	PeakRSSMB      float64
	Traffic        testenv.FrameSnapshot
	CPU            cpuUse
	Publish        time.Duration
}

// runCatchUp leaves a backlog on the old broker and some events on the new one, records the
// producer's notification, then starts `brokerswitch worker` as its own process with
// default settings and waits until everything is applied and the switch completed.
func runCatchUp(s *figure, backlog, onNew int) catchUpResult {
	ctx := context.Background()
	// Default CONSUMER_WINDOW, DRAIN_CHECK_INTERVAL, PREFETCH.
	st := s.newStack(2, stackOptions{count: true})
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
	st.Notify(1, time.Now())

	meter := startCPU()
	began = time.Now()
	w := st.startWorkerProcess(nil)
	total := int64(backlog + onNew)
	var switchSeen time.Time
	s.check(testenv.WaitUntil(ctx, 10*time.Minute, "the catch-up", func() (bool, error) {
		if switchSeen.IsZero() {
			if !st.Switched(1) {
				return false, nil
			}
			switchSeen = time.Now()
		}
		return st.Applied() >= total, nil
	}), "catch-up (worker log: "+w.Log+")")
	res.Done = time.Since(began)
	res.CPU = meter.Stop()
	res.PeakRSSMB = w.PeakRSSMB()
	res.Traffic = st.traffic.Snapshot()
	res.SwitchDone = switchSeen.Sub(began) // seen by polling every 50 ms
	var last time.Time
	s.check(st.DB.Raw("SELECT max(applied_at) FROM github_deliveries WHERE broker_index = 0").Scan(&last).Error, "ledger")
	res.OldApplied = s.clock.mono(last).Sub(began)
	w.Stop()
	if n := st.InError(); n > 0 {
		s.Fatalf("%d deliveries ended in error", n)
	}
	return res
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
