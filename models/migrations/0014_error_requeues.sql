-- What `brokerswitch errors requeue` copied back from a {q}-error queue. A copy is marked
-- here once its broker confirmed it and before the original is taken from -error, so that
-- a run interrupted between the two (a killed process, a lost connection: the original
-- comes back to -error) takes the original away on the next run without copying it again.
-- message_key is the SHA-256 of the -error message's identity (broker, queue, delivery id,
-- message id, x-error-at, body); a message that fails again comes back to -error with a
-- new x-error-at, hence a new key. Rows older than a week are deleted by the next run.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
CREATE TABLE error_requeues (
	message_key  bytea PRIMARY KEY,
	broker_index integer NOT NULL,
	queue        text NOT NULL,
	delivery_id  text NOT NULL,
	copied_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX error_requeues_copied_at_idx ON error_requeues (copied_at);

-- +goose Down
DROP TABLE error_requeues;
