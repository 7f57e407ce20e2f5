-- The readers' contract (README, "Reading the typed tables"). processing_version counts
-- the times this service set a row's processing_state: a reader that claimed a row at
-- version v marks it PROCESSED only while it is still PROCESSING at v, so an event applied
-- meanwhile (which sets NEW, RE_REQUESTED or UPDATED and a new version) is never erased.
-- processing_date cannot serve: two workers' clocks can give two changes the same time.
-- The partial indexes hold only the rows waiting for a reader, in the order readers claim
-- them, so a claim reads a few index pages however many rows are PROCESSED.
-- Adding a column with a constant default rewrites no table (Postgres 11+).
-- Never edit this file once released: add a new migration instead.

-- +goose Up
ALTER TABLE github_users ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_users_unprocessed_idx ON github_users (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');
ALTER TABLE github_repositories ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_repositories_unprocessed_idx ON github_repositories (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');
ALTER TABLE github_installations ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_installations_unprocessed_idx ON github_installations (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');
ALTER TABLE github_pull_requests ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_pull_requests_unprocessed_idx ON github_pull_requests (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');
ALTER TABLE github_issues ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_issues_unprocessed_idx ON github_issues (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');
ALTER TABLE github_comments ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_comments_unprocessed_idx ON github_comments (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');
ALTER TABLE github_pushes ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_pushes_unprocessed_idx ON github_pushes (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');
ALTER TABLE github_branches ADD COLUMN processing_version bigint NOT NULL DEFAULT 0;
CREATE INDEX github_branches_unprocessed_idx ON github_branches (processing_date) WHERE processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED');

-- +goose Down
DROP INDEX github_branches_unprocessed_idx;
ALTER TABLE github_branches DROP COLUMN processing_version;
DROP INDEX github_pushes_unprocessed_idx;
ALTER TABLE github_pushes DROP COLUMN processing_version;
DROP INDEX github_comments_unprocessed_idx;
ALTER TABLE github_comments DROP COLUMN processing_version;
DROP INDEX github_issues_unprocessed_idx;
ALTER TABLE github_issues DROP COLUMN processing_version;
DROP INDEX github_pull_requests_unprocessed_idx;
ALTER TABLE github_pull_requests DROP COLUMN processing_version;
DROP INDEX github_installations_unprocessed_idx;
ALTER TABLE github_installations DROP COLUMN processing_version;
DROP INDEX github_repositories_unprocessed_idx;
ALTER TABLE github_repositories DROP COLUMN processing_version;
DROP INDEX github_users_unprocessed_idx;
ALTER TABLE github_users DROP COLUMN processing_version;
