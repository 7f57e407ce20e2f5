package main

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/brokerswitch/brokerswitch/config"
	"github.com/brokerswitch/brokerswitch/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Exit(testenv.Run(m)) }

// noEnv is an empty environment: none of these commands may get as far as reading it.
func noEnv(string) string { return "" }

func runArgs(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(t.Context(), args, noEnv, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestNoOrUnknownCommandPrintsUsageAndFails(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"wokrer"}, {"-x"}} {
		stdout, stderr, err := runArgs(t, args...)
		require.Error(t, err, "%q", args)
		require.Contains(t, stderr, "usage: brokerswitch <command>", "%q", args)
		require.Empty(t, stdout, "%q", args)
	}
	_, _, err := runArgs(t, "worker", "--now")
	require.ErrorContains(t, err, "worker takes no arguments")
}

func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	stdout, _, err := runArgs(t, "help")
	require.NoError(t, err)
	for _, cmd := range []string{"migrate", "worker", "api", "serve", "simulate", "status", "errors", "version", "help"} {
		require.Regexp(t, `(?m)^  `+cmd+` `, stdout)
	}
}

func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	t.Parallel()
	stdout, _, err := runArgs(t, "version")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, stdout)
	// A test binary carries no link-time stamp and no VCS stamping: the release shows alone.
	require.Equal(t, "brokerswitch 1.1.0", lines[0])
	require.Equal(t, "commit: unknown", lines[1])
	require.Equal(t, "go: "+runtime.Version(), lines[2])
}

func TestTheReleaseCarriesTheBuildAsMetadata(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1.1.0+e701bf5-dirty", releaseVersion("e701bf5-dirty"))
	require.Equal(t, "1.1.0+1.0.0-3-g961425a", releaseVersion("v1.0.0-3-g961425a"))
	require.Equal(t, "1.1.0", releaseVersion("v1.1.0"))
	require.Equal(t, "1.1.0+0.0.0-20261201-abc.dirty", releaseVersion("v0.0.0-20261201-abc+dirty"), "one + only")
}

// The Go runtime's soft limit is 90% of MEMORY_LIMIT, unless GOMEMLIMIT said otherwise,
// and it is the budget start-up holds the worst case to: at its peak the process stays
// under the soft limit, where the collector does not run without end.
func TestMemoryLimitSetsTheGoRuntimesLimit(t *testing.T) {
	vars := map[string]string{"MEMORY_LIMIT": "512Mi", "PREFETCH": "13", "MAX_MESSAGE_BYTES": "4194304", "MAX_BATCH_BYTES": "4194304"}
	getenv := func(k string) string { return vars[k] }
	cfg, err := config.FromEnv(getenv)
	require.NoError(t, err)
	require.Equal(t, int64(512<<20)/10*9, memoryLimit(cfg, getenv))
	worst, _ := cfg.WorstCaseMemory()
	require.LessOrEqual(t, worst, memoryLimit(cfg, getenv))

	// A worst case between the soft limit and MEMORY_LIMIT (480 MiB, over 460.8 MiB) is refused.
	vars["PREFETCH"] = "16"
	_, err = config.FromEnv(getenv)
	require.ErrorContains(t, err, "config: MEMORY_LIMIT:")
	for prefetch := 1; prefetch <= 40; prefetch++ {
		vars["PREFETCH"] = strconv.Itoa(prefetch)
		if cfg, err := config.FromEnv(getenv); err == nil {
			worst, _ := cfg.WorstCaseMemory()
			require.LessOrEqual(t, worst, memoryLimit(cfg, getenv), "PREFETCH %d", prefetch)
		}
	}

	vars["GOMEMLIMIT"] = "300MiB"
	require.Zero(t, memoryLimit(cfg, getenv))
	cfg.MemoryLimit = 0
	delete(vars, "GOMEMLIMIT")
	require.Zero(t, memoryLimit(cfg, getenv))
}
