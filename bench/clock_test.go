package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A wall time read back from Postgres lands on the monotonic clock by the samples, so a
// step of the wall clock is counted and does not become lag.
func TestClockWatchPlacesWallTimesAndCountsSteps(t *testing.T) {
	began := time.Now()
	wall := began.Round(0)
	c := &clockWatch{samples: []clockSample{
		{at: began, wall: wall},
		{at: began.Add(time.Second), wall: wall.Add(time.Second)},
		{at: began.Add(2 * time.Second), wall: wall.Add(5 * time.Second)}, // stepped 3 s ahead
	}}
	require.Equal(t, began.Add(1500*time.Millisecond), c.mono(wall.Add(1500*time.Millisecond)))
	require.Equal(t, began.Add(2100*time.Millisecond), c.mono(wall.Add(5100*time.Millisecond)), "after the step")
	n, largest, slew := c.steps()
	require.Equal(t, 1, n)
	require.Equal(t, 3*time.Second, largest)
	require.Zero(t, slew, "the step is not slew")
}
