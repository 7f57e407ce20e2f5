-- A btree index row holds at most 2,704 bytes, and a multi-column index cannot be a hash
-- index: a long owner, repository name or ref (random text does not compress) failed
-- every write of its row with "index row size exceeds btree maximum" (54000). These
-- indexes now hold md5() of their text columns, 32 characters whatever the text. A lookup
-- uses them by comparing the same expression, and the column itself for exactness:
--   WHERE md5(owner_login) = md5($1) AND md5(name) = md5($2)
--     AND owner_login = $1 AND name = $2
-- The branches' key becomes a unique index on (repository_id, ref_type, md5(ref)), the
-- conflict target of the upsert; the table has no primary key constraint any more, as
-- one cannot hold an expression. md5 is not collision-proof against a forger, but two
-- refs of one repository colliding only merge their two rows; nothing else depends on it.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
DROP INDEX github_repositories_owner_name_idx;
CREATE INDEX github_repositories_owner_name_idx ON github_repositories (md5(owner_login), md5(name));
DROP INDEX github_pull_requests_owner_name_idx;
CREATE INDEX github_pull_requests_owner_name_idx ON github_pull_requests (md5(repository_owner), md5(repository_name), number);
DROP INDEX github_issues_owner_name_idx;
CREATE INDEX github_issues_owner_name_idx ON github_issues (md5(repository_owner), md5(repository_name), number);
DROP INDEX github_pushes_repo_ref_idx;
CREATE INDEX github_pushes_repo_ref_idx ON github_pushes (repository_id, md5(ref));
DROP INDEX github_branches_owner_name_idx;
CREATE INDEX github_branches_owner_name_idx ON github_branches (md5(repository_owner), md5(repository_name));
ALTER TABLE github_branches DROP CONSTRAINT github_branches_pkey;
CREATE UNIQUE INDEX github_branches_key ON github_branches (repository_id, ref_type, md5(ref));

-- +goose Down
DROP INDEX github_branches_key;
ALTER TABLE github_branches ADD PRIMARY KEY (repository_id, ref_type, ref);
DROP INDEX github_branches_owner_name_idx;
CREATE INDEX github_branches_owner_name_idx ON github_branches (repository_owner, repository_name);
DROP INDEX github_pushes_repo_ref_idx;
CREATE INDEX github_pushes_repo_ref_idx ON github_pushes (repository_id, ref);
DROP INDEX github_issues_owner_name_idx;
CREATE INDEX github_issues_owner_name_idx ON github_issues (repository_owner, repository_name, number);
DROP INDEX github_pull_requests_owner_name_idx;
CREATE INDEX github_pull_requests_owner_name_idx ON github_pull_requests (repository_owner, repository_name, number);
DROP INDEX github_repositories_owner_name_idx;
CREATE INDEX github_repositories_owner_name_idx ON github_repositories (owner_login, name);
