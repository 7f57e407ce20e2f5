// Package ingest decodes GitHub webhook deliveries from RabbitMQ and applies them to the
// typed Postgres tables of package models, in queue order and exactly once: every
// delivery's ledger row (github_deliveries) commits in the same transaction as its typed
// writes, and a delivery already in the ledger is acknowledged without applying it again.
package ingest
