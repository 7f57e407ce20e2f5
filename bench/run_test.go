package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every figure has a name of its own, -only picks figures by it and keeps the order the
// benchmark runs them in, and the ones measured each round come first.
func TestFiguresAreNamedAndPickedInOrder(t *testing.T) {
	names := figureNames()
	seen := map[string]bool{}
	for _, n := range names {
		require.False(t, seen[n], "figure %q twice", n)
		seen[n] = true
	}
	require.Equal(t, "a,b,product,rtt,lag,actions,catchup,rss", strings.Join(names, ","))
	var picked []string
	for _, f := range (options{only: "rss, a ,lag"}).picked() {
		picked = append(picked, f.name)
	}
	require.Equal(t, []string{"a", "lag", "rss"}, picked)
	require.Len(t, options{}.picked(), len(names))
	require.Empty(t, options{only: "nothing"}.picked())
	rounds := true
	for _, f := range figures() {
		require.False(t, f.eachRound && !rounds, "%s is measured each round after a figure measured once", f.name)
		rounds = f.eachRound
	}
}

// The corpus hands out as many events as asked, in the unit's order, and every call
// numbers new entities: no two figures' events collide in a database.
func TestCorpusNumbersEntitiesAcrossCalls(t *testing.T) {
	c, err := newCorpusMaker()
	require.NoError(t, err)
	units := len(unitKinds())
	first, second := c.corpus(units+3), c.corpus(units)
	require.Len(t, first, units+3)
	for i, k := range unitKinds() {
		require.Equal(t, k.event, first[i].Event)
		require.Equal(t, k.action, first[i].Action)
	}
	ids := map[string]bool{}
	for _, ev := range append(first, second...) {
		require.False(t, ids[ev.DeliveryID], "delivery %s twice", ev.DeliveryID)
		ids[ev.DeliveryID] = true
		require.NotContains(t, string(ev.Body), phNode, "a placeholder left in %s", ev.Event)
	}
	// The first unit's pull request is entity 1, the second unit's entity 2, the next
	// call's entity 3.
	require.Contains(t, string(first[0].Body), "pull_request_bs_1\"")
	require.Contains(t, string(first[units].Body), "pull_request_bs_2\"")
	require.Contains(t, string(second[0].Body), "pull_request_bs_3\"")

	st := describe(first[:units])
	require.Equal(t, map[string]int{"pull_requests": 8, "issues": 6, "pushes": 2, "installations": 2}, st.PerQueue)
	require.LessOrEqual(t, st.MinKB, st.AvgKB)
	require.LessOrEqual(t, st.AvgKB, st.MaxKB)

	next := c.stream()
	for i := range units + 1 {
		require.Equal(t, unitKinds()[i%units].event, next().Event)
	}
}

// The median and the nearest-rank percentile of the figures.
func TestMedianAndPercentile(t *testing.T) {
	require.Zero(t, median(nil))
	require.InDelta(t, 2, median([]float64{3, 1, 2}), 0)
	require.InDelta(t, 2.5, median([]float64{4, 1, 3, 2}), 0)
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	require.InDelta(t, 9, percentile(xs, 90), 0)
	require.InDelta(t, 10, percentile(xs, 100), 0)
	require.InDelta(t, 1, percentile(xs, 1), 0)
	require.Zero(t, percentile(nil, 50))
}
