-- The ledger keeps the SHA-256 of each delivery's body, so that a delivery id coming back
-- with a different payload is told apart from a redelivery: it goes
-- to -error instead of being acknowledged as a duplicate. Rows written before this
-- migration have none (NULL): their redeliveries stay silent duplicates.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
ALTER TABLE github_deliveries ADD COLUMN payload_sha256 bytea;

-- +goose Down
ALTER TABLE github_deliveries DROP COLUMN payload_sha256;
