# syntax=docker/dockerfile:1
# brokerswitch: one static binary (CGO off) in a small image that runs as a non-root user.
# docker compose builds it for the migrate, worker and api services (docker-compose.yml);
# deploy/k8s/ runs the same image.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#                --build-arg REVISION=$(git rev-parse HEAD) -t brokerswitch .

FROM golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
# The build context leaves .git out (.dockerignore), so Go's own VCS stamping has nothing to
# read: the version and commit come in as build arguments and are linked in with -X, as
# `make build` does. `brokerswitch version` and brokerswitch_build_info report them.
ARG VERSION=dev
ARG REVISION=
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/brokerswitch ./cmd/brokerswitch

# Alpine rather than distroless: its busybox wget serves the compose health checks.
# Alpine 3.24 is supported until May 2028.
FROM alpine:3.24@sha256:28bd5fe8b56d1bd048e5babf5b10710ebe0bae67db86916198a6eec434943f8b
ARG VERSION=dev
ARG REVISION=
LABEL org.opencontainers.image.title="brokerswitch" \
      org.opencontainers.image.description="Consumes GitHub webhook events from RabbitMQ into Postgres and follows its producer from broker to broker" \
      org.opencontainers.image.source="https://github.com/brokerswitch/brokerswitch" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
RUN apk add --no-cache ca-certificates tzdata \
 && addgroup -S -g 10001 brokerswitch \
 && adduser -S -D -H -u 10001 -G brokerswitch brokerswitch
COPY --from=build /out/brokerswitch /usr/local/bin/brokerswitch
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/brokerswitch"]
CMD ["serve"]
