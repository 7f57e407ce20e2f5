package main

import (
	"maps"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/config"
)

// Every peak-RSS case's settings are ones a worker starts with: a case that start-up
// refuses loses the figure (the PREFETCH 2 case did so once its hard-coded MEMORY_LIMIT
// fell below a worst case that had grown). A fitted limit is the least one accepted.
func TestEveryPeakRSSCaseStartsAWorker(t *testing.T) {
	for _, c := range rssCases(12) {
		vars := maps.Clone(c.env)
		if vars == nil {
			vars = map[string]string{}
		}
		read := func() (config.Config, error) { return config.FromEnv(func(k string) string { return vars[k] }) }
		cfg, err := read()
		require.NoError(t, err, c.name)
		if !c.fitLimit {
			continue
		}
		worst, _ := cfg.WorstCaseMemory()
		limit := fittedMemoryLimit(worst)
		vars["MEMORY_LIMIT"] = strconv.FormatInt(limit, 10)
		_, err = read()
		require.NoError(t, err, "%s: MEMORY_LIMIT %d", c.name, limit)
		vars["MEMORY_LIMIT"] = strconv.FormatInt(limit-1<<20, 10)
		_, err = read()
		require.ErrorContains(t, err, "MEMORY_LIMIT", "%s: a MiB less is refused", c.name)
	}
}
