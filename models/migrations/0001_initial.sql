-- Initial schema: the settings table, the delivery ledger and one typed table per GitHub
-- entity. Typed tables carry no foreign keys to each other on purpose: webhooks reference
-- users, repositories and installations this service may never have seen, and a missing
-- parent must not block applying an event.

-- +goose Up
CREATE TABLE settings (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per delivery GUID: the exactly-once ledger. A row with outcome 'error' does not
-- block a later attempt (an operator may requeue the message from the -error queue).
CREATE TABLE github_deliveries (
    delivery_id                   text PRIMARY KEY,
    event                         text NOT NULL,
    action                        text NOT NULL DEFAULT '',
    queue                         text NOT NULL,
    broker_index                  integer NOT NULL,
    outcome                       text NOT NULL CHECK (outcome IN ('applied', 'ignored', 'error')),
    error_reason                  text NOT NULL DEFAULT '',
    retry_cycles                  integer NOT NULL DEFAULT 0,
    hook_id                       text NOT NULL DEFAULT '',
    hook_installation_target_id   text NOT NULL DEFAULT '',
    hook_installation_target_type text NOT NULL DEFAULT '',
    received_at                   timestamptz NOT NULL,
    applied_at                    timestamptz
);
CREATE INDEX github_deliveries_received_at_idx ON github_deliveries (received_at);
CREATE INDEX github_deliveries_errors_idx ON github_deliveries (received_at) WHERE outcome = 'error';

-- Every typed table repeats the same tracking columns (see models.Tracking):
--   delivery_id       the delivery that created the row
--   last_delivery_id  the last delivery that touched it, last_action its action (or event)
--   processing_state  NEW, RE_REQUESTED or UPDATED (written here), PROCESSING or PROCESSED
--                     (written by readers only); processing_date is when this service
--                     last set it, processed_date belongs to readers.

CREATE TABLE github_users (
    id               bigint PRIMARY KEY,
    node_id          text NOT NULL DEFAULT '',
    login            text NOT NULL,
    type             text NOT NULL DEFAULT '',
    site_admin       boolean NOT NULL DEFAULT false,
    html_url         text NOT NULL DEFAULT '',
    delivery_id      text NOT NULL,
    last_delivery_id text NOT NULL,
    last_action      text NOT NULL DEFAULT '',
    processing_state text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date  timestamptz NOT NULL,
    processed_date   timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX github_users_login_idx ON github_users (login);
CREATE INDEX github_users_processing_idx ON github_users (processing_state, processing_date);

CREATE TABLE github_repositories (
    id                   bigint PRIMARY KEY,
    node_id              text NOT NULL DEFAULT '',
    owner_login          text NOT NULL,
    name                 text NOT NULL,
    full_name            text NOT NULL,
    private              boolean NOT NULL DEFAULT false,
    archived             boolean NOT NULL DEFAULT false,
    default_branch       text NOT NULL DEFAULT '',
    html_url             text NOT NULL DEFAULT '',
    installation_id      bigint,
    installation_removed boolean NOT NULL DEFAULT false,
    deleted              boolean NOT NULL DEFAULT false,
    sender_login         text NOT NULL DEFAULT '',
    delivery_id          text NOT NULL,
    last_delivery_id     text NOT NULL,
    last_action          text NOT NULL DEFAULT '',
    processing_state     text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date      timestamptz NOT NULL,
    processed_date       timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX github_repositories_owner_name_idx ON github_repositories (owner_login, name);
CREATE INDEX github_repositories_installation_idx ON github_repositories (installation_id);
CREATE INDEX github_repositories_processing_idx ON github_repositories (processing_state, processing_date);

CREATE TABLE github_installations (
    id                   bigint PRIMARY KEY,
    app_id               bigint NOT NULL DEFAULT 0,
    account_id           bigint NOT NULL DEFAULT 0,
    account_login        text NOT NULL DEFAULT '',
    account_type         text NOT NULL DEFAULT '',
    target_id            bigint NOT NULL DEFAULT 0,
    target_type          text NOT NULL DEFAULT '',
    repository_selection text NOT NULL DEFAULT '',
    suspended            boolean NOT NULL DEFAULT false,
    suspended_at         timestamptz,
    deleted              boolean NOT NULL DEFAULT false,
    sender_login         text NOT NULL DEFAULT '',
    delivery_id          text NOT NULL,
    last_delivery_id     text NOT NULL,
    last_action          text NOT NULL DEFAULT '',
    processing_state     text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date      timestamptz NOT NULL,
    processed_date       timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX github_installations_account_idx ON github_installations (account_login);
CREATE INDEX github_installations_processing_idx ON github_installations (processing_state, processing_date);

CREATE TABLE github_pull_requests (
    node_id           text PRIMARY KEY,
    id                bigint NOT NULL,
    repository_id     bigint NOT NULL,
    repository_owner  text NOT NULL,
    repository_name   text NOT NULL,
    number            integer NOT NULL,
    title             text NOT NULL DEFAULT '',
    state             text NOT NULL CHECK (state IN ('open', 'closed')),
    draft             boolean NOT NULL DEFAULT false,
    merged            boolean NOT NULL DEFAULT false,
    merged_at         timestamptz,
    closed_at         timestamptz,
    head_ref          text NOT NULL DEFAULT '',
    head_sha          text NOT NULL DEFAULT '',
    base_ref          text NOT NULL DEFAULT '',
    base_sha          text NOT NULL DEFAULT '',
    author_login      text NOT NULL DEFAULT '',
    html_url          text NOT NULL DEFAULT '',
    installation_id   bigint,
    sender_login      text NOT NULL DEFAULT '',
    github_updated_at timestamptz,
    delivery_id       text NOT NULL,
    last_delivery_id  text NOT NULL,
    last_action       text NOT NULL DEFAULT '',
    processing_state  text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date   timestamptz NOT NULL,
    processed_date    timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX github_pull_requests_repo_number_idx ON github_pull_requests (repository_id, number);
CREATE INDEX github_pull_requests_owner_name_idx ON github_pull_requests (repository_owner, repository_name, number);
CREATE INDEX github_pull_requests_processing_idx ON github_pull_requests (processing_state, processing_date);

CREATE TABLE github_issues (
    node_id           text PRIMARY KEY,
    id                bigint NOT NULL,
    repository_id     bigint NOT NULL,
    repository_owner  text NOT NULL,
    repository_name   text NOT NULL,
    number            integer NOT NULL,
    title             text NOT NULL DEFAULT '',
    state             text NOT NULL CHECK (state IN ('open', 'closed')),
    state_reason      text NOT NULL DEFAULT '',
    closed_at         timestamptz,
    author_login      text NOT NULL DEFAULT '',
    html_url          text NOT NULL DEFAULT '',
    installation_id   bigint,
    sender_login      text NOT NULL DEFAULT '',
    github_updated_at timestamptz,
    delivery_id       text NOT NULL,
    last_delivery_id  text NOT NULL,
    last_action       text NOT NULL DEFAULT '',
    processing_state  text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date   timestamptz NOT NULL,
    processed_date    timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX github_issues_repo_number_idx ON github_issues (repository_id, number);
CREATE INDEX github_issues_owner_name_idx ON github_issues (repository_owner, repository_name, number);
CREATE INDEX github_issues_processing_idx ON github_issues (processing_state, processing_date);

-- Issue comments, commit comments, pull request review comments and reviews.
CREATE TABLE github_comments (
    node_id           text PRIMARY KEY,
    id                bigint NOT NULL,
    kind              text NOT NULL CHECK (kind IN ('issue_comment', 'commit_comment', 'review_comment', 'review')),
    repository_id     bigint NOT NULL,
    repository_owner  text NOT NULL,
    repository_name   text NOT NULL,
    number            integer,
    parent_node_id    text NOT NULL DEFAULT '',
    commit_id         text NOT NULL DEFAULT '',
    path              text NOT NULL DEFAULT '',
    review_state      text NOT NULL DEFAULT '',
    author_login      text NOT NULL DEFAULT '',
    body              text NOT NULL DEFAULT '',
    html_url          text NOT NULL DEFAULT '',
    deleted           boolean NOT NULL DEFAULT false,
    installation_id   bigint,
    sender_login      text NOT NULL DEFAULT '',
    github_updated_at timestamptz,
    delivery_id       text NOT NULL,
    last_delivery_id  text NOT NULL,
    last_action       text NOT NULL DEFAULT '',
    processing_state  text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date   timestamptz NOT NULL,
    processed_date    timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX github_comments_parent_idx ON github_comments (parent_node_id);
CREATE INDEX github_comments_repo_number_idx ON github_comments (repository_id, number);
CREATE INDEX github_comments_processing_idx ON github_comments (processing_state, processing_date);

-- One row per push; its key is the delivery that carried it, since a push has no id of
-- its own in the webhook payload.
CREATE TABLE github_pushes (
    delivery_id       text PRIMARY KEY,
    repository_id     bigint NOT NULL,
    repository_owner  text NOT NULL,
    repository_name   text NOT NULL,
    ref               text NOT NULL,
    before_sha        text NOT NULL DEFAULT '',
    after_sha         text NOT NULL DEFAULT '',
    base_ref          text NOT NULL DEFAULT '',
    commit_count      integer NOT NULL DEFAULT 0,
    head_commit_id    text NOT NULL DEFAULT '',
    created           boolean NOT NULL DEFAULT false,
    deleted           boolean NOT NULL DEFAULT false,
    forced            boolean NOT NULL DEFAULT false,
    compare_url       text NOT NULL DEFAULT '',
    pusher_name       text NOT NULL DEFAULT '',
    installation_id   bigint,
    sender_login      text NOT NULL DEFAULT '',
    last_delivery_id  text NOT NULL,
    last_action       text NOT NULL DEFAULT '',
    processing_state  text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date   timestamptz NOT NULL,
    processed_date    timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX github_pushes_repo_ref_idx ON github_pushes (repository_id, ref);
CREATE INDEX github_pushes_processing_idx ON github_pushes (processing_state, processing_date);

-- Branches and tags, from create and delete events.
CREATE TABLE github_branches (
    repository_id     bigint NOT NULL,
    ref_type          text NOT NULL,
    ref               text NOT NULL,
    repository_owner  text NOT NULL,
    repository_name   text NOT NULL,
    master_branch     text NOT NULL DEFAULT '',
    pusher_type       text NOT NULL DEFAULT '',
    deleted           boolean NOT NULL DEFAULT false,
    installation_id   bigint,
    sender_login      text NOT NULL DEFAULT '',
    delivery_id       text NOT NULL,
    last_delivery_id  text NOT NULL,
    last_action       text NOT NULL DEFAULT '',
    processing_state  text NOT NULL CHECK (processing_state IN ('NEW', 'RE_REQUESTED', 'UPDATED', 'PROCESSING', 'PROCESSED')),
    processing_date   timestamptz NOT NULL,
    processed_date    timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repository_id, ref_type, ref)
);
CREATE INDEX github_branches_owner_name_idx ON github_branches (repository_owner, repository_name);
CREATE INDEX github_branches_processing_idx ON github_branches (processing_state, processing_date);

-- +goose Down
DROP TABLE github_branches;
DROP TABLE github_pushes;
DROP TABLE github_comments;
DROP TABLE github_issues;
DROP TABLE github_pull_requests;
DROP TABLE github_installations;
DROP TABLE github_repositories;
DROP TABLE github_users;
DROP TABLE github_deliveries;
DROP TABLE settings;
