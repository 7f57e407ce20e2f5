-- The check that ends each consume batch's transaction: it takes the broker state's lock
-- in shared mode (a switch's commit takes it exclusively) and fails unless the batch's
-- broker is still the active one, so that no batch of a broker we left commits after the
-- switch. A function, so that it fails inside Postgres and travels in the batch's last
-- exchange with its writes and its COMMIT: a failed statement aborts the transaction and
-- the COMMIT behind it rolls back. The active broker is read as BrokerStore reads it: by
-- its endpoint (host case-insensitive, vhost exact) when one is stored, else by its index.
-- 1651665778 is brokerstate's brokerStateLock ("brkr"). SQLSTATE BS001 is the refusal.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION brokerswitch_hold_active(want_host text, want_vhost text, want_index integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	endpoint text;
	active_index text;
BEGIN
	PERFORM pg_advisory_xact_lock_shared(1651665778);
	SELECT value INTO endpoint FROM settings WHERE key = 'broker.active_endpoint';
	IF coalesce(endpoint, '') <> '' THEN
		IF lower(endpoint::jsonb->>'host') = lower(want_host) AND endpoint::jsonb->>'vhost' = want_vhost THEN
			RETURN;
		END IF;
	ELSE
		SELECT value INTO active_index FROM settings WHERE key = 'broker.active_index';
		IF coalesce(nullif(active_index, ''), '0')::integer = want_index THEN
			RETURN;
		END IF;
	END IF;
	RAISE EXCEPTION 'broker % (host %, vhost %) is no longer the active one', want_index, want_host, want_vhost
		USING ERRCODE = 'BS001';
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION brokerswitch_hold_active(text, text, integer);
