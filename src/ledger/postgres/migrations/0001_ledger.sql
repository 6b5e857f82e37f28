-- The shared ledger, version 1. Every table lives in the ledger's own schema (the connection's
-- search_path); paths and tags sort bytewise (COLLATE "C"), as SQLite's do, because the planner
-- merges a sorted walk with them; hashes, texts of answers and vectors are bytea.

-- The one counter row: the generation (moves with every batch that changes the set of chunks),
-- the log position (moves with every published batch), the oldest position the log still
-- reaches, and the epoch of the writer lease, checked under this row's lock by every write.
CREATE TABLE ledger_meta (
    id            int PRIMARY KEY CHECK (id = 1),
    ledger_id     text NOT NULL,
    generation    bigint NOT NULL DEFAULT 0,
    log_seq       bigint NOT NULL DEFAULT 0,
    log_floor_seq bigint NOT NULL DEFAULT 0,
    writer_epoch  bigint NOT NULL DEFAULT 0
);
INSERT INTO ledger_meta (id, ledger_id) VALUES (1, gen_random_uuid()::text);

-- The writer lease: one holder at a time, each taking the next epoch.
CREATE TABLE writer_lease (
    name       text PRIMARY KEY,
    holder     text,
    epoch      bigint NOT NULL DEFAULT 0,
    taken_at   timestamptz,
    expires_at timestamptz
);
INSERT INTO writer_lease (name) VALUES ('writer');

-- Which path under which root (its canonical path) holds which document. The stat cache is
-- each host's own, in its mirror.
CREATE TABLE sources (
    root     text COLLATE "C" NOT NULL,
    path     text COLLATE "C" NOT NULL,
    doc_hash bytea NOT NULL CHECK (length(doc_hash) = 32),
    PRIMARY KEY (root, path)
);
CREATE INDEX sources_by_doc ON sources (doc_hash);

CREATE TABLE documents (
    doc_hash bytea PRIMARY KEY CHECK (length(doc_hash) = 32),
    title    text,
    n_chunks bigint NOT NULL,
    fields   text
);

CREATE TABLE doc_tags (
    doc_hash bytea NOT NULL,
    tag      text COLLATE "C" NOT NULL,
    PRIMARY KEY (doc_hash, tag)
);
CREATE INDEX doc_tags_by_tag ON doc_tags (tag);

CREATE TABLE doc_chunks (
    doc_hash   bytea NOT NULL,
    ordinal    bigint NOT NULL,
    chunk_id   bytea NOT NULL CHECK (length(chunk_id) = 32),
    line_start bigint NOT NULL,
    line_end   bigint NOT NULL,
    PRIMARY KEY (doc_hash, ordinal)
);
CREATE INDEX doc_chunks_by_chunk ON doc_chunks (chunk_id);

CREATE TABLE chunks (
    chunk_id bytea PRIMARY KEY CHECK (length(chunk_id) = 32),
    heading  text NOT NULL,
    text     text NOT NULL
);

-- The change log every mirror catches up from: the chunks each published batch added, removed
-- or relabelled, and the paths it changed, at its log position.
CREATE TABLE chunk_log (
    seq        bigint NOT NULL,
    generation bigint NOT NULL,
    op         text NOT NULL CHECK (op IN ('add', 'remove')),
    chunk_id   bytea NOT NULL
);
CREATE INDEX chunk_log_by_seq ON chunk_log (seq);

CREATE TABLE source_log (
    seq  bigint NOT NULL,
    root text COLLATE "C" NOT NULL,
    path text COLLATE "C" NOT NULL
);
CREATE INDEX source_log_by_seq ON source_log (seq);

CREATE TABLE runs (
    run_id      text PRIMARY KEY,
    roots       text NOT NULL,
    started_at  bigint NOT NULL,
    finished_at bigint,
    generation  bigint,
    report      text,
    holder      text,
    epoch       bigint
);

-- Every host that keeps a mirror, and how far it is: the log is pruned only below the
-- slowest active one.
CREATE TABLE consumers (
    consumer_id        text PRIMARY KEY,
    host               text NOT NULL,
    store_dir          text NOT NULL,
    state              text NOT NULL CHECK (state IN ('active', 'stale')),
    applied_seq        bigint NOT NULL,
    applied_generation bigint NOT NULL,
    registered_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen          timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The agent path: one key record, one audit row and one usage row per call, on every host.
CREATE TABLE idempotency_keys (
    scope            text NOT NULL,
    key              text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    tool             text NOT NULL,
    fingerprint      bytea NOT NULL,
    status           text NOT NULL CHECK (status IN ('completed')),
    response         bytea NOT NULL,
    is_error         boolean NOT NULL,
    index_generation bigint NOT NULL,
    created_at       bigint NOT NULL,
    expires_at       bigint NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

CREATE TABLE audit_events (
    event_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope            text NOT NULL,
    key              text NOT NULL,
    key_source       text NOT NULL,
    tool             text NOT NULL,
    fingerprint      bytea NOT NULL,
    arguments        text NOT NULL,
    outcome          text NOT NULL,
    n_hits           bigint NOT NULL,
    index_generation bigint NOT NULL,
    created_at       bigint NOT NULL,
    served_by        text,
    UNIQUE (scope, key)
);
CREATE INDEX audit_events_by_time ON audit_events (created_at);

CREATE TABLE usage_events (
    usage_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope        text NOT NULL,
    key          text NOT NULL,
    units        bigint NOT NULL,
    window_start bigint NOT NULL,
    window_secs  bigint NOT NULL,
    created_at   bigint NOT NULL,
    UNIQUE (scope, key)
);
CREATE INDEX usage_events_by_window ON usage_events (scope, window_start);
CREATE INDEX usage_events_by_time ON usage_events (created_at);

-- The quota counter, one row per scope and window: its row lock orders the units of one
-- window across every host.
CREATE TABLE usage_windows (
    scope        text NOT NULL,
    window_secs  bigint NOT NULL,
    window_start bigint NOT NULL,
    used         bigint NOT NULL,
    PRIMARY KEY (scope, window_secs, window_start)
);

-- The database's clock in ms since the epoch: windows and expiry never use a host's clock.
-- `groundidx.fake_now_ms`, set by a session for tests, freezes it.
CREATE FUNCTION now_ms() RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce(nullif(current_setting('groundidx.fake_now_ms', true), '')::bigint,
                  (extract(epoch FROM now()) * 1000)::bigint) $$;
