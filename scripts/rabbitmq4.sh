#!/usr/bin/env bash
# Installs RabbitMQ 4.0 (Debian trixie's rabbitmq-server, 4.0.5 on Erlang/OTP 27) into a
# minimal trixie root and runs it beside the host's RabbitMQ 3.10, as node rabbit4@localhost
# with AMQP on 127.0.0.1:5673 and the management API on 127.0.0.1:15673 (tests make their
# vhosts through it: rabbitmqctl inside the root has hung under load).
# Idempotent, so CI calls it every time: with the node up it returns at once, with the root
# installed it only starts the node, and only on a fresh machine does it install (about
# 3 minutes, most of it debootstrap). Needs root.
set -euo pipefail

ROOT=${RABBITMQ4_ROOT:-/var/lib/brokerswitch-rabbit4}
AMQP_PORT=5673
MGMT_PORT=15673
READY_SECS=${RABBITMQ4_READY_SECS:-180}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if port_open "$AMQP_PORT" && port_open "$MGMT_PORT"; then
  exit 0
fi

if [ ! -x "$ROOT/usr/sbin/rabbitmq-server" ]; then
  start=$(date +%s)
  echo "rabbitmq4: installing RabbitMQ 4.0 into $ROOT (Debian trixie)"
  if ! command -v debootstrap >/dev/null; then
    apt-get install -y debootstrap || { apt-get update && apt-get install -y debootstrap; }
  fi
  if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    rm -rf "$ROOT"
    debootstrap --variant=minbase trixie "$ROOT"
  fi
fi

# The server needs /proc, /dev and /sys; mount them once (a restart finds them mounted).
for fs in proc dev sys; do
  mkdir -p "$ROOT/$fs"
  mountpoint -q "$ROOT/$fs" || mount --bind "/$fs" "$ROOT/$fs"
done

if [ ! -x "$ROOT/usr/sbin/rabbitmq-server" ]; then
  # The package starts no service in a chroot: policy-rc.d says no.
  printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
  chmod +x "$ROOT/usr/sbin/policy-rc.d"
  chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server
  echo "rabbitmq4: installed in $(($(date +%s) - start)) s"
fi

mkdir -p "$ROOT/etc/rabbitmq"
cat >"$ROOT/etc/rabbitmq/rabbitmq-env.conf" <<CONF
NODENAME=rabbit4@localhost
NODE_PORT=$AMQP_PORT
DIST_PORT=25673
CONF
cat >"$ROOT/etc/rabbitmq/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
loopback_users = none
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
CONF
echo '[rabbitmq_management].' >"$ROOT/etc/rabbitmq/enabled_plugins"

echo "rabbitmq4: starting rabbit4@localhost on 127.0.0.1:$AMQP_PORT"
if ! port_open "$AMQP_PORT"; then
  chroot --userspec=rabbitmq:rabbitmq "$ROOT" env HOME=/var/lib/rabbitmq rabbitmq-server -detached
fi
# Readiness is the listeners answering, not rabbitmqctl: AMQP opens last in boot, and the
# management listener is what the tests talk to.
for _ in $(seq "$READY_SECS"); do
  if port_open "$AMQP_PORT" && port_open "$MGMT_PORT"; then
    echo "rabbitmq4: ready"
    exit 0
  fi
  sleep 1
done
echo "rabbitmq4: rabbit4@localhost did not open ports $AMQP_PORT and $MGMT_PORT in ${READY_SECS}s (log: $ROOT/var/log/rabbitmq/)" >&2
exit 1
