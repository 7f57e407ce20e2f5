# Steps side by side, for .ci/run and scripts/test.sh (sourced, not run). A step started
# with `start` runs in the background with its output in a file of its own; `finish`
# waits for it, prints that output whole, then one line with its result, its time and
# when it began, so that steps run side by side never interleave in a log, and the
# summary (scripts/ci-summary.sh) reads each one's failures in one piece.
#   JOBS_PREFIX             what the result lines start with (default "ci")
#   step NAME COMMAND...    runs a step in the foreground, with the same result line
#   start NAME COMMAND...   starts a step in the background (COMMAND may be a function
#                           that starts and finishes steps of its own)
#   finish NAME             waits for it, then reports it; returns its exit status
#   finish_all              finishes every step started and not finished; fails when any did
# A result line: "ci: lint: ok in 41s (from +3s)", or "ci: lint: FAILED (exit 2) in ...".

jobs_began=$SECONDS
jobs_dir=$(mktemp -d)
declare -A jobs_pid=() jobs_start=()
jobs_order=()

# jobs_kill_tree PID: stops PID's descendants, then PID; whatever a step left running
# when the script stops (an interrupt, a failed command under set -e) stops with it.
jobs_kill_tree() {
	local child
	for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		jobs_kill_tree "$child"
	done
	kill -TERM "$1" 2>/dev/null || true
}
jobs_cleanup() {
	local pid
	for pid in "${jobs_pid[@]}"; do
		jobs_kill_tree "$pid"
	done
	rm -rf "$jobs_dir"
}
trap jobs_cleanup EXIT

# jobs_report NAME EXIT_STATUS STARTED_AT [ENDED_AT]: the result line.
jobs_report() {
	local result=ok
	[ "$2" -eq 0 ] || result="FAILED (exit $2)"
	echo "${JOBS_PREFIX:-ci}: $1: $result in $((${4:-$SECONDS} - $3))s (from +$(($3 - jobs_began))s)"
}

step() {
	local name=$1 began=$SECONDS rc=0
	shift
	"$@" || rc=$?
	jobs_report "$name" "$rc" "$began"
	return "$rc"
}

start() {
	local name=$1
	shift
	jobs_start[$name]=$SECONDS
	jobs_order+=("$name")
	# A subshell with tables of its own, for a COMMAND that starts steps in turn; it notes
	# when it ends, for the result line of a step finished later.
	(
		jobs_pid=() jobs_order=()
		rc=0
		"$@" || rc=$?
		echo "$SECONDS" >"$jobs_dir/$name.end"
		exit "$rc"
	) >"$jobs_dir/$name.log" 2>&1 </dev/null &
	jobs_pid[$name]=$!
}

finish() {
	local name=$1 rc=0
	[ -n "${jobs_pid[$name]:-}" ] || return 0
	wait "${jobs_pid[$name]}" || rc=$?
	unset "jobs_pid[$name]"
	cat "$jobs_dir/$name.log"
	jobs_report "$name" "$rc" "${jobs_start[$name]}" "$(cat "$jobs_dir/$name.end" 2>/dev/null || echo "$SECONDS")"
	return "$rc"
}

finish_all() {
	local name rc=0
	for name in "${jobs_order[@]}"; do
		finish "$name" || rc=1
	done
	return "$rc"
}
