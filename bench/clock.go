package main

import (
	"sort"
	"sync"
	"time"
)

// The ledger's applied_at is wall-clock time, and the wall clock of this kind of VM is
// slewed (about 5 ms/s was seen) and now and then stepped by seconds. clockWatch samples
// the wall clock against Go's monotonic clock every 50 ms, so that a wall time read from
// Postgres can be placed on the monotonic clock and compared with a time taken here.
type clockWatch struct {
	mu      sync.Mutex
	samples []clockSample
	stop    chan struct{}
}

type clockSample struct {
	at   time.Time // with its monotonic reading
	wall time.Time // the same instant, wall clock only
}

// start samples until stop.
func (c *clockWatch) start() {
	c.sample()
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.sample()
			}
		}
	}()
}

// halt ends the sampling.
func (c *clockWatch) halt() { close(c.stop) }

func (c *clockWatch) sample() {
	now := time.Now()
	c.mu.Lock()
	c.samples = append(c.samples, clockSample{at: now, wall: now.Round(0)})
	c.mu.Unlock()
}

// mono places a wall time on the monotonic clock, using the last sample taken at or
// before it (by wall clock).
func (c *clockWatch) mono(wall time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.samples) == 0 {
		return wall
	}
	i := sort.Search(len(c.samples), func(i int) bool { return c.samples[i].wall.After(wall) })
	s := c.samples[max(0, i-1)]
	return s.at.Add(wall.Sub(s.wall))
}

// steps counts the wall clock jumps of more than 50 ms between two samples and gives the
// largest, and the slew per second over the run once the jumps are taken out.
func (c *clockWatch) steps() (n int, largest time.Duration, slewPerSecond time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stepped time.Duration
	for i := 1; i < len(c.samples); i++ {
		a, b := c.samples[i-1], c.samples[i]
		if skew := b.wall.Sub(a.wall) - b.at.Sub(a.at); skew.Abs() > 50*time.Millisecond {
			n++
			stepped += skew
			if skew.Abs() > largest.Abs() {
				largest = skew
			}
		}
	}
	if len(c.samples) > 1 {
		first, last := c.samples[0], c.samples[len(c.samples)-1]
		elapsed := last.at.Sub(first.at)
		drift := last.wall.Sub(first.wall) - elapsed
		if elapsed > time.Second {
			slewPerSecond = time.Duration(float64(drift-stepped) / elapsed.Seconds())
		}
	}
	return n, largest, slewPerSecond
}
