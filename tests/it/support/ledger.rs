//! Reading a store's SQLite ledger the way the agent tests count what was written: a read-only
//! connection, the rows of the agent tables per key and in total, a key's stored record, and
//! the ledger's write lock held on demand.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

/// A read-only connection to `STORE/ledger.sqlite`.
pub fn ledger(store: &Path) -> Connection {
    let conn = Connection::open_with_flags(
        store.join("ledger.sqlite"),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .expect("open the ledger read-only");
    conn.busy_timeout(Duration::from_secs(10))
        .expect("set busy timeout");
    conn
}

/// Rows of `table` (audit_events, usage_events or idempotency_keys) for `(scope, key)`.
pub fn rows(store: &Path, table: &str, scope: &str, key: &str) -> i64 {
    ledger(store)
        .query_row(
            &format!("SELECT count(*) FROM {table} WHERE scope = ?1 AND key = ?2"),
            [scope, key],
            |row| row.get(0),
        )
        .expect("count rows")
}

/// What the agent path has written in total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub audit: i64,
    pub usage_rows: i64,
    pub units: i64,
    pub keys: i64,
}

pub fn counts(store: &Path) -> Counts {
    let conn = ledger(store);
    let one = |sql: &str| -> i64 { conn.query_row(sql, [], |row| row.get(0)).expect(sql) };
    Counts {
        audit: one("SELECT count(*) FROM audit_events"),
        usage_rows: one("SELECT count(*) FROM usage_events"),
        units: one("SELECT coalesce(sum(units), 0) FROM usage_events"),
        keys: one("SELECT count(*) FROM idempotency_keys"),
    }
}

/// The counts of a store where exactly `n` calls were executed (one row and one unit each).
pub fn executed(n: i64) -> Counts {
    Counts {
        audit: n,
        usage_rows: n,
        units: n,
        keys: n,
    }
}

/// One audit, one usage row and one key record for `(scope, key)`: it was executed once.
pub fn assert_executed_once(store: &Path, scope: &str, key: &str) {
    for table in ["audit_events", "usage_events", "idempotency_keys"] {
        assert_eq!(
            rows(store, table, scope, key),
            1,
            "{table} rows for ({scope}, {key}); totals {:?}",
            counts(store)
        );
    }
    let units: i64 = ledger(store)
        .query_row(
            "SELECT coalesce(sum(units), 0) FROM usage_events WHERE scope = ?1 AND key = ?2",
            [scope, key],
            |row| row.get(0),
        )
        .expect("units");
    assert_eq!(units, 1, "usage units for ({scope}, {key})");
}

/// No row of any agent table for `(scope, key)`.
pub fn assert_nothing_for(store: &Path, scope: &str, key: &str) {
    for table in ["audit_events", "usage_events", "idempotency_keys"] {
        assert_eq!(
            rows(store, table, scope, key),
            0,
            "{table} has a row for the refused ({scope}, {key})"
        );
    }
}

/// The stored key record: (tool, fingerprint, response, index_generation, created_at, expires_at).
pub type KeyRow = (String, Vec<u8>, Vec<u8>, i64, i64, i64);

pub fn key_row(store: &Path, scope: &str, key: &str) -> Option<KeyRow> {
    ledger(store)
        .query_row(
            "SELECT tool, fingerprint, response, index_generation, created_at, expires_at
             FROM idempotency_keys WHERE scope = ?1 AND key = ?2",
            [scope, key],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            },
        )
        .optional()
        .expect("read key record")
}

/// Holds the ledger's write lock (`BEGIN IMMEDIATE`) until dropped: C3's "busy".
pub struct WriteLock(Connection);

impl WriteLock {
    pub fn take(store: &Path) -> WriteLock {
        let conn = Connection::open(store.join("ledger.sqlite")).expect("open the ledger");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("set busy timeout");
        conn.execute_batch("BEGIN IMMEDIATE")
            .expect("take the ledger write lock");
        WriteLock(conn)
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

/// A chunk's `heading` or `text` value as the ledger stores it, read back independently of
/// groundidx's own reader: TEXT as it is, or a BLOB of one byte naming the dictionary (0 for
/// none, else a row of `text_dictionaries`) and a zstd frame without its magic number.
pub fn stored_text(conn: &Connection, value: rusqlite::types::ValueRef<'_>) -> String {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Text(bytes) => String::from_utf8(bytes.to_vec()).expect("UTF-8 text"),
        ValueRef::Blob(stored) => {
            let (&dictionary, body) = stored.split_first().expect("a dictionary byte");
            let mut frame = 0xFD2F_B528_u32.to_le_bytes().to_vec();
            frame.extend_from_slice(body);
            let bytes: Vec<u8> = if dictionary == 0 {
                Vec::new()
            } else {
                conn.query_row(
                    "SELECT dictionary FROM text_dictionaries WHERE dict_id = ?1",
                    [dictionary],
                    |row| row.get(0),
                )
                .expect("the dictionary a value names")
            };
            let mut decoder = zstd::bulk::Decompressor::with_dictionary(&bytes).expect("a decoder");
            let text = decoder.decompress(&frame, 1 << 26).expect("a zstd frame");
            String::from_utf8(text).expect("UTF-8 text")
        }
        other => panic!("a chunk text value of type {:?}", other.data_type()),
    }
}

/// Rewrites every compressed chunk text of the ledger at `path` as plain TEXT and drops the
/// dictionaries, as every ledger before schema 12 kept them, and keeps which chunks a document
/// holds by their hashes, as before schema 13 (`store_links_by_hash`): for tests that make an
/// older ledger, or alter a chunk or its links with SQL.
pub fn store_texts_plain(path: &Path) {
    store_links_by_hash(path);
    let conn = Connection::open(path).expect("open the ledger");
    let rows: Vec<(Vec<u8>, String, String)> = {
        let mut stmt = conn
            .prepare("SELECT chunk_id, heading, text FROM chunks")
            .expect("prepare");
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    stored_text(&conn, row.get_ref(1)?),
                    stored_text(&conn, row.get_ref(2)?),
                ))
            })
            .expect("query");
        rows.collect::<Result<_, _>>().expect("read chunks")
    };
    for (id, heading, text) in rows {
        conn.execute(
            "UPDATE chunks SET heading = ?2, text = ?3 WHERE chunk_id = ?1",
            rusqlite::params![id, heading, text],
        )
        .expect("store the text plain");
    }
    conn.execute_batch(
        "DROP TABLE IF EXISTS text_dictionaries;
         DELETE FROM meta WHERE name = 'text_dictionary';",
    )
    .expect("drop the dictionaries");
}

/// Makes the ledger at `path` keep documents, chunks and the links between them as schema 12
/// did: `doc_chunks` a table of hashes (not a view of `doc_chunk_links`), `documents` keyed by
/// hash, `chunks` without a numbered row. Every row keeps its values; a ledger already so is
/// left as it is.
pub fn store_links_by_hash(path: &Path) {
    let conn = Connection::open(path).expect("open the ledger");
    let is_view: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'view' AND name = 'doc_chunks'",
            [],
            |row| row.get(0),
        )
        .expect("read the schema");
    if !is_view {
        return;
    }
    conn.execute_batch(
        "BEGIN;
         CREATE TABLE doc_chunks_keyed (
             doc_hash   BLOB NOT NULL,
             ordinal    INTEGER NOT NULL,
             chunk_id   BLOB NOT NULL,
             line_start INTEGER NOT NULL,
             line_end   INTEGER NOT NULL,
             page_start INTEGER,
             page_end   INTEGER,
             PRIMARY KEY (doc_hash, ordinal)
         ) WITHOUT ROWID;
         INSERT INTO doc_chunks_keyed SELECT * FROM doc_chunks;
         DROP VIEW doc_chunks;
         DROP TABLE doc_chunk_links;
         ALTER TABLE doc_chunks_keyed RENAME TO doc_chunks;
         CREATE INDEX doc_chunks_by_chunk ON doc_chunks(chunk_id);
         CREATE TABLE documents_keyed (
             doc_hash       BLOB PRIMARY KEY,
             title          TEXT,
             n_chunks       INTEGER NOT NULL,
             fields         TEXT,
             recipe_version INTEGER NOT NULL DEFAULT 0
         ) WITHOUT ROWID;
         INSERT INTO documents_keyed
             SELECT doc_hash, title, n_chunks, fields, recipe_version FROM documents;
         DROP TABLE documents;
         ALTER TABLE documents_keyed RENAME TO documents;
         CREATE TABLE chunks_plain (
             chunk_id BLOB NOT NULL,
             heading  TEXT NOT NULL,
             text     TEXT NOT NULL
         );
         INSERT INTO chunks_plain (rowid, chunk_id, heading, text)
             SELECT chunk_row, chunk_id, heading, text FROM chunks;
         DROP TABLE chunks;
         ALTER TABLE chunks_plain RENAME TO chunks;
         CREATE UNIQUE INDEX chunks_by_id ON chunks(chunk_id);
         UPDATE meta SET value = min(value, 12) WHERE name = 'schema_version';
         COMMIT;",
    )
    .expect("keep the links by hash");
}
