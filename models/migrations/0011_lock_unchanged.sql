-- The check that a batch's write of rows it read without a lock is still sound: it locks
-- the rows of keys (in key order, as every batch locks) and fails unless each still has
-- the version (xmin) the batch read it at. Every queue's batches read the same senders in
-- github_users and seldom change them; locking them at the read held each across a round
-- trip to Postgres and through the COMMIT, so that the queues waited on each other. A
-- batch now locks only the rows it writes, in the exchange that writes them and commits.
-- A function, so that it fails inside Postgres, in that exchange: the COMMIT behind it
-- rolls back. SQLSTATE 40001 (serialization_failure) makes the batch be applied again,
-- from a fresh read. keys are the table's bigint column id.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION brokerswitch_lock_unchanged(tbl regclass, keys bigint[], versions text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	changed bigint;
BEGIN
	EXECUTE format(
		'SELECT count(*) FROM unnest($1, $2) AS k (id, version)
		   LEFT JOIN (SELECT id, xmin::text AS version FROM %s WHERE id = ANY ($1) ORDER BY id FOR UPDATE) AS l USING (id)
		  WHERE l.version IS DISTINCT FROM k.version', tbl)
	INTO changed USING keys, versions;
	IF changed > 0 THEN
		RAISE EXCEPTION '% of % rows of % changed since the batch read them', changed, cardinality(keys), tbl
			USING ERRCODE = '40001';
	END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION brokerswitch_lock_unchanged(regclass, bigint[], text[]);
