package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

// The figures' measure functions: each runs its measurement as one or more recorded
// figures, logs what it found and adds it to the results.

func (r *run) baselineA(round int) {
	r.record(fmt.Sprintf("baseline A run %d", round), func(s *figure) {
		t := runBaselineA(s, s.corpus(r.o.events), r.res.Settings.Prefetch)
		s.logf("baseline A run %d: %.0f msg/s (%s)", round, t.rate(), t.CPU)
		r.res.A = append(r.res.A, t)
	})
}

func (r *run) baselineB(round int) {
	r.record(fmt.Sprintf("baseline B run %d", round), func(s *figure) {
		t := runBaselineB(s, s.corpus(r.o.events), 0)
		s.logf("baseline B run %d: %.0f msg/s (%s)", round, t.rate(), t.CPU)
		r.res.B = append(r.res.B, t)
	})
}

func (r *run) product(round int) {
	r.record(fmt.Sprintf("end to end run %d", round), func(s *figure) {
		profile := ""
		if round == r.o.runs {
			profile = r.o.cpuProfile
		}
		t := runProduct(s, s.corpus(r.o.events), profile, 0)
		s.logf("end to end run %d: %.0f msg/s, first applied %s after start (%s)", round, t.rate(), t.Startup.Round(time.Millisecond), t.CPU)
		r.res.Product = append(r.res.Product, t)
	})
}

// withRTT is Baseline B and the service with -rtt injected, the RTT measured once.
func (r *run) withRTT(round int) {
	rtt := r.o.rtt
	if rtt <= 0 {
		return
	}
	if r.res.MeasuredRTT == 0 {
		r.record("measure RTT", func(s *figure) {
			r.res.MeasuredRTT = testenv.MeasureRTT(s, rtt)
			s.logf("injected RTT %s measures %s", rtt, r.res.MeasuredRTT.Round(10*time.Microsecond))
		})
	}
	r.record(fmt.Sprintf("baseline B with %s RTT run %d", rtt, round), func(s *figure) {
		t := runBaselineB(s, s.corpus(r.o.rttEvents), rtt)
		s.logf("baseline B with %s RTT run %d: %.0f msg/s (%s)", rtt, round, t.rate(), t.CPU)
		r.res.BRTT = append(r.res.BRTT, t)
	})
	r.record(fmt.Sprintf("end to end with %s RTT run %d", rtt, round), func(s *figure) {
		t := runProduct(s, s.corpus(r.o.events), "", rtt)
		s.logf("end to end with %s RTT run %d: %.0f msg/s (%s)", rtt, round, t.rate(), t.CPU)
		r.res.ProductRTT = append(r.res.ProductRTT, t)
	})
}

func (r *run) lag(int) {
	perRun := (r.o.lagRotations + r.o.runs - 1) / r.o.runs
	for _, cfg := range lagConfigs(r.o, perRun) {
		for round := 1; round <= r.o.runs; round++ {
			r.record(fmt.Sprintf("switch lag %s run %d", cfg.Name, round), func(s *figure) {
				lr := runLag(s, cfg)
				lags, waits := lagSeconds(lr.Rotations)
				s.logf("switch lag %s run %d: lag median %.2fs p95 %.2fs; rotation → first new applied median %.2fs p95 %.2fs (n=%d)",
					cfg.Name, round, median(lags), percentile(lags, 95), median(waits), percentile(waits, 95), len(lags))
				r.res.addLag(cfg, lr)
			})
		}
	}
}

func (r *run) actions(int) {
	r.record("temporal actions", func(s *figure) {
		a := runActions(s, 20)
		s.logf("temporal actions: idle %s/month (%.0f over %s: %s; %.0f per window restart); per switch %.0f; straggler %s",
			commas(int64(a.perMonth(a.Idle, a.IdlePeriod))), total(a.Idle), a.IdlePeriod.Round(time.Second), byType(a.Idle), total(a.Turnover),
			total(a.Switch), a.StragglerLag.Round(100*time.Millisecond))
		r.res.Actions = &a
	})
}

func (r *run) catchUp(int) {
	r.record("catch-up", func(s *figure) {
		c := runCatchUp(s, r.o.catchUp, 1000)
		s.logf("catch-up: %d backlog + %d new applied and switched in %s (old drained at %s, switch at %s), peak RSS %.0f MB (%s)",
			c.Backlog, c.OnNew, c.Done.Round(time.Millisecond), c.OldApplied.Round(time.Millisecond),
			c.SwitchDone.Round(time.Millisecond), c.PeakRSSMB, c.CPU)
		r.res.CatchUp = &c
	})
}

func (r *run) peakRSS(int) {
	r.record("peak RSS", func(s *figure) {
		for _, c := range rssCases(r.o.rssMessages) {
			if !strings.Contains(c.name, r.o.rssCases) {
				continue
			}
			rr := runRSS(s, c)
			s.logf("peak RSS, %s: PREFETCH %d, MEMORY_LIMIT %q (worst case %.0f MiB): peak RSS %.0f MB; %d applied and %d moved to -error in %s",
				c.name, rr.Prefetch, rr.MemoryLimit, rr.WorstCaseMB, rr.PeakRSSMB, rr.Messages, rr.ToError, rr.Done.Round(time.Millisecond))
			r.res.RSS = append(r.res.RSS, rr)
		}
	})
}
