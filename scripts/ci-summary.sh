#!/usr/bin/env bash
# The closing summary of a CI log: what failed and its first lines, so that the reader of
# a kept log (or of CI's tail) sees why without scrolling through twenty minutes of output.
#   scripts/ci-summary.sh LOG EXIT_CODE SECONDS
set -euo pipefail
log=$1 rc=$2 secs=$3

echo
echo "=== ci summary: exit $rc after $((secs / 60))m$((secs % 60))s; whole log: $log"
grep -E '^(ci|test): ' "$log" | grep -v '^ci: log ' || true
# Each go test run of a package ends in "ok <pkg>" or "FAIL <pkg>": the closing count.
passed=$(grep -cE '^ok[[:space:]]+[^[:space:]]+[[:space:]]' "$log" || true)
failed=$(grep -cE '^FAIL[[:space:]]+[^[:space:]]+[[:space:]]' "$log" || true)
if [ "$rc" -eq 0 ]; then
	echo "=== ci summary: every step passed"
	echo "packages: $passed passed, $failed failed"
	exit 0
fi
# A failed go test prints "--- FAIL: Name (time)" with the test's log indented below it; a
# panic or a timeout prints "panic:" with the running tests after it; golangci-lint and the
# other gates print file:line: findings; make names the target that stopped.
awk '
	/^[[:space:]]*--- FAIL: / { print; shown = 0; infail = 1; indent = match($0, /[^ ]/); next }
	infail && shown < 8 && /^[[:space:]]+[^[:space:]]/ && match($0, /[^ ]/) > indent { print; shown++; next }
	{ infail = 0 }
	/^panic: / { print; panics = 6; next }
	panics > 0 { print; panics--; next }
	/^FAIL[[:space:]]/ { print; next }
	/^[^[:space:]]+\.(go|yml|sh):[0-9]+(:[0-9]+)?: / { print; next }
	/^make(\[[0-9]+\])?: \*\*\* / { print; next }
	/too many open files|timed out after/ { print; next }
' "$log" | awk '!seen[$0]++ && n++ < 80'
echo "=== ci summary: FAILED (the lines above; the whole output is in $log)"
echo "packages: $passed passed, $failed failed"
