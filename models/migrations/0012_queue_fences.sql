-- Each queue's fencing token. Every activity attempt that reads a queue (a consumer window,
-- a Leftover Drain) takes the queue over when it starts, which advances generation, and
-- every batch it applies ends its transaction with brokerswitch_hold_queue: it locks the
-- row in share mode and fails unless generation is still the one the attempt took. A
-- successor's take-over (an UPDATE) waits for the batches that passed the check and
-- refuses every later one, so that a worker paused or cut off mid-window that wakes after
-- another took its queue over commits nothing more: its batch goes back unsettled.
-- SQLSTATE BS002 is the refusal.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
CREATE TABLE queue_fences (
	queue      text PRIMARY KEY,
	generation bigint NOT NULL,
	taken_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
CREATE FUNCTION brokerswitch_hold_queue(want_queue text, want_generation bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	current bigint;
BEGIN
	SELECT generation INTO current FROM queue_fences WHERE queue = want_queue FOR SHARE;
	IF current IS DISTINCT FROM want_generation THEN
		RAISE EXCEPTION 'queue % was taken over (generation %, this attempt holds %)', want_queue, current, want_generation
			USING ERRCODE = 'BS002';
	END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION brokerswitch_hold_queue(text, bigint);
DROP TABLE queue_fences;
