-- The check that ends each Leftover Drain batch's transaction: it takes the broker state's
-- lock in shared mode (recording a notification or committing a switch takes it
-- exclusively) and fails unless the batch's broker is still a spare: not the active
-- broker, and not on the route of the Pending Switch. A drain decides how it reads a
-- spare once, before its first round; a notification recorded meanwhile puts the broker
-- on the producer's route, and what arrives there from then on is the producer's present,
-- not stragglers. Brokers are named as brokerswitch_hold_active names them: by endpoint
-- (host case-insensitive, vhost exact) when one is stored, else by index; the active one is
-- found by that function (its refusal, caught, in a subtransaction). 1651665778 is
-- brokerstate's brokerStateLock ("brkr"). SQLSTATE BS003 is the refusal.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION brokerswitch_hold_spare(want_host text, want_vhost text, want_index integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	pending text;
	active boolean := true;
BEGIN
	-- Taken here, outside the block below: a lock taken in a block that fails is released.
	PERFORM pg_advisory_xact_lock_shared(1651665778);
	-- Which broker is active is decided in one place: brokerswitch_hold_active.
	BEGIN
		PERFORM brokerswitch_hold_active(want_host, want_vhost, want_index);
	EXCEPTION WHEN SQLSTATE 'BS001' THEN
		active := false;
	END;
	IF active THEN
		RAISE EXCEPTION 'broker % (host %, vhost %) is the active one now', want_index, want_host, want_vhost
			USING ERRCODE = 'BS003';
	END IF;
	SELECT value INTO pending FROM settings WHERE key = 'broker.pending_switch';
	IF coalesce(pending, '') NOT IN ('', 'null') AND EXISTS (
		SELECT 1 FROM jsonb_array_elements(coalesce(pending::jsonb->'route', '[]'::jsonb)) AS hop
		 WHERE CASE WHEN coalesce(hop->>'host', '') <> ''
		            THEN lower(hop->>'host') = lower(want_host) AND hop->>'vhost' = want_vhost
		            ELSE (hop->>'index')::integer = want_index END) THEN
		RAISE EXCEPTION 'broker % (host %, vhost %) is on the route of the pending switch now', want_index, want_host, want_vhost
			USING ERRCODE = 'BS003';
	END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION brokerswitch_hold_spare(text, text, integer);
