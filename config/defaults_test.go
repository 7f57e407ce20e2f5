package config

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// documented is one row of docs/configuration.md's table: the variables it names and
// its default, when the default is a value (written in backticks) rather than prose.
type documented struct {
	vars []string
	def  string
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	// fieldDefault is a Config field's "from VAR (default VALUE)" where VALUE is one word
	// ended by a parenthesis or ", ": "(default 3s)", "(default 168h, 7 days)". Prose
	// defaults ("default empty: no limit") are not values and do not match.
	fieldDefault = regexp.MustCompile(`from ([A-Z][A-Z0-9_]+) \(default ([^\s)]+?)(?:\)|, )`)
)

// docsTable reads the variables and defaults of docs/configuration.md's table.
func docsTable(t *testing.T) (rows []documented, text string) {
	t.Helper()
	b, err := os.ReadFile("../docs/configuration.md")
	require.NoError(t, err)
	text = string(b)
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		require.GreaterOrEqual(t, len(cells), 4, "a row of three cells: %s", line)
		var row documented
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			row.vars = append(row.vars, m[1])
		}
		if d := strings.TrimSpace(cells[2]); strings.HasPrefix(d, "`") {
			row.def = backticked.FindStringSubmatch(d)[1]
		}
		rows = append(rows, row)
	}
	require.NotEmpty(t, rows, "docs/configuration.md has a table of variables")
	return rows, text
}

// readVariables is every variable FromEnv looks up on an empty environment.
func readVariables(t *testing.T) []string {
	t.Helper()
	var mu sync.Mutex
	var read []string
	_, err := FromEnv(func(name string) string {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(read, name) {
			read = append(read, name)
		}
		return ""
	})
	require.NoError(t, err, "no variable is required")
	return read
}

// Every default in docs/configuration.md is FromEnv's: setting a variable to its
// documented default gives the configuration an empty environment gives. The table names
// every variable FromEnv reads and no other, and each Config field's doc comment gives
// the table's default.
func TestTheDocumentedDefaultsAreFromEnvs(t *testing.T) {
	rows, text := docsTable(t)
	unset, err := FromEnv(env(nil))
	require.NoError(t, err)

	read := readVariables(t)
	var inTable []string
	defaults := map[string]string{}
	for _, row := range rows {
		for _, v := range row.vars {
			if v == "..." {
				continue // the rest of the Temporal SDK's TEMPORAL_* variables
			}
			inTable = append(inTable, v)
			require.Contains(t, read, v, "docs/configuration.md names %s, which FromEnv does not read", v)
		}
		if row.def == "" {
			continue
		}
		require.Len(t, row.vars, 1, "a default is for one variable: %v", row.vars)
		name := row.vars[0]
		defaults[name] = row.def
		set, err := FromEnv(env(map[string]string{name: row.def}))
		require.NoError(t, err, "%s=%s, its documented default", name, row.def)
		require.Equal(t, unset, set, "%s's documented default %q is not FromEnv's", name, row.def)
	}
	for _, v := range read {
		// The Temporal SDK's envconfig reads its own TEMPORAL_* variables, which the
		// table's Temporal row names by their common prefix; others are named in the
		// text (WINDOW_HEARTBEAT_TIMEOUT, which is refused).
		if strings.HasPrefix(v, "TEMPORAL_") || slices.Contains(inTable, v) {
			continue
		}
		require.True(t, strings.Contains(text, "`"+v+"`"), "FromEnv reads %s, which docs/configuration.md does not name", v)
	}

	src, err := os.ReadFile("config.go")
	require.NoError(t, err)
	fields := fieldDefault.FindAllStringSubmatch(string(src), -1)
	require.GreaterOrEqual(t, len(fields), 20, "Config's field comments give their defaults")
	for _, m := range fields {
		name, def := m[1], strings.Trim(m[2], `"`)
		require.Contains(t, defaults, name, "Config's comment gives %s a default that docs/configuration.md does not", name)
		require.Equal(t, defaults[name], def, "Config's comment on %s gives another default than docs/configuration.md", name)
	}
}
