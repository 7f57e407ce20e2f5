-- GitHub ids and numbers are bigint: a number past 2^31 - 1 failed with "integer out of
-- range" and, being deterministic, went through every retry cycle to -error. A long text
-- in a single-column index failed with "index row size exceeds btree maximum": those
-- lookups are by equality, and a hash index stores a hash code whatever the value's size.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
ALTER TABLE github_pull_requests ALTER COLUMN number TYPE bigint;
ALTER TABLE github_issues ALTER COLUMN number TYPE bigint;
ALTER TABLE github_comments ALTER COLUMN number TYPE bigint;
ALTER TABLE github_pushes ALTER COLUMN commit_count TYPE bigint;

DROP INDEX github_users_login_idx;
CREATE INDEX github_users_login_idx ON github_users USING hash (login);
DROP INDEX github_installations_account_idx;
CREATE INDEX github_installations_account_idx ON github_installations USING hash (account_login);
DROP INDEX github_comments_parent_idx;
CREATE INDEX github_comments_parent_idx ON github_comments USING hash (parent_node_id);

-- +goose Down
DROP INDEX github_comments_parent_idx;
CREATE INDEX github_comments_parent_idx ON github_comments (parent_node_id);
DROP INDEX github_installations_account_idx;
CREATE INDEX github_installations_account_idx ON github_installations (account_login);
DROP INDEX github_users_login_idx;
CREATE INDEX github_users_login_idx ON github_users (login);

ALTER TABLE github_pushes ALTER COLUMN commit_count TYPE integer;
ALTER TABLE github_comments ALTER COLUMN number TYPE integer;
ALTER TABLE github_issues ALTER COLUMN number TYPE integer;
ALTER TABLE github_pull_requests ALTER COLUMN number TYPE integer;
