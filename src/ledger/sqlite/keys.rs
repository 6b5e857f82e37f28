//! The agent path's SQL: idempotency keys, audit events and usage events.
//!
//! A tool call's one write is `record_in_group`: under a savepoint of its own inside a
//! `BEGIN IMMEDIATE` transaction that calls arriving together share (`agent::group_commit`), it
//! looks the key up, checks the quota, and inserts the key record, the audit row and the usage
//! row together, or nothing at all. Audit and usage rows carry their own `UNIQUE (scope, key)`
//! and outlive the key record, so even a retry after `gc` is never logged or counted twice.

use std::collections::HashMap;

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{Ledger, sql_error};
use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::ledger::{
    AuditRow, KeyLookup, KeyRecord, NewCall, RecordOutcome, SpooledCall, UsageRow,
};

/// The units each `(scope, window)` has used, as the writer counted them within its own
/// transactions: summing a window's usage rows for every call costs as many rows as the window
/// holds, while a count kept here costs nothing. It is exact while no other connection has
/// committed (`PRAGMA data_version`, read at each group's start, unchanged) and is forgotten
/// otherwise, and when a group is rolled back.
#[derive(Debug, Default)]
pub(crate) struct UnitCounts {
    data_version: Option<i64>,
    counts: HashMap<(String, i64), u64>,
}

impl UnitCounts {
    /// The most windows kept: past it the counts start again (from the rows).
    const MOST: usize = 4096;
}

impl Ledger {
    /// Sets how long a write waits for SQLite's lock before failing with `Error::Busy`.
    pub(crate) fn set_busy_timeout(&self, timeout: std::time::Duration) -> Result<()> {
        self.conn
            .busy_timeout(timeout)
            .map_err(sql_error("set busy timeout"))
    }

    /// Keeps the journal of each call's savepoint in memory (`PRAGMA temp_store = MEMORY`). A
    /// group's savepoints and statements journal the pages they change; past 64 KiB (a group
    /// of a few calls) SQLite moved that journal to a temporary file it created, wrote and
    /// deleted in every transaction: a twentieth of a keyed call. It holds only the pages one
    /// group changes, and nothing in it outlives the transaction.
    pub(crate) fn journal_calls_in_memory(&self) -> Result<()> {
        self.conn
            .execute_batch("PRAGMA temp_store = MEMORY;")
            .map_err(sql_error("keep the savepoints' journal in memory"))
    }

    /// Looks a key up without taking the write lock. Both reads share one snapshot: read
    /// apart, a call committing in between would look like a key pruned by `gc`.
    pub(crate) fn lookup_key(&self, scope: &str, key: &str) -> Result<KeyLookup> {
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(sql_error("begin key lookup"))?;
        let found = lookup(&tx, scope, key)?;
        tx.commit().map_err(sql_error("end key lookup"))?;
        Ok(found)
    }

    /// Opens the write transaction a group of calls is recorded in (`agent::group_commit`),
    /// forgetting the units counted before when another connection has committed since.
    pub(crate) fn begin_calls(&self, units: &mut UnitCounts) -> Result<()> {
        if !self.conn.is_autocommit() {
            // A transaction a failed rollback left open would hold SQLite's write lock for good.
            tracing::warn!("a keyed-call transaction was left open; rolling it back");
            self.rollback_calls(units);
        }
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(sql_error("begin keyed calls"))?;
        let version = self
            .conn
            .query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))
            .map_err(sql_error("begin keyed calls"));
        let version = match version {
            Ok(version) => version,
            Err(err) => {
                self.rollback_calls(units);
                return Err(err);
            }
        };
        if units.data_version != Some(version) {
            units.counts.clear();
            units.data_version = Some(version);
        }
        Ok(())
    }

    /// Records one executed call inside the open group transaction, under a savepoint of its
    /// own: all its rows or none, whatever the other calls of the group do. `cancelled` is asked
    /// last: a call cancelled by then is rolled back, one cancelled later stays once the group
    /// commits. A key or quota used by an earlier call of the same group is seen as used.
    ///
    /// `Err` when the group's transaction can no longer be trusted to hold exactly the rows of
    /// the calls recorded in it (SQLite ended it, or the savepoint could not be closed): the
    /// whole group must then be rolled back.
    pub(crate) fn record_in_group(
        &self,
        call: &NewCall<'_>,
        units: &mut UnitCounts,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Result<RecordOutcome>, Error> {
        if self.conn.is_autocommit() {
            // A savepoint outside a transaction would start (and its release commit) one of
            // its own.
            return Err(Error::Inconsistent(
                "the keyed calls' transaction ended before its commit".into(),
            ));
        }
        self.conn
            .execute_batch("SAVEPOINT keyed_call")
            .map_err(sql_error("begin keyed call"))?;
        let outcome = self.insert_call(call, units, cancelled);
        let end = match outcome {
            Ok(RecordOutcome::Recorded) => "RELEASE keyed_call",
            _ => "ROLLBACK TO keyed_call; RELEASE keyed_call",
        };
        let ended = self.conn.execute_batch(end);
        if ended.is_err() || self.conn.is_autocommit() {
            units.counts.clear();
            units.data_version = None;
            return Err(match ended {
                Err(err) => sql_error("end keyed call")(err),
                Ok(()) => Error::Inconsistent(
                    "SQLite ended the keyed calls' transaction before its commit".into(),
                ),
            });
        }
        Ok(outcome)
    }

    /// Commits the group transaction; on failure rolls it back (nothing of the group stays).
    pub(crate) fn commit_calls(&self, units: &mut UnitCounts) -> Result<()> {
        let committed = self
            .conn
            .execute_batch("COMMIT")
            .map_err(sql_error("commit keyed calls"));
        if committed.is_err() {
            self.rollback_calls(units);
        }
        committed
    }

    /// Rolls the group transaction back, if one is open, with the units it counted.
    pub(crate) fn rollback_calls(&self, units: &mut UnitCounts) {
        units.counts.clear();
        units.data_version = None;
        if !self.conn.is_autocommit() {
            // A failed rollback leaves nothing to undo: SQLite has ended the transaction.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    fn insert_call(
        &self,
        call: &NewCall<'_>,
        units: &mut UnitCounts,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<RecordOutcome> {
        let existing = lookup(&self.conn, call.scope, call.key)?;
        if existing != KeyLookup::Unused {
            return Ok(RecordOutcome::Existing(existing));
        }
        let window = (call.scope.to_string(), call.window_start);
        let used = match units.counts.get(&window) {
            Some(used) => *used,
            None => units_in(&self.conn, call.scope, call.window_start)?,
        };
        if used + 1 > call.quota {
            return Ok(RecordOutcome::OverQuota);
        }
        self.conn
            .prepare_cached(
                "INSERT INTO idempotency_keys (scope, key, tool, fingerprint, status, response,
                     is_error, index_generation, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, 'completed', ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    call.scope,
                    call.key,
                    call.tool,
                    call.fingerprint,
                    call.response,
                    call.is_error,
                    call.index_generation as i64,
                    call.now_ms,
                    call.expires_at
                ])
            })
            .map_err(sql_error(format!("record key '{}'", call.key)))?;
        self.conn
            .prepare_cached(
                "INSERT INTO audit_events (scope, key, key_source, tool, fingerprint, arguments,
                     outcome, n_hits, index_generation, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    call.scope,
                    call.key,
                    call.key_source,
                    call.tool,
                    call.fingerprint,
                    call.arguments,
                    call.outcome,
                    call.n_hits as i64,
                    call.index_generation as i64,
                    call.now_ms
                ])
            })
            .map_err(sql_error("record audit event"))?;
        self.conn
            .prepare_cached(
                "INSERT INTO usage_events (scope, key, units, window_start, window_secs, created_at)
                 VALUES (?1, ?2, 1, ?3, ?4, ?5)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    call.scope,
                    call.key,
                    call.window_start,
                    call.window_secs as i64,
                    call.now_ms
                ])
            })
            .map_err(sql_error("record usage"))?;
        crash_point("keys.before_commit");
        if cancelled() {
            return Ok(RecordOutcome::Cancelled);
        }
        if units.counts.len() >= UnitCounts::MOST {
            units.counts.clear();
        }
        units.counts.insert(window, used + 1);
        Ok(RecordOutcome::Recorded)
    }

    /// The units `scope` used in the window that starts at `window_start` as `units` counted
    /// them, when that count is exact: the window was counted in the group transactions since
    /// `units` began, and no other connection has committed since (`PRAGMA data_version`).
    /// `None` otherwise (read the rows). Outside a group transaction only.
    pub(crate) fn counted_units(
        &self,
        units: &UnitCounts,
        scope: &str,
        window_start: i64,
    ) -> Result<Option<u64>> {
        let Some(&count) = units.counts.get(&(scope.to_string(), window_start)) else {
            return Ok(None);
        };
        let version = self
            .conn
            .query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))
            .map_err(sql_error("read usage"))?;
        Ok((units.data_version == Some(version)).then_some(count))
    }

    /// Units a scope used in the window that starts at `window_start`.
    pub(crate) fn units_used(&self, scope: &str, window_start: i64) -> Result<u64> {
        units_in(&self.conn, scope, window_start)
    }

    /// Deletes key records that expired before `now_ms`; audit and usage rows stay.
    pub fn prune_keys(&mut self, now_ms: i64) -> Result<u64> {
        let n = self
            .conn
            .execute(
                "DELETE FROM idempotency_keys WHERE expires_at < ?1",
                [now_ms],
            )
            .map_err(sql_error("prune keys"))?;
        Ok(n as u64)
    }

    /// Audit rows since `since_ms`, oldest first, optionally of one client.
    pub fn audit_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<AuditRow>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT created_at, scope, key, key_source, tool, outcome, n_hits,
                        index_generation, arguments
                 FROM audit_events WHERE created_at >= ?1 AND (?2 IS NULL OR scope = ?2)
                 ORDER BY created_at, event_id",
            )
            .map_err(sql_error("read audit events"))?;
        let rows = stmt
            .query_map(params![since_ms, client], |row| {
                Ok(AuditRow {
                    created_at: row.get(0)?,
                    scope: row.get(1)?,
                    key: row.get(2)?,
                    key_source: row.get(3)?,
                    tool: row.get(4)?,
                    outcome: row.get(5)?,
                    n_hits: row.get::<_, i64>(6)? as u64,
                    index_generation: row.get::<_, i64>(7)? as u64,
                    arguments: row.get(8)?,
                })
            })
            .map_err(sql_error("read audit events"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read audit events"))
    }

    /// Units per client and window since `since_ms`.
    pub fn usage_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<UsageRow>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT scope, window_start, window_secs, sum(units) FROM usage_events
                 WHERE created_at >= ?1 AND (?2 IS NULL OR scope = ?2)
                 GROUP BY scope, window_start, window_secs ORDER BY window_start, scope",
            )
            .map_err(sql_error("read usage"))?;
        let rows = stmt
            .query_map(params![since_ms, client], |row| {
                Ok(UsageRow {
                    client: row.get(0)?,
                    window_start: row.get(1)?,
                    window_seconds: row.get::<_, i64>(2)? as u64,
                    units: row.get::<_, i64>(3)? as u64,
                })
            })
            .map_err(sql_error("read usage"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read usage"))
    }
}

fn lookup(conn: &rusqlite::Connection, scope: &str, key: &str) -> Result<KeyLookup> {
    let stored = conn
        .prepare_cached(
            "SELECT tool, fingerprint, response, is_error, index_generation, created_at, expires_at
             FROM idempotency_keys WHERE scope = ?1 AND key = ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![scope, key], |row| {
                Ok(KeyRecord {
                    tool: row.get(0)?,
                    fingerprint: row.get(1)?,
                    response: row.get(2)?,
                    is_error: row.get(3)?,
                    index_generation: row.get::<_, i64>(4)? as u64,
                    created_at: row.get(5)?,
                    expires_at: row.get(6)?,
                })
            })
            .optional()
        })
        .map_err(sql_error(format!("look up key '{key}'")))?;
    if let Some(record) = stored {
        return Ok(KeyLookup::Stored(record));
    }
    let audited: Option<Vec<u8>> = conn
        .prepare_cached("SELECT fingerprint FROM audit_events WHERE scope = ?1 AND key = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![scope, key], |row| row.get(0))
                .optional()
        })
        .map_err(sql_error(format!("look up key '{key}'")))?;
    Ok(match audited {
        Some(fingerprint) => KeyLookup::Pruned { fingerprint },
        None => KeyLookup::Unused,
    })
}

fn units_in(conn: &rusqlite::Connection, scope: &str, window_start: i64) -> Result<u64> {
    conn.prepare_cached(
        "SELECT coalesce(sum(units), 0) FROM usage_events WHERE scope = ?1 AND window_start = ?2",
    )
    .and_then(|mut stmt| stmt.query_row(params![scope, window_start], |row| row.get::<_, i64>(0)))
    .map(|n| n as u64)
    .map_err(sql_error("read usage"))
}

impl Ledger {
    /// Up to `limit` spooled calls, oldest first (a replica records calls only while its shared
    /// ledger is away, so every audit row it holds is one).
    pub(crate) fn spooled_calls(&self, limit: usize) -> Result<Vec<SpooledCall>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT a.scope, a.key, a.key_source, a.tool, a.fingerprint, a.arguments,
                        a.outcome, a.n_hits, a.index_generation, a.created_at,
                        coalesce(u.window_start, 0), coalesce(u.window_secs, 0)
                 FROM audit_events a
                 LEFT JOIN usage_events u ON u.scope = a.scope AND u.key = a.key
                 ORDER BY a.event_id LIMIT ?1",
            )
            .map_err(sql_error("read spooled calls"))?;
        let rows = stmt
            .query_map([limit as i64], |row| {
                Ok(SpooledCall {
                    scope: row.get(0)?,
                    key: row.get(1)?,
                    key_source: row.get(2)?,
                    tool: row.get(3)?,
                    fingerprint: row.get(4)?,
                    arguments: row.get(5)?,
                    outcome: row.get(6)?,
                    n_hits: row.get(7)?,
                    index_generation: row.get(8)?,
                    created_at: row.get(9)?,
                    window_start: row.get(10)?,
                    window_secs: row.get(11)?,
                })
            })
            .map_err(sql_error("read spooled calls"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read spooled calls"))
    }

    /// Removes spooled calls the shared ledger now holds, in one transaction.
    pub(crate) fn remove_spooled(&mut self, calls: &[SpooledCall]) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("remove spooled calls"))?;
        for call in calls {
            for sql in [
                "DELETE FROM audit_events WHERE scope = ?1 AND key = ?2",
                "DELETE FROM usage_events WHERE scope = ?1 AND key = ?2",
                "DELETE FROM idempotency_keys WHERE scope = ?1 AND key = ?2",
            ] {
                tx.prepare_cached(sql)
                    .and_then(|mut stmt| stmt.execute(params![call.scope, call.key]))
                    .map_err(sql_error("remove spooled calls"))?;
            }
        }
        tx.commit().map_err(sql_error("remove spooled calls"))
    }
}
