#!/usr/bin/env bash
# The tracker is not in the repository: a comment or a document that cites "issue N"
# points a reader nowhere. Fails, naming each line, when Go comments or the hand-written
# documents do. BENCHMARKS.md is left out: the bench writes it, and its corpus summary
# counts events of the issues queue ("issues 2666").
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
if git grep -nE '//.*\b[Ii]ssues? #?[0-9]+\b' -- '*.go'; then status=1; fi
if git grep -nE '\b[Ii]ssues? #?[0-9]+\b' -- '*.md' ':!BENCHMARKS.md'; then status=1; fi
if [ "$status" -ne 0 ]; then
  echo "no-tracker-refs: the lines above cite a tracker issue; say why instead" >&2
fi
exit "$status"
