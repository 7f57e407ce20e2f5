#!/usr/bin/env bash
# Starts the local Postgres and RabbitMQ that dev and tests use, when they are not running.
set -euo pipefail

wait_for() { # name, seconds, command...
  local name=$1 secs=$2; shift 2
  for _ in $(seq "$secs"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "services: $name did not become ready in ${secs}s" >&2; return 1
}

if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  wait_for PostgreSQL 60 pg_isready -h 127.0.0.1 -p 5432
fi

if ! rabbitmqctl -q status >/dev/null 2>&1; then
  echo "services: starting RabbitMQ"
  rabbitmq-server -detached
  wait_for RabbitMQ 120 rabbitmqctl -q await_startup
fi
