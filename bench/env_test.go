package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

var _ testenv.T = (*figure)(nil)

// A fatal error ends the figure where it happens, the cleanups run last first, one that
// fails too leaves the others to run, and runFigure returns both errors.
func TestGuardEndsAFigureAndRunsEveryCleanup(t *testing.T) {
	boom := errors.New("boom")
	var ran []string
	reached := false
	r := &run{started: time.Now()}
	err := r.runFigure("figure", func(s *figure) {
		s.Cleanup(func() { ran = append(ran, "first") })
		s.Cleanup(func() { ran = append(ran, "second"); s.Fatalf("cleanup %d failed", 2) })
		s.Cleanup(func() { ran = append(ran, "third") })
		s.check(nil, "a step that worked")
		s.check(boom, "a step")
		reached = true
	})
	require.False(t, reached, "Fatalf returns to nobody")
	require.Equal(t, []string{"third", "second", "first"}, ran)
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "figure: a step: boom")
	require.ErrorContains(t, err, "cleanup 2 failed")

	require.NoError(t, r.runFigure("quiet", func(s *figure) { s.Cleanup(func() {}) }))
}
