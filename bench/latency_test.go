package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A URL or DSN goes through a delay proxy with the rest of it kept, and a round trip
// through the proxy takes at least the injected time.
func TestDelayProxyAddsTheRoundTrip(t *testing.T) {
	var dsn, amqpURL string
	var rtt time.Duration
	// runFigure runs the figure in a goroutine of its own: the assertions wait for it.
	require.NoError(t, (&run{started: time.Now()}).runFigure("delay", func(s *figure) {
		dsn = throughDelay(s, "postgres://postgres@127.0.0.1:5432/bs_1?sslmode=disable", 2*time.Millisecond)
		amqpURL = throughDelay(s, "amqp://guest:guest@127.0.0.1:5672/bs-test-x", 2*time.Millisecond)
		rtt = measureRTT(s, 5*time.Millisecond)
	}))
	require.Regexp(t, `^postgres://postgres@127\.0\.0\.1:\d+/bs_1\?sslmode=disable$`, dsn)
	require.NotContains(t, dsn, ":5432/")
	require.Regexp(t, `^amqp://guest:guest@127\.0\.0\.1:\d+/bs-test-x$`, amqpURL)
	require.GreaterOrEqual(t, rtt, 5*time.Millisecond)
	require.Less(t, rtt, time.Second)
}

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
