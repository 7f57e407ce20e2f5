#!/usr/bin/env bash
# Starts the local Postgres and RabbitMQ that dev and tests use, when they are not running.
# On a machine where either is missing it installs it from Debian's packages (as root, with
# apt-get; about a minute each), the same way scripts/rabbitmq4.sh installs 4.0; where it
# cannot, it stops with the exact commands to run.
set -euo pipefail

wait_for() { # name, seconds, command...
  local name=$1 secs=$2; shift 2
  for _ in $(seq "$secs"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "services: $name did not become ready in ${secs}s" >&2; return 1
}

# install_packages PACKAGE...: Debian's packages, or the commands to run when this shell cannot.
install_packages() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "services: $* is not installed, and this shell cannot install it (it needs root and apt-get). Run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y $*" >&2
    echo "then run this again (make services)." >&2
    exit 1
  fi
  echo "services: installing $* from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "$@" || { apt-get update && apt-get install -y --no-install-recommends "$@"; }
}

# The tests and make dev connect as postgres or root over 127.0.0.1 without a password.
trust_local_postgres() {
  local version=$1 hba
  hba=/etc/postgresql/$version/main/pg_hba.conf
  if ! grep -qE '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
    sed -i '/^[^#]/d' "$hba"
    printf 'local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n' >>"$hba"
  fi
}

if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    install_packages postgresql
    trust_local_postgres "$(ls /etc/postgresql | sort -V | tail -1)"
  fi
  version=$(ls /etc/postgresql | sort -V | tail -1)
  echo "services: starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  wait_for PostgreSQL 60 pg_isready -h 127.0.0.1 -p 5432
  # A fresh install has only the postgres role; a root shell's tools connect as root.
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'root'" | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE ROLE root SUPERUSER LOGIN'
fi

if ! rabbitmqctl -q status >/dev/null 2>&1; then
  command -v rabbitmq-server >/dev/null || [ -x /usr/sbin/rabbitmq-server ] || install_packages rabbitmq-server
  echo "services: starting RabbitMQ"
  rabbitmq-server -detached
  wait_for RabbitMQ 120 rabbitmqctl -q await_startup
fi

# The tests make their vhosts through the management API when it listens: a request,
# where rabbitmqctl boots an Erlang VM each time. Without it they use rabbitmqctl.
if ! (exec 3<>/dev/tcp/127.0.0.1/15672) 2>/dev/null; then
  echo "services: enabling RabbitMQ's management plugin (127.0.0.1:15672)"
  if rabbitmq-plugins -q enable rabbitmq_management >/dev/null; then
    wait_for "RabbitMQ's management API" 60 bash -c '(exec 3<>/dev/tcp/127.0.0.1/15672)'
  else
    echo "services: could not enable it; the tests make their vhosts with rabbitmqctl" >&2
  fi
fi
