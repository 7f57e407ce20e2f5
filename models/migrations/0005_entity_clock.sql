-- Each typed row that follows GitHub's own clock keeps it in entity_clock: the entity's
-- timestamp (in whole seconds) in the payload the row holds. An event whose
-- clock is older than the row's changes nothing but the ledger. Rows written before this
-- migration take it from github_updated_at where they stored one; the others (and every
-- installation and repository) stay NULL, which compares as older than anything, so the
-- next event with a clock applies.
-- Never edit this file once released: add a new migration instead.

-- +goose Up
ALTER TABLE github_pull_requests ADD COLUMN entity_clock timestamptz;
ALTER TABLE github_issues ADD COLUMN entity_clock timestamptz;
ALTER TABLE github_comments ADD COLUMN entity_clock timestamptz;
ALTER TABLE github_installations ADD COLUMN entity_clock timestamptz;
ALTER TABLE github_repositories ADD COLUMN entity_clock timestamptz;
UPDATE github_pull_requests SET entity_clock = date_trunc('second', github_updated_at) WHERE github_updated_at IS NOT NULL;
UPDATE github_issues SET entity_clock = date_trunc('second', github_updated_at) WHERE github_updated_at IS NOT NULL;
UPDATE github_comments SET entity_clock = date_trunc('second', github_updated_at) WHERE github_updated_at IS NOT NULL;

-- +goose Down
ALTER TABLE github_pull_requests DROP COLUMN entity_clock;
ALTER TABLE github_issues DROP COLUMN entity_clock;
ALTER TABLE github_comments DROP COLUMN entity_clock;
ALTER TABLE github_installations DROP COLUMN entity_clock;
ALTER TABLE github_repositories DROP COLUMN entity_clock;
