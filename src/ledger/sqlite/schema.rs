//! The ledger's schema, its version number and the migrations between versions.
//!
//! Opening a ledger of an unknown (newer) version is an error, never a silent rewrite; so is
//! opening a database that is not a groundidx ledger at all (it has tables, but no
//! `schema_version`), and both are told apart before anything writes to the file.

use rusqlite::{Connection, OptionalExtension};

use super::sql_error;
use crate::error::{Error, Result};

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 13;

/// The oldest version this build opens: older stores are upgraded in place by a writer, and
/// read as they are by a reader (no reader query depends on what the upgrades add).
const OLDEST_VERSION: i64 = 1;

/// What each version adds to the one before, from version 2 on: `(version, SQL)`.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        2,
        // The stat cache keeps the ctime, which a user cannot set back. Rows from version 1 get 0,
        // which no file's ctime matches, so each of their files is read once more.
        "ALTER TABLE sources ADD COLUMN ctime_ns INTEGER NOT NULL DEFAULT 0;",
    ),
    (3, SCHEMA_V3),
    (4, SCHEMA_V4),
    (5, SCHEMA_V5),
    (6, SCHEMA_V6),
    (7, SCHEMA_V7),
    (8, SCHEMA_V8),
    (9, SCHEMA_V9),
    (10, SCHEMA_V10),
    (11, SCHEMA_V11),
    (12, SCHEMA_V12),
    (13, SCHEMA_V13),
];

/// Version 13: which chunks a document is made of is kept by row numbers, not hashes.
/// `documents` and `chunks` number their rows (`doc_row`, `chunk_row`, aliases of the rowid,
/// so that no `VACUUM` renumbers them; the chunks keep theirs; `AUTOINCREMENT`, so that a
/// number is never given twice, and a link left behind by damage can never name a later row),
/// and `doc_chunk_links` holds a
/// document's chunks as `(doc_row, ordinal, chunk_row, ...)`. Each link was two 32-byte hashes,
/// in the table and again in its index by chunk, both keyed by a hash and so written at
/// random places: a third of a cold ingest's ledger at 1,000 files (0.88 of 6.3 MB of store),
/// and B-trees that outgrew the page cache at 100k. Now both are written in order as a cold
/// ingest appends documents and chunks.
///
/// Each link also holds its chunk's short key (`short_key`, a function the upgrade registers),
/// which a filtered search reads (`Ledger::chunks_matching`).
///
/// `doc_chunks` stays, as a view with its old columns: every query that reads it reads an
/// older ledger's table the same way. A link whose document or chunk is missing (a damaged
/// ledger) fails the upgrade on its `NOT NULL` instead of vanishing.
const SCHEMA_V13: &str = "
CREATE TABLE documents_by_row (
    doc_row        INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_hash       BLOB NOT NULL,
    title          TEXT,
    n_chunks       INTEGER NOT NULL,
    fields         TEXT,
    recipe_version INTEGER NOT NULL DEFAULT 0
);
INSERT INTO documents_by_row (doc_hash, title, n_chunks, fields, recipe_version)
    SELECT doc_hash, title, n_chunks, fields, recipe_version FROM documents;
CREATE UNIQUE INDEX documents_by_hash ON documents_by_row(doc_hash);

CREATE TABLE chunks_numbered (
    chunk_row INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_id  BLOB NOT NULL,
    heading   TEXT NOT NULL,
    text      TEXT NOT NULL
);
INSERT INTO chunks_numbered (chunk_row, chunk_id, heading, text)
    SELECT rowid, chunk_id, heading, text FROM chunks ORDER BY rowid;

CREATE TABLE doc_chunk_links (
    doc_row    INTEGER NOT NULL,
    ordinal    INTEGER NOT NULL,
    chunk_row  INTEGER NOT NULL,
    -- The chunk's short key (`ChunkId::short`), what a filtered search gives the index: read
    -- here, a filter passes over the links alone, not over the chunks' rows and their text.
    short_key  INTEGER NOT NULL,
    line_start INTEGER NOT NULL,
    line_end   INTEGER NOT NULL,
    page_start INTEGER,
    page_end   INTEGER,
    PRIMARY KEY (doc_row, ordinal)
) WITHOUT ROWID;
INSERT INTO doc_chunk_links
    SELECT d.doc_row, l.ordinal, c.chunk_row, short_key(c.chunk_id),
           l.line_start, l.line_end, l.page_start, l.page_end
    FROM doc_chunks l
    LEFT JOIN documents_by_row d ON d.doc_hash = l.doc_hash
    LEFT JOIN chunks_numbered c ON c.chunk_id = l.chunk_id
    ORDER BY d.doc_row, l.ordinal;

DROP TABLE doc_chunks;
DROP TABLE documents;
DROP TABLE chunks;
ALTER TABLE documents_by_row RENAME TO documents;
ALTER TABLE chunks_numbered RENAME TO chunks;
CREATE UNIQUE INDEX chunks_by_id ON chunks(chunk_id);
CREATE INDEX doc_chunk_links_by_chunk ON doc_chunk_links(chunk_row);

CREATE VIEW doc_chunks AS
    SELECT d.doc_hash AS doc_hash, l.ordinal AS ordinal, c.chunk_id AS chunk_id,
           l.line_start AS line_start, l.line_end AS line_end,
           l.page_start AS page_start, l.page_end AS page_end
    FROM doc_chunk_links l
    JOIN documents d ON d.doc_row = l.doc_row
    JOIN chunks c ON c.chunk_row = l.chunk_row;
";

/// Version 12: chunk text may be stored compressed (`texts`): a `heading` or `text` value is
/// then a BLOB, one byte naming its dictionary and a zstd frame, where before it was always
/// TEXT. Rows from before stay as they are and are read as before; an older groundidx refuses
/// the ledger (its version is newer), so no build misreads a compressed value as text.
/// `meta.text_dictionary`, written with the dictionary, names it (`texts::Dictionary::of_ledger`).
const SCHEMA_V12: &str = "
CREATE TABLE IF NOT EXISTS text_dictionaries (
    dict_id    INTEGER PRIMARY KEY CHECK (dict_id BETWEEN 1 AND 255),
    dictionary BLOB NOT NULL
);
";

#[cfg(test)]
pub(crate) const SCHEMA_V12_FOR_TESTS: &str = SCHEMA_V12;

/// Version 11: runs by the time they finished. Every search and `status` asks when the last
/// ingest finished (`max(finished_at)`), and runs are never removed: without the index each of
/// them read the whole table, a run a minute from cron making a search 10 ms slower every 70
/// days. A reader of an older ledger answers the same, by the table.
const SCHEMA_V11: &str = "CREATE INDEX IF NOT EXISTS runs_by_finish ON runs(finished_at);";

/// Version 10: each source records the generation from which its path has held what it holds
/// now (its document, as chunked): `read_document` answers for a generation a search named only
/// while the document has not changed since. Rows from before get the generation of the
/// upgrade: unknown, so taken to be as recent as can be. A reader of an older ledger takes every
/// document to have changed at the current generation (`Ledger::has_since`).
const SCHEMA_V10: &str = "
ALTER TABLE sources ADD COLUMN since_generation INTEGER NOT NULL DEFAULT 0;
UPDATE sources SET since_generation = (SELECT value FROM meta WHERE name = 'generation');
";

/// Version 9: a chunk of a format with pages (PDF) records its first and last page; its lines
/// are then lines of those pages' text. Rows of other formats, and every row from before, have
/// none. A reader of an older ledger reads no pages (`Ledger::has_pages`).
const SCHEMA_V9: &str = "
ALTER TABLE doc_chunks ADD COLUMN page_start INTEGER;
ALTER TABLE doc_chunks ADD COLUMN page_end INTEGER;
";

/// Version 8: each document records the version of the recipe that made its chunks
/// (`chunk::recipe_version`: the chunker's, and later its format extractor's). Documents from
/// before get 0, older than any recipe: the next ingest's plan reads the file of every source
/// whose document is older than the recipe for its kind (the stat cache does not vouch for it),
/// and the document is chunked again. Only those files are read again, on every later change
/// of a recipe too.
const SCHEMA_V8: &str =
    "ALTER TABLE documents ADD COLUMN recipe_version INTEGER NOT NULL DEFAULT 0;";

/// Version 7: chunk IDs name a chunk's exact text (`ids::CHUNK_ID_VERSION` 2), where version 1
/// hashed its normalised text and so kept the first whitespace variant ever seen. The rows
/// stay; every stat is made one that no file matches, so the next ingest of each folder reads
/// every file once, finds its document's chunks outdated (`chunks_outdated`) and chunks it
/// again. Until then readers serve the old chunks, and `verify` counts them as outdated.
const SCHEMA_V7: &str = "UPDATE sources SET ctime_ns = 0;";

/// Version 6: a replica records where it found its shared ledger (the URL without its password,
/// and the schema), so that it can name it when it refuses another one. Which ledger it is
/// stays `ledger_id`; a replica of an earlier version records these at its next sync.
const SCHEMA_V6: &str = "
ALTER TABLE replica ADD COLUMN ledger_url TEXT NOT NULL DEFAULT '';
ALTER TABLE replica ADD COLUMN ledger_schema TEXT NOT NULL DEFAULT '';
";

/// Version 5: a store can be a replica of a shared (PostgreSQL) ledger. The one row of
/// `replica` names that ledger and the last position of its log the replica holds; a store
/// without it is a ledger of its own.
const SCHEMA_V5: &str = "
CREATE TABLE replica (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    ledger_id TEXT NOT NULL,
    log_seq   INTEGER NOT NULL,
    -- The shared ledger's token of that position: another token there means the shared ledger
    -- is not the one this replica copied (restored from a backup), and the replica starts over.
    log_token TEXT NOT NULL DEFAULT ''
);
";

/// Version 4: the chunks' text in a rowid table, found by a unique index on the chunk ID. Rows
/// keyed by a hash land at random places in their B-tree, and pages split there stay half
/// full: a WITHOUT ROWID `chunks` took 2.5 times the bytes of its text. Appended in rowid order
/// they fill their pages, and only the small index takes random inserts. The columns, and so
/// every query, stay the same.
const SCHEMA_V4: &str = "
CREATE TABLE chunks_by_row (
    chunk_id BLOB NOT NULL,
    heading  TEXT NOT NULL,
    text     TEXT NOT NULL
);
INSERT INTO chunks_by_row (chunk_id, heading, text)
    SELECT chunk_id, heading, text FROM chunks ORDER BY chunk_id;
DROP TABLE chunks;
ALTER TABLE chunks_by_row RENAME TO chunks;
CREATE UNIQUE INDEX chunks_by_id ON chunks(chunk_id);
";

/// Version 3: a document's front-matter fields (searchable identifiers), and embeddings.
const SCHEMA_V3: &str = "
-- Every top-level scalar front-matter field of the document, as a JSON object of strings.
-- NULL for documents recorded by version 2, which did not keep them: their sources get ctime 0,
-- so each file is read once more and its fields filled in.
ALTER TABLE documents ADD COLUMN fields TEXT;
UPDATE sources SET ctime_ns = 0;

-- Every embedding model a run has used, by fingerprint (a hash of its weights, tokenizer,
-- pooling, prefixes and maximum length). `active_since` is set when the model's vectors first
-- covered every chunk; search uses the model that became active last.
CREATE TABLE embedding_models (
    fingerprint  BLOB PRIMARY KEY,
    description  TEXT NOT NULL,
    dims         INTEGER NOT NULL,
    first_seen   INTEGER NOT NULL,
    active_since INTEGER,
    -- The generation at which the model's vectors last covered every chunk: while the
    -- generation is still that one, a run knows without counting that nothing lacks a vector.
    complete_at  INTEGER
) WITHOUT ROWID;

-- What a model folder's files looked like when its fingerprint was computed, so that a run
-- whose folder has not changed need not hash the weights again.
CREATE TABLE model_stat_cache (
    stat_key    TEXT PRIMARY KEY,
    fingerprint BLOB NOT NULL
) WITHOUT ROWID;

-- One vector per (model, chunk): little-endian f32, L2-normalised. Insert-only: a vector
-- outlives its chunk (the same text coming back is not embedded again) until `gc`.
CREATE TABLE vectors (
    model    BLOB NOT NULL,
    chunk_id BLOB NOT NULL,
    vector   BLOB NOT NULL,
    PRIMARY KEY (model, chunk_id)
) WITHOUT ROWID;

INSERT INTO meta (name, value) VALUES ('vector_seq', 0);
";

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

-- Which path holds which content, plus the stat cache (size, mtime, inode; ctime from
-- version 2) and when it was recorded (for the racy-clean check).
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

/// What a database file holds, found before anything writes to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No schema at all: a new (or empty) file, safe to initialise.
    Empty,
    /// A groundidx ledger of this schema version.
    Ledger(i64),
    /// A schema, but not a groundidx ledger's.
    Foreign,
}

/// Tells an empty database, a groundidx ledger (with its version) and anything else apart.
/// It only reads.
pub(crate) fn found(conn: &Connection) -> Result<Found> {
    // Any object counts (a view or a trigger alone is someone's schema too).
    let n_objects: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
        .map_err(sql_error("read schema"))?;
    if n_objects == 0 {
        return Ok(Found::Empty);
    }
    let has_meta: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |row| row.get(0),
        )
        .map_err(sql_error("read schema version"))?;
    if !has_meta {
        return Ok(Found::Foreign);
    }
    // Someone else's `meta` table may have other columns: a failed query means foreign too.
    let version: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .optional()
        .unwrap_or(None);
    Ok(version.map_or(Found::Foreign, Found::Ledger))
}

/// Refuses what a writer must not touch: a foreign database or an unknown version. Called
/// before the first pragma, so a refused file is left byte for byte as it was.
pub(crate) fn refuse_unless_ours(found: Found, path: &std::path::Path) -> Result<()> {
    match found {
        Found::Empty => Ok(()),
        Found::Ledger(version) if (OLDEST_VERSION..=SCHEMA_VERSION).contains(&version) => Ok(()),
        Found::Ledger(version) => Err(Error::SchemaVersion {
            path: path.to_path_buf(),
            found: version,
            expected: SCHEMA_VERSION,
        }),
        Found::Foreign => Err(Error::NotALedger {
            path: path.to_path_buf(),
        }),
    }
}

/// Creates the schema in an empty database, or upgrades an older one in place. The caller
/// has checked the file with `refuse_unless_ours`.
pub(crate) fn create_or_upgrade(conn: &mut Connection, path: &std::path::Path) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql_error("create schema"))?;
    // Another process may have created or upgraded it between our check and our lock.
    let found = found(&tx)?;
    refuse_unless_ours(found, path)?;
    let from = match found {
        Found::Ledger(version) => version,
        _ => {
            tx.execute_batch(SCHEMA_V1)
                .map_err(sql_error("create schema"))?;
            tx.execute(
                "INSERT INTO meta (name, value) VALUES ('schema_version', 1)",
                [],
            )
            .map_err(sql_error("create schema"))?;
            1
        }
    };
    if from == SCHEMA_VERSION {
        return tx.commit().map_err(sql_error("create schema"));
    }
    register_short_key(&tx)?;
    for (version, sql) in MIGRATIONS.iter().filter(|(version, _)| *version > from) {
        let context = || format!("upgrade {} to schema version {version}", path.display());
        tx.execute_batch(sql).map_err(|err| {
            // A copied table's NOT NULL fails where a row names another the ledger lacks (a
            // link to a missing chunk): damage the upgrade found, not a failure of its own.
            if err.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
                Error::LedgerDamaged(format!("{}: {err}", context()))
            } else {
                sql_error(context())(err)
            }
        })?;
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE name = 'schema_version'",
            [version],
        )
        .map_err(sql_error(context()))?;
    }
    crate::crash::crash_point("schema.before_commit");
    tx.commit().map_err(sql_error("upgrade schema"))
}

/// `short_key(chunk_id)`: the chunk ID's short key (`ChunkId::short`) as SQLite's integer,
/// NULL for NULL (so that a link to a missing chunk fails its `NOT NULL`).
fn register_short_key(conn: &Connection) -> Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "short_key",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| match ctx.get_raw(0) {
            rusqlite::types::ValueRef::Null => Ok(None),
            rusqlite::types::ValueRef::Blob(bytes) => {
                let id = crate::ids::ChunkId::from_slice(bytes).ok_or_else(|| {
                    rusqlite::Error::UserFunctionError("a chunk ID of another length".into())
                })?;
                Ok(Some(id.short() as i64))
            }
            _ => Err(rusqlite::Error::UserFunctionError(
                "a chunk ID that is not a BLOB".into(),
            )),
        },
    )
    .map_err(sql_error("register short_key"))
}

/// Checks a ledger opened for reading only.
pub(crate) fn check(found: Found, path: &std::path::Path) -> Result<()> {
    match found {
        Found::Empty => Err(Error::NoStore {
            path: path.to_path_buf(),
        }),
        other => refuse_unless_ours(other, path),
    }
}
