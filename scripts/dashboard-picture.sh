#!/usr/bin/env bash
# Draws docs/dashboard.png, a picture of the Grafana dashboard for docs/operations.md where
# Grafana cannot run: `brokerswitch serve` against the local Postgres and RabbitMQ and a
# Temporal dev server (make dev's setup, on ports and vhosts of its own), Prometheus scraping
# it every 5 s, and the simulator publishing with poison messages and rotations; then
# scripts/dashboard-picture.py evaluates the dashboard's own queries over Prometheus' HTTP
# API and draws the panels where the dashboard puts them, with gnuplot.
# Needs prometheus and gnuplot (apt-get install prometheus gnuplot-nox), bin/temporal
# (make temporal-cli; or set TEMPORAL) and bin/brokerswitch (make build; or set BROKERSWITCH).
# It takes PICTURE_MINUTES (default 12). PICTURE_REDRAW=1 draws again from the last run's
# Prometheus data (.dev/picture), after a change to the drawing or the dashboard.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${PICTURE_MINUTES:=12}"
: "${BROKERSWITCH:=bin/brokerswitch}"
: "${TEMPORAL:=bin/temporal}"
: "${PICTURE_VHOSTS:=bs-picture-a bs-picture-b}"
: "${PICTURE_DB:=brokerswitch_picture}"
temporal_port=7343 http_addr=127.0.0.1:18080 metrics_addr=127.0.0.1:19090 prom_addr=127.0.0.1:19190
work=.dev/picture

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

prometheus_up() { # the configuration file, then waits until it answers
  prometheus --config.file="$1" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="$prom_addr" >>"$work/prometheus.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 60); do curl -fsS "http://$prom_addr/-/ready" >/dev/null 2>&1 && return; sleep 1; done
  echo "Prometheus did not start: $work/prometheus.log" >&2; exit 1
}

draw() { # from the range the run recorded
  read -r start end <"$work/range"
  python3 scripts/dashboard-picture.py --prometheus "http://$prom_addr" \
    --dashboard deploy/grafana/brokerswitch.json --start "$start" --end "$end" --out docs/dashboard.png
}

if [[ -n "${PICTURE_REDRAW:-}" ]]; then
  printf 'global: {}\n' >"$work/redraw.yml"
  prometheus_up "$work/redraw.yml"
  draw
  exit
fi
rm -rf "$work" && mkdir -p "$work"

urls=()
for vh in $PICTURE_VHOSTS; do
  rabbitmqctl -q delete_vhost "$vh" 2>/dev/null || true
  rabbitmqctl -q add_vhost "$vh"
  rabbitmqctl -q set_permissions -p "$vh" guest '.*' '.*' '.*'
  urls+=("amqp://guest:guest@127.0.0.1:5672/$vh")
done
psql -h 127.0.0.1 -U postgres -qc "drop database if exists \"$PICTURE_DB\"" postgres
psql -h 127.0.0.1 -U postgres -qc "create database \"$PICTURE_DB\"" postgres

"$TEMPORAL" server start-dev --ip 127.0.0.1 --port "$temporal_port" --headless --log-level warn >"$work/temporal.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
  "$TEMPORAL" operator cluster health --address "127.0.0.1:$temporal_port" >/dev/null 2>&1 && break
  sleep 1
done

export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$PICTURE_DB?sslmode=disable"
export TEMPORAL_ADDRESS="127.0.0.1:$temporal_port" HTTP_ADDR="$http_addr" METRICS_ADDR="$metrics_addr"
export OPERATOR_TOKEN=dev-operator-token PRODUCER_TOKEN=dev-producer-token CONSUMER_WINDOW=1m
export RABBITMQ_CONNECTION_STRINGS; RABBITMQ_CONNECTION_STRINGS=$(IFS=,; echo "${urls[*]}")
"$BROKERSWITCH" migrate >"$work/migrate.log" 2>&1
"$BROKERSWITCH" serve >"$work/serve.log" 2>&1 &
pids+=($!)

# The job names of deploy/prometheus/prometheus.yml, which the dashboard selects.
cat >"$work/prometheus.yml" <<YAML
global: { scrape_interval: 5s, evaluation_interval: 5s }
rule_files: [$PWD/docs/alerts.yml]
scrape_configs:
  - job_name: brokerswitch-worker
    static_configs: [{ targets: ["$metrics_addr"] }]
YAML
prometheus_up "$work/prometheus.yml"

start=$(date +%s)
sleep 60 # an idle minute first: windows, heartbeats, the watch
# About 2,000 events at 5 a second with poison among them; the producer rotates every 700
# messages and notifies at once, so two switches happen while events flow.
"$BROKERSWITCH" simulate -api "http://$http_addr" -rate 5 -rotate-after 700 -poison 8 \
  -pull-requests 80 -issues 80 -pushes 300 -branches 30 -installations 10 -ignored 40 \
  -log "$work/simulate.jsonl" >"$work/simulate.log" 2>&1
left=$((start + PICTURE_MINUTES * 60 - $(date +%s)))
if ((left > 0)); then sleep "$left"; fi
echo "$start $(date +%s)" >"$work/range"
draw
