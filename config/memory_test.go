package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The defaults hold 19.5 GiB of bodies in flight (4 queues × 200 × 25 MiB): against a 512 MiB
// container limit that is an OOM kill and a crash loop. With MEMORY_LIMIT set, start-up
// refuses them and shows the arithmetic.
func TestMemoryLimitRefusesAWorstCaseAboveIt(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"MEMORY_LIMIT": "512Mi"}))
	require.EqualError(t, err, "config: MEMORY_LIMIT: is 512 MiB, whose 90% (460.8 MiB, the Go runtime's soft limit) is less than the consumers may hold, 20.7 GiB: "+
		"QUEUES (4) × (PREFETCH (200) + 1) × MAX_MESSAGE_BYTES (25 MiB) in flight"+
		" + QUEUES (4) × 10 × max(MAX_BATCH_BYTES, MAX_MESSAGE_BYTES) (25 MiB) being handled"+
		" + 64 MiB for the rest of the process = 20.7 GiB; lower PREFETCH, MAX_MESSAGE_BYTES or MAX_BATCH_BYTES, or raise the limit")

	// The Kubernetes sample's settings fit its limit, given in bytes as the downward API does.
	c, err := FromEnv(env(map[string]string{
		"MEMORY_LIMIT": "536870912", "PREFETCH": "13", "MAX_MESSAGE_BYTES": "4194304", "MAX_BATCH_BYTES": "4194304",
	}))
	require.NoError(t, err)
	require.Equal(t, int64(512<<20), c.MemoryLimit)
	worst, _ := c.WorstCaseMemory()
	require.Equal(t, int64(4*14*4<<20+4*10*4<<20+64<<20), worst)

	// Without MEMORY_LIMIT nothing is checked.
	c, err = FromEnv(env(nil))
	require.NoError(t, err)
	require.Zero(t, c.MemoryLimit)
}

func TestMemoryLimitMustBeASize(t *testing.T) {
	for _, v := range []string{"512MB", "-1", "0", "lots", "9999999999Ti"} {
		_, err := FromEnv(env(map[string]string{"MEMORY_LIMIT": v}))
		require.ErrorContains(t, err, "config: MEMORY_LIMIT: \""+v+"\" is not a positive size in bytes", v)
	}
	c, err := FromEnv(env(map[string]string{"MEMORY_LIMIT": "23Gi"}))
	require.NoError(t, err)
	require.Equal(t, int64(23<<30), c.MemoryLimit)
}
