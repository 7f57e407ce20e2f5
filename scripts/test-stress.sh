#!/usr/bin/env bash
# The proof that the tests do not depend on an idle machine: the e2e package RUNS times
# in a row (default 3), each run COUNT rounds in one process (go test -count, default 2),
# under the race detector, while a busy loop spins on every core. Separate processes start
# clean; rounds in one process are how CI and a newcomer repeat a suite, and share one
# Temporal dev server and whatever the first round left on it. It stops at the first
# failure and keeps each run's output.
#   RUNS=3 COUNT=2 BURNERS=$(nproc) PKG=./e2e/ scripts/test-stress.sh
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-3}
count=${COUNT:-2}
burners=${BURNERS:-$(nproc)}
pkg=${PKG:-./e2e/}
logs=$(mktemp -d "${TMPDIR:-/tmp}/brokerswitch-stress.XXXXXX")

# Compile first, so that the runs are timed alone and the busy loops do not slow the compiler.
go test -tags integration -race -c -o "$logs/compiled.test" "$pkg"

pids=()
stop_burners() {
	if ((${#pids[@]})); then
		kill "${pids[@]}" 2>/dev/null || true
	fi
}
trap stop_burners EXIT
for _ in $(seq "$burners"); do
	(while :; do :; done) &
	pids+=($!)
done
echo "stress: $runs runs of $count rounds of $pkg beside $burners busy loops; logs in $logs"

for i in $(seq "$runs"); do
	start=$(date +%s)
	if go test -tags integration -race -count="$count" -timeout $((60 * count))m -v "$pkg" >"$logs/run-$i.log" 2>&1; then
		echo "run $i/$runs: ok in $(($(date +%s) - start))s"
	else
		echo "run $i/$runs: FAIL after $(($(date +%s) - start))s; the failures:"
		grep -E -- '--- FAIL|_test\.go:[0-9]+:|Error:|Messages:|timed out|panic:|^signal:' "$logs/run-$i.log" |
			grep -v SUMMARY | head -40 || true
		echo "whole output: $logs/run-$i.log"
		exit 1
	fi
done
echo "stress: $runs of $runs runs passed"
