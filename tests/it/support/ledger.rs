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
