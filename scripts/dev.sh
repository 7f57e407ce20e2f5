#!/usr/bin/env bash
# make dev: a Temporal dev server with its Web UI, two brokers as vhosts on the local
# RabbitMQ, a migrated local database, and `brokerswitch serve` in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .dev

: "${DEV_VHOSTS:=bs-dev-a bs-dev-b}"
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/brokerswitch?sslmode=disable}"
: "${TEMPORAL_ADDRESS:=127.0.0.1:7233}"
: "${HTTP_ADDR:=127.0.0.1:8080}"
: "${METRICS_ADDR:=127.0.0.1:9090}"
: "${OPERATOR_TOKEN:=dev-operator-token}"
: "${PRODUCER_TOKEN:=dev-producer-token}"
: "${CONSUMER_WINDOW:=1m}"

urls=()
for vh in $DEV_VHOSTS; do
  rabbitmqctl -q add_vhost "$vh" 2>/dev/null || true
  rabbitmqctl -q set_permissions -p "$vh" guest '.*' '.*' '.*'
  urls+=("amqp://guest:guest@127.0.0.1:5672/$vh")
done
: "${RABBITMQ_CONNECTION_STRINGS:=$(IFS=,; echo "${urls[*]}")}"

db=$(sed -E 's|.*/([^/?]+)(\?.*)?$|\1|' <<<"$DATABASE_URL")
if ! psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname='$db'" postgres | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -c "create database \"$db\"" postgres >/dev/null
fi

if ! bin/temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
  echo "dev: starting the Temporal dev server; Web UI on http://127.0.0.1:8233"
  bin/temporal server start-dev --ip 127.0.0.1 --port "${TEMPORAL_ADDRESS##*:}" --ui-port 8233 \
    --db-filename .dev/temporal.db --log-level warn >.dev/temporal.log 2>&1 &
  temporal_pid=$!
  trap 'kill $temporal_pid 2>/dev/null || true' EXIT
  for _ in $(seq 60); do
    bin/temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1 && break
    sleep 1
  done
fi

export DATABASE_URL TEMPORAL_ADDRESS HTTP_ADDR METRICS_ADDR OPERATOR_TOKEN PRODUCER_TOKEN CONSUMER_WINDOW RABBITMQ_CONNECTION_STRINGS
bin/brokerswitch migrate
echo "dev: API on http://$HTTP_ADDR (operator token: $OPERATOR_TOKEN, producer token: $PRODUCER_TOKEN), metrics on http://$METRICS_ADDR/metrics"
bin/brokerswitch serve
