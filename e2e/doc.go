// Package e2e holds the end-to-end tests: the whole service against real RabbitMQ,
// Postgres and a Temporal dev server. It has no production code.
package e2e
