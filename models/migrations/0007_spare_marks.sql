-- What the Leftover Drain learned of each queue on each broker that is not active, so
-- that a broker the producer may be filling is never read early: whether the
-- queue was seen empty since the producer's last visit there (what comes after that
-- may be the producer's future), and since when it has held messages the producer never
-- announced. A row with queue '' says the broker was active here: what it holds after
-- we left it is older than the active broker's backlog. Marks are kept by endpoint, as
-- the producer's trail is, and each holds the time of the producer's last visit it was
-- made under (NULL: none on the trail): a later visit makes the mark say nothing.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
CREATE TABLE spare_marks (
	host       text NOT NULL,
	vhost      text NOT NULL,
	queue      text NOT NULL,
	last_visit timestamptz,
	reached    boolean NOT NULL DEFAULT false,
	drained_at timestamptz,
	held_since timestamptz,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (host, vhost, queue)
);

-- +goose Down
DROP TABLE spare_marks;
