# brokerswitch: `make dev` runs it on this machine, `make test` proves it.
TEMPORAL_CLI_VERSION := v1.5.1
GOLANGCI_LINT_VERSION := v2.15.0
# promtool runs the alert rules' unit tests; v0.316.0 is Prometheus 3.x's module version.
PROMTOOL_VERSION := v0.316.0
BIN      := $(CURDIR)/bin
TEMPORAL := $(BIN)/temporal
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
PROMTOOL := $(BIN)/promtool-$(PROMTOOL_VERSION)
GO       ?= go
# What `brokerswitch version` and brokerswitch_build_info report. Stamped with -X rather
# than left to Go's VCS stamping alone, which GOFLAGS=-buildvcs=false or a copy without
# .git (a Docker build context) turn off; a plain `go build` still gets Go's stamp.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.revision=$(REVISION)

# make soak: how long to play random fault schedules, and the go test timeout around it
# (raise SOAK_TIMEOUT with SOAK_DURATION: a schedule in flight finishes after the duration).
SOAK_DURATION ?= 30m
SOAK_TIMEOUT  ?= 1h

.PHONY: help dev test test-rabbitmq4 rabbitmq4 test-unit test-unit-offline test-stress soak lint tidy-check build image migrate services temporal-cli golangci-lint promtool test-alerts dashboard bench clean

## help: list the targets with what each does
help:
	@sed -n 's/^## \([a-z0-9-]*\): /\1\t/p' $(MAKEFILE_LIST) | awk -F '\t' '{ printf "  %-14s %s\n", $$1, $$2 }'

## dev: run the service against local Postgres, RabbitMQ (two vhosts) and a Temporal dev server with its Web UI on :8233
dev: build temporal-cli services
	scripts/dev.sh

## test: unit and integration tests against real Postgres, RabbitMQ 3.10 and a Temporal dev server, the alert rules' tests, and test-rabbitmq4's pass, side by side (scripts/test.sh)
test: temporal-cli services rabbitmq4
	$(GO) vet -tags integration ./...
	GO=$(GO) MAKE=$(MAKE) RABBITMQ4_API=$(RABBITMQ4_API) scripts/test.sh all

# The RabbitMQ 4.0 pass: what it runs, and why, is in scripts/test.sh.
RABBITMQ4_API ?= http://127.0.0.1:15673

## test-rabbitmq4: broker and the switch and order e2e scenarios against RabbitMQ 4.0 (scripts/rabbitmq4.sh), with classic and with quorum queues
test-rabbitmq4: temporal-cli services rabbitmq4
	GO=$(GO) RABBITMQ4_API=$(RABBITMQ4_API) scripts/test.sh rabbitmq4

## rabbitmq4: install (first time only, about 2 minutes) and start RabbitMQ 4.0 beside 3.10: node rabbit4@localhost, AMQP 5673, management 15673
rabbitmq4:
	scripts/rabbitmq4.sh

## test-alerts: promtool's unit tests of docs/alerts.yml (docs/alerts_test.yml): each alert fires, and is held back
test-alerts: $(PROMTOOL)
	$(PROMTOOL) check rules docs/alerts.yml
	$(PROMTOOL) test rules docs/alerts_test.yml

## dashboard: regenerate the Grafana dashboard (deploy/grafana/brokerswitch.json) and its Kubernetes ConfigMap from dashboard/
dashboard:
	$(GO) run ./cmd/dashboard

## test-unit: every test that needs no service (plain `go test ./...`): the tests that need Postgres, RabbitMQ or a Temporal dev server carry the build tag `integration`
test-unit:
	$(GO) test -race -count=1 ./...

## test-unit-offline: test-unit in a network namespace of its own with bin/ hidden: proves that no untagged test needs a service (root; CI runs it)
test-unit-offline:
	scripts/test-unit-offline.sh

## test-stress: the e2e package 3 times in a row, 2 rounds each (-count=2), under -race beside a busy loop on every core; every run must pass (RUNS=n, COUNT=n)
test-stress: temporal-cli services
	scripts/test-stress.sh

## soak: random fault schedules against the real service for SOAK_DURATION (default 30m), each checked by the oracle; writes the table to SOAK.md
soak: temporal-cli services
	SOAK_DURATION=$(SOAK_DURATION) SOAK_REPORT=$(CURDIR)/SOAK.md $(GO) test -tags integration -count=1 -timeout $(SOAK_TIMEOUT) -run 'TestSoak$$' -v ./e2e/

## lint: module tidiness, golangci-lint (.golangci.yml), go vet, and no comment or document citing a tracker issue
lint: tidy-check $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run --allow-serial-runners ./...
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	scripts/no-tracker-refs.sh

## tidy-check: fail if `go mod tidy` would change go.mod or go.sum (prints the diff)
tidy-check:
	$(GO) mod tidy -diff

## build: the brokerswitch binary in bin/, stamped with VERSION and the commit
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/brokerswitch ./cmd/brokerswitch

## image: the container image brokerswitch:$(VERSION), stamped like build (needs Docker)
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t brokerswitch:$(VERSION) .

## migrate: apply the schema to DATABASE_URL
migrate: build
	$(BIN)/brokerswitch migrate

## services: start local Postgres and RabbitMQ unless they run already
services:
	scripts/services.sh

## temporal-cli: the pinned Temporal CLI (dev server and Web UI) in bin/; newer releases do not build from the module proxy
temporal-cli: $(TEMPORAL)
$(TEMPORAL):
	GOBIN=$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

## golangci-lint: the pinned golangci-lint in bin/ (about a minute the first time)
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT):
	@mkdir -p $(BIN)/.golangci-lint
	GOBIN=$(BIN)/.golangci-lint $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/.golangci-lint/golangci-lint $@
	rmdir $(BIN)/.golangci-lint

## promtool: the pinned promtool in bin/ (several minutes the first time: it builds Prometheus' service discovery too)
promtool: $(PROMTOOL)
$(PROMTOOL):
	@mkdir -p $(BIN)/.promtool
	GOBIN=$(BIN)/.promtool $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
	mv $(BIN)/.promtool/promtool $@
	rmdir $(BIN)/.promtool

## bench: throughput, switch lag, catch-up and cost against the local services, then the apply path's Go benchmarks; writes BENCHMARKS.md's table, bench/results.json and bench/go-benchmarks.txt
bench: temporal-cli services
	$(GO) run ./bench -runs 3 -out BENCHMARKS.md
	LEDGER_ROWS=10000000 $(GO) test -tags integration -run '^$$' -bench 'HandleBatch|Decode' -benchtime 50x -count 3 ./ingest/ | tee bench/go-benchmarks.txt

## clean: remove bin/ (built binaries and pinned tools) and .dev/ (the dev server's state)
clean:
	rm -rf $(BIN) .dev
