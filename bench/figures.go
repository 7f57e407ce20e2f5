package main

import (
	"fmt"
	"time"
)

// The figures' measure functions: each runs its measurement as one or more recorded
// figures, logs what it found and adds it to the results.

func (r *run) baselineA(round int) {
	for _, pf := range []int{1, 100} {
		r.record(fmt.Sprintf("baseline A prefetch %d run %d", pf, round), func(s *figure) {
			t := runBaselineA(s, s.corpus(r.o.events), pf)
			s.logf("baseline A prefetch %d run %d: %.0f msg/s (%s)", pf, round, t.rate(), t.CPU)
			if pf == 1 {
				r.res.A1 = append(r.res.A1, t)
			} else {
				r.res.A100 = append(r.res.A100, t)
			}
		})
	}
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
			r.res.MeasuredRTT = measureRTT(s, rtt)
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
				s.logf("switch lag %s run %d: %s", cfg.Name, round, summarizeLags(lr.Rotations))
				r.res.addLag(cfg, lr)
			})
		}
	}
}

func (r *run) drain(int) {
	for round := 1; round <= r.o.runs; round++ {
		r.record(fmt.Sprintf("leftover drain run %d", round), func(s *figure) {
			d := runDrain(s, r.o.drain)
			s.logf("leftover drain run %d: ack only %.0f msg/s, with ingest %.0f msg/s", round, d.Raw.rate(), d.Ingest.rate())
			r.res.Drain = append(r.res.Drain, d)
		})
	}
}

func (r *run) leftoverCap(int) {
	r.record("leftover drain cap", func(s *figure) {
		c := runCap(s, r.o.capLeftover, 5*time.Second)
		s.logf("leftover cap: %d leftovers taken %v per cycle, cleared in %s", c.Leftover, c.PerCycle, c.Cleared.Round(time.Millisecond))
		r.res.Cap = &c
	})
}

func (r *run) ledger(int) {
	r.record("ledger", func(s *figure) {
		l := runLedger(s, r.o.events, r.o.runs, r.o.ledgerRows, r.o.ledgerRandom)
		s.logf("ledger: empty %.0f events/s, beside %s rows %.0f events/s", median(l.Empty), commas(l.Rows), median(l.Full))
		r.res.Ledger = &l
	})
}

func (r *run) entityClock(int) {
	r.record("entity clock", func(s *figure) {
		c := runEntityClock(s, r.o.events, r.o.runs)
		s.logf("entity clock: no clock %.0f events/s, newer %.0f, half older %.0f", median(c.NoClock), median(c.Newer), median(c.HalfOlder))
		r.res.EntityClock = &c
	})
}

func (r *run) actions(int) {
	r.record("temporal actions", func(s *figure) {
		a := runActions(s, 20)
		s.logf("temporal actions: idle %s/month (%.0f over %s: %s; %.0f per window restart); per switch %.0f; take-over %s; straggler %s",
			commas(int64(a.idlePerMonth())), total(a.Idle), a.IdlePeriod.Round(time.Second), byTypeOrNone(a.Idle), total(a.Turnover),
			total(a.Switch), a.Takeover.Round(100*time.Millisecond), a.StragglerLag.Round(100*time.Millisecond))
		r.res.Actions = &a
	})
}

func (r *run) catchUp(int) {
	r.record("catch-up", func(s *figure) {
		c := runCatchUp(s, r.o.catchUp, 1000, 0)
		s.logf("catch-up: %d backlog + %d new applied and switched in %s (old drained at %s, switch at %s), peak RSS %.0f MB (%s)",
			c.Backlog, c.OnNew, c.Done.Round(time.Millisecond), c.OldApplied.Round(time.Millisecond),
			c.SwitchDone.Round(time.Millisecond), c.PeakRSSMB, c.CPU)
		r.res.CatchUp = &c
		if r.o.rtt > 0 {
			c := runCatchUp(s, r.o.catchUp, 1000, r.o.rtt)
			s.logf("catch-up with %s RTT: applied and switched in %s, peak RSS %.0f MB (%s)", r.o.rtt, c.Done.Round(time.Millisecond), c.PeakRSSMB, c.CPU)
			r.res.CatchUpRTT = &c
		}
	})
}

func (r *run) peakRSS(int) {
	r.record("peak RSS", func(s *figure) {
		for _, c := range rssCases(r.o.rssMessages) {
			rr := runRSS(s, c)
			s.logf("peak RSS, %s: PREFETCH %d, MEMORY_LIMIT %q (worst case %.0f MiB): peak RSS %.0f MB; %d applied and %d moved to -error in %s",
				c.name, rr.Prefetch, rr.MemoryLimit, rr.WorstCaseMB, rr.PeakRSSMB, rr.Messages, rr.ToError, rr.Done.Round(time.Millisecond))
			r.res.RSS = append(r.res.RSS, rr)
		}
	})
}
