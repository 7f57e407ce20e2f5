# syntax=docker/dockerfile:1
# brokerswitch: one static binary (CGO off) in a small image that runs as a non-root user.
# docker compose builds it for the migrate, worker and api services (docker-compose.yml).

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags='-s -w' -o /out/brokerswitch ./cmd/brokerswitch

# alpine rather than distroless: its busybox wget serves the compose health checks.
FROM alpine:3.20
RUN apk add --no-cache ca-certificates tzdata \
 && addgroup -S -g 10001 brokerswitch \
 && adduser -S -D -H -u 10001 -G brokerswitch brokerswitch
COPY --from=build /out/brokerswitch /usr/local/bin/brokerswitch
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/brokerswitch"]
CMD ["serve"]
