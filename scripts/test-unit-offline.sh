#!/usr/bin/env bash
# Proves that `go test ./...` needs no service: runs it in a network namespace of its own
# (loopback only, so Postgres, RabbitMQ and any Temporal server are out of reach) with
# bin/ hidden (no Temporal CLI). A test that dials anything and lacks the `integration`
# build tag fails here. Needs root (unshare); elsewhere it runs plain `go test ./...`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
	echo "test-unit-offline: not root: running go test ./... beside whatever services run"
	exec go test -count=1 ./...
fi
empty=$(mktemp -d)
trap 'rmdir "$empty"' EXIT
mkdir -p bin
# GOPROXY=off: the namespace has no route out; the modules are in the cache already.
go mod download
unshare --net --mount bash -c "ip link set lo up 2>/dev/null || true
	mount --bind '$empty' '$PWD/bin'
	GOPROXY=off go test -count=1 ./..."
