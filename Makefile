# brokerswitch: `make dev` runs it on this machine, `make test` proves it.
TEMPORAL_CLI_VERSION := v1.5.1
BIN      := $(CURDIR)/bin
TEMPORAL := $(BIN)/temporal
GO       ?= go

.PHONY: dev test test-unit build migrate services temporal-cli bench clean

## dev: run the service against local Postgres, RabbitMQ (two vhosts) and a Temporal dev server with its Web UI on :8233
dev: build temporal-cli services
	scripts/dev.sh

## test: unit and integration tests against real Postgres, RabbitMQ and a Temporal dev server
test: temporal-cli services
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

## test-unit: the tests that need no service: configuration and workflow logic in virtual time
test-unit:
	$(GO) test -race -count=1 ./config/ ./workflows/

## build: the brokerswitch binary in bin/
build:
	$(GO) build -o $(BIN)/brokerswitch ./cmd/brokerswitch

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

clean:
	rm -rf $(BIN) .dev
