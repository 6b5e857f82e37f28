//! The ledger's schema, its version number and the migrations between versions.
//!
//! Opening a ledger of an unknown (newer) version is an error, never a silent rewrite.

use rusqlite::{Connection, OptionalExtension};

use crate::error::{Error, Result};
use crate::ledger::sql_error;

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA_V1: &str = "
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

-- Every folder ever ingested, by canonical absolute path. A run touches only its own root.
CREATE TABLE roots (
    root_id INTEGER PRIMARY KEY,
    path    TEXT NOT NULL UNIQUE
);

-- Which path holds which content, plus the stat cache (size, mtime, inode) and when it was
-- recorded (for the racy-clean check).
CREATE TABLE sources (
    root_id     INTEGER NOT NULL REFERENCES roots(root_id),
    path        TEXT NOT NULL,
    doc_hash    BLOB NOT NULL,
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    inode       INTEGER NOT NULL,
    recorded_ns INTEGER NOT NULL,
    PRIMARY KEY (root_id, path)
) WITHOUT ROWID;
CREATE INDEX sources_by_doc ON sources(doc_hash);

-- One row per distinct content that at least one source holds.
CREATE TABLE documents (
    doc_hash BLOB PRIMARY KEY,
    title    TEXT,
    n_chunks INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE doc_tags (
    doc_hash BLOB NOT NULL,
    tag      TEXT NOT NULL,
    PRIMARY KEY (doc_hash, tag)
) WITHOUT ROWID;
CREATE INDEX doc_tags_by_tag ON doc_tags(tag);

-- The chunks a document is made of, in order, with where each sits in the file.
CREATE TABLE doc_chunks (
    doc_hash   BLOB NOT NULL,
    ordinal    INTEGER NOT NULL,
    chunk_id   BLOB NOT NULL,
    line_start INTEGER NOT NULL,
    line_end   INTEGER NOT NULL,
    PRIMARY KEY (doc_hash, ordinal)
) WITHOUT ROWID;
CREATE INDEX doc_chunks_by_chunk ON doc_chunks(chunk_id);

-- Exactly the chunks that some document references; the index must hold exactly these.
CREATE TABLE chunks (
    chunk_id BLOB PRIMARY KEY,
    heading  TEXT NOT NULL,
    text     TEXT NOT NULL
) WITHOUT ROWID;

-- The outbox: which chunk IDs each generation added or removed, until the index has applied it.
CREATE TABLE chunk_log (
    generation INTEGER NOT NULL,
    op         TEXT NOT NULL CHECK (op IN ('add', 'remove')),
    chunk_id   BLOB NOT NULL
);
CREATE INDEX chunk_log_by_generation ON chunk_log(generation);

CREATE TABLE runs (
    run_id      TEXT PRIMARY KEY,
    roots       TEXT NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    generation  INTEGER,
    report      TEXT
);

CREATE TABLE idempotency_keys (
    scope            TEXT NOT NULL,
    key              TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    tool             TEXT NOT NULL,
    fingerprint      BLOB NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('completed')),
    response         BLOB NOT NULL,
    is_error         INTEGER NOT NULL,
    index_generation INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;

CREATE TABLE audit_events (
    event_id    INTEGER PRIMARY KEY,
    scope       TEXT NOT NULL,
    key         TEXT NOT NULL,
    key_source  TEXT NOT NULL,
    tool        TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    arguments   TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    n_hits      INTEGER NOT NULL,
    index_generation INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (scope, key)
);
CREATE INDEX audit_events_by_time ON audit_events(created_at);

CREATE TABLE usage_events (
    usage_id     INTEGER PRIMARY KEY,
    scope        TEXT NOT NULL,
    key          TEXT NOT NULL,
    units        INTEGER NOT NULL,
    window_start INTEGER NOT NULL,
    window_secs  INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (scope, key)
);
CREATE INDEX usage_events_by_window ON usage_events(scope, window_start);
CREATE INDEX usage_events_by_time ON usage_events(created_at);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys(expires_at);

INSERT INTO meta (name, value) VALUES ('generation', 0), ('log_floor', 0);
";

/// Creates the schema in an empty database, or checks the version of an existing one.
pub fn create_or_check(conn: &mut Connection, path: &std::path::Path) -> Result<()> {
    let found = version(conn)?;
    match found {
        None => {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql_error("create schema"))?;
            // Another process may have created it between our check and our lock.
            if version_in(&tx)?.is_none() {
                tx.execute_batch(SCHEMA_V1)
                    .map_err(sql_error("create schema"))?;
                tx.execute(
                    "INSERT INTO meta (name, value) VALUES ('schema_version', ?1)",
                    [SCHEMA_VERSION],
                )
                .map_err(sql_error("create schema"))?;
            }
            tx.commit().map_err(sql_error("create schema"))?;
            Ok(())
        }
        Some(v) if v == SCHEMA_VERSION => Ok(()),
        Some(v) => Err(Error::SchemaVersion {
            path: path.to_path_buf(),
            found: v,
            expected: SCHEMA_VERSION,
        }),
    }
}

/// Checks the version of a ledger opened for reading only.
pub fn check(conn: &Connection, path: &std::path::Path) -> Result<()> {
    match version(conn)? {
        Some(v) if v == SCHEMA_VERSION => Ok(()),
        Some(v) => Err(Error::SchemaVersion {
            path: path.to_path_buf(),
            found: v,
            expected: SCHEMA_VERSION,
        }),
        None => Err(Error::NoStore {
            path: path.to_path_buf(),
        }),
    }
}

fn version(conn: &Connection) -> Result<Option<i64>> {
    version_in(conn)
}

fn version_in(conn: &Connection) -> Result<Option<i64>> {
    let has_meta: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |row| row.get(0),
        )
        .map_err(sql_error("read schema version"))?;
    if !has_meta {
        return Ok(None);
    }
    let version: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(sql_error("read schema version"))?;
    Ok(Some(version.unwrap_or(0)))
}
