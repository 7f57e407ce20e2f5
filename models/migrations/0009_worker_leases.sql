-- Each worker process's liveness, kept in Postgres rather than in Temporal heartbeats,
-- which Temporal bills one Action each. A worker renews its lease every few seconds while it
-- reaches both Postgres and Temporal; an expired lease is final (its holder starts a new
-- one) and any worker that sees it fails the activity attempts it held, by task token, so
-- that Temporal retries them at once on a live worker. expires_at is on Postgres' clock
-- only: no two clocks are compared.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
CREATE TABLE worker_leases (
	lease_id   text PRIMARY KEY,
	identity   text NOT NULL,
	started_at timestamptz NOT NULL DEFAULT now(),
	renewed_at timestamptz NOT NULL DEFAULT now(),
	expires_at timestamptz NOT NULL
);

-- The activity attempts a lease holds. The task token names one attempt: failing it with
-- a stale token is refused by Temporal, so a reaper can never fail the retry that
-- replaced it. queue and broker say what a window reads, for GET /api/v1/broker.
CREATE TABLE lease_attempts (
	lease_id      text NOT NULL REFERENCES worker_leases ON DELETE CASCADE,
	workflow_id   text NOT NULL,
	activity_id   text NOT NULL,
	attempt       integer NOT NULL,
	activity_type text NOT NULL,
	task_token    bytea NOT NULL,
	queue         text NOT NULL DEFAULT '',
	broker        integer,
	started_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (workflow_id, activity_id, attempt)
);
CREATE INDEX lease_attempts_lease ON lease_attempts (lease_id);

-- +goose Down
DROP TABLE lease_attempts;
DROP TABLE worker_leases;
