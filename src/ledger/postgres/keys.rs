//! The agent path's SQL on the shared ledger: a keyed call is one READ COMMITTED transaction on
//! whichever host answers it, so a key, an audit row, a usage unit and a rate limit hold across
//! every host.
//!
//! The key is inserted first (`ON CONFLICT DO NOTHING RETURNING`): a second host sending the
//! same key waits on the first one's row and then finds it, so one call is recorded and both
//! answer its bytes. The quota is one conditional upsert of the window's row, whose lock orders
//! the units of one window across hosts. Times come from the database's clock (`now_ms()`).

use crate::clock;
use crate::crash::crash_point;
use crate::error::Result;
use crate::ledger::postgres::{Budget, PgError, PgLedger};
use crate::ledger::{
    AuditRow, KeyLookup, KeyRecord, NewCall, RecordOutcome, SpooledCall, UsageRow,
};

/// What a shared `record_call` adds to the call: how long its key lives and which host answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SharedCall<'a> {
    pub ttl_ms: i64,
    pub served_by: &'a str,
}

type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// `SET LOCAL` of the frozen clock, when the tests freeze it.
fn clock_setting() -> Option<String> {
    clock::fake_now_ms().map(|ms| format!("SET LOCAL groundidx.fake_now_ms = '{ms}'"))
}

async fn begin<'a>(conn: &'a mut super::Conn) -> std::result::Result<Tx<'a>, PgError> {
    let tx = conn.transaction().await?;
    if let Some(setting) = clock_setting() {
        tx.batch_execute(&setting).await?;
    }
    Ok(tx)
}

/// A call's audit row as `audit_events` holds it, from a call just made or a spooled one.
struct AuditFields<'a> {
    scope: &'a str,
    key: &'a str,
    key_source: &'a str,
    tool: &'a str,
    fingerprint: &'a [u8],
    arguments: &'a str,
    outcome: &'a str,
    n_hits: i64,
    index_generation: i64,
    created_at: i64,
    served_by: &'a str,
}

/// Inserts a call's audit row unless its `(scope, key)` has one; returns whether it did.
async fn insert_audit(tx: &Tx<'_>, row: &AuditFields<'_>) -> std::result::Result<bool, PgError> {
    let inserted = tx
        .execute(
            "INSERT INTO audit_events (scope, key, key_source, tool, fingerprint, arguments,
                 outcome, n_hits, index_generation, created_at, served_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (scope, key) DO NOTHING",
            &[
                &row.scope,
                &row.key,
                &row.key_source,
                &row.tool,
                &row.fingerprint,
                &row.arguments,
                &row.outcome,
                &row.n_hits,
                &row.index_generation,
                &row.created_at,
                &row.served_by,
            ],
        )
        .await?;
    Ok(inserted > 0)
}

/// Inserts the key record of a call made at `now`, unless its `(scope, key)` has one; returns
/// whether it did.
async fn insert_key(
    tx: &Tx<'_>,
    call: &NewCall<'_>,
    now: i64,
    expires_at: i64,
) -> std::result::Result<bool, PgError> {
    let inserted = tx
        .query_opt(
            "INSERT INTO idempotency_keys (scope, key, tool, fingerprint, status, response,
                 is_error, index_generation, created_at, expires_at)
             VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, $8, $9)
             ON CONFLICT (scope, key) DO NOTHING
             RETURNING created_at",
            &[
                &call.scope,
                &call.key,
                &call.tool,
                &call.fingerprint,
                &call.response,
                &call.is_error,
                &(call.index_generation as i64),
                &now,
                &expires_at,
            ],
        )
        .await?;
    Ok(inserted.is_some())
}

/// Counts one unit in the scope's `window`, unless the window is at the quota; returns whether
/// it did.
async fn count_unit(
    tx: &Tx<'_>,
    call: &NewCall<'_>,
    window: i64,
) -> std::result::Result<bool, PgError> {
    let counted = tx
        .query_opt(
            "INSERT INTO usage_windows AS w (scope, window_secs, window_start, used)
             VALUES ($1, $2, $3, 1)
             ON CONFLICT (scope, window_secs, window_start)
               DO UPDATE SET used = w.used + 1 WHERE w.used < $4
             RETURNING used",
            &[
                &call.scope,
                &(call.window_secs as i64),
                &window,
                &(call.quota as i64),
            ],
        )
        .await?;
    Ok(counted.is_some())
}

impl PgLedger {
    /// The database's time now, in ms since the epoch (frozen when the tests freeze it).
    pub fn now_ms(&self) -> Result<i64> {
        self.run("read the clock", Budget::Call, async |conn| {
            let tx = begin(conn).await?;
            let now: i64 = tx.query_one("SELECT now_ms()", &[]).await?.get(0);
            Ok(now)
        })
    }

    /// What the shared ledger knows of a key, from one snapshot.
    pub(crate) fn lookup_key(&self, scope: &str, key: &str) -> Result<KeyLookup> {
        self.run("look up a key", Budget::Call, async |conn| {
            let tx = super::read_snapshot(conn).await?;
            lookup(&tx, scope, key).await
        })
    }

    /// Records an executed call, all rows or none; returns what happened and the database's
    /// time of the call (for the window and its Retry-After). `cancelled` is asked last, just
    /// before the commit.
    pub(crate) fn record_call(
        &self,
        call: &NewCall<'_>,
        shared: SharedCall<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(RecordOutcome, i64)> {
        self.run("record a keyed call", Budget::Call, async |conn| {
            let tx = begin(conn).await?;
            let now: i64 = tx.query_one("SELECT now_ms()", &[]).await?.get(0);
            let window = clock::window_start(now, call.window_secs);
            if !insert_key(&tx, call, now, now.saturating_add(shared.ttl_ms)).await? {
                // Another call with this key committed first (or a record `gc` left as an
                // audit row only): nothing of this one is written.
                drop(tx);
                let tx = super::read_snapshot(conn).await?;
                return Ok((
                    RecordOutcome::Existing(lookup(&tx, call.scope, call.key).await?),
                    now,
                ));
            }
            if !count_unit(&tx, call, window).await? || call.quota == 0 {
                return Ok((RecordOutcome::OverQuota, now));
            }
            let audited = insert_audit(
                &tx,
                &AuditFields {
                    scope: call.scope,
                    key: call.key,
                    key_source: call.key_source,
                    tool: call.tool,
                    fingerprint: call.fingerprint,
                    arguments: call.arguments,
                    outcome: call.outcome,
                    n_hits: call.n_hits as i64,
                    index_generation: call.index_generation as i64,
                    created_at: now,
                    served_by: shared.served_by,
                },
            )
            .await?;
            if !audited {
                // The key record was pruned by `gc` after this call was made: it is answered as
                // a late retry, never logged or counted twice.
                let fingerprint: Vec<u8> = tx
                    .query_one(
                        "SELECT fingerprint FROM audit_events WHERE scope = $1 AND key = $2",
                        &[&call.scope, &call.key],
                    )
                    .await?
                    .get(0);
                return Ok((
                    RecordOutcome::Existing(KeyLookup::Pruned { fingerprint }),
                    now,
                ));
            }
            tx.execute(
                "INSERT INTO usage_events (scope, key, units, window_start, window_secs, created_at)
                 VALUES ($1, $2, 1, $3, $4, $5)
                 ON CONFLICT (scope, key) DO NOTHING",
                &[&call.scope, &call.key, &window, &(call.window_secs as i64), &now],
            )
            .await?;
            crash_point("keys.before_commit");
            if cancelled() {
                return Ok((RecordOutcome::Cancelled, now));
            }
            tx.commit().await?;
            crash_point("keys.after_commit");
            Ok((RecordOutcome::Recorded, now))
        })
    }

    /// Units a scope used in the window the database's clock is in now, and that time.
    pub(crate) fn units_used(&self, scope: &str, window_secs: u64) -> Result<(u64, i64)> {
        self.run("read usage", Budget::Call, async |conn| {
            let tx = begin(conn).await?;
            let now: i64 = tx.query_one("SELECT now_ms()", &[]).await?.get(0);
            let used: i64 = tx
                .query_opt(
                    "SELECT used FROM usage_windows
                      WHERE scope = $1 AND window_secs = $2 AND window_start = $3",
                    &[
                        &scope,
                        &(window_secs as i64),
                        &clock::window_start(now, window_secs),
                    ],
                )
                .await?
                .map_or(0, |row| row.get(0));
            Ok((used as u64, now))
        })
    }

    /// Deletes key records that expired by the database's clock, and quota windows that ended
    /// more than a day ago; audit and usage rows stay.
    pub fn prune_keys(&self) -> Result<u64> {
        self.run("prune keys", Budget::Command, async |conn| {
            let tx = begin(conn).await?;
            let n = tx
                .execute(
                    "DELETE FROM idempotency_keys WHERE expires_at < now_ms()",
                    &[],
                )
                .await?;
            tx.execute(
                "DELETE FROM usage_windows
                  WHERE window_start + window_secs * 1000 < now_ms() - 86400000",
                &[],
            )
            .await?;
            tx.commit().await?;
            Ok(n)
        })
    }

    /// Writes calls a host answered while this ledger was away (its spool), each once however
    /// often forwarded: their audit rows and usage units, under their own times, each unit
    /// counted in its window's quota.
    pub(crate) fn forward_calls(&self, calls: &[SpooledCall], served_by: &str) -> Result<()> {
        self.run("forward spooled calls", Budget::Command, async |conn| {
            let tx = conn.transaction().await?;
            for call in calls {
                insert_audit(
                    &tx,
                    &AuditFields {
                        scope: &call.scope,
                        key: &call.key,
                        key_source: &call.key_source,
                        tool: &call.tool,
                        fingerprint: &call.fingerprint,
                        arguments: &call.arguments,
                        outcome: &call.outcome,
                        n_hits: call.n_hits,
                        index_generation: call.index_generation,
                        created_at: call.created_at,
                        served_by,
                    },
                )
                .await?;
                if call.window_secs > 0 {
                    // The unit counts in its window's quota too (the rate limit of every host),
                    // once: only when its usage row is new. It was answered already, so it is
                    // counted even past the quota.
                    tx.execute(
                        "WITH counted AS (
                             INSERT INTO usage_events (scope, key, units, window_start,
                                                       window_secs, created_at)
                             VALUES ($1, $2, 1, $3, $4, $5)
                             ON CONFLICT (scope, key) DO NOTHING
                             RETURNING scope, window_secs, window_start)
                         INSERT INTO usage_windows AS w (scope, window_secs, window_start, used)
                         SELECT scope, window_secs, window_start, 1 FROM counted
                         ON CONFLICT (scope, window_secs, window_start)
                           DO UPDATE SET used = w.used + 1",
                        &[
                            &call.scope,
                            &call.key,
                            &call.window_start,
                            &call.window_secs,
                            &call.created_at,
                        ],
                    )
                    .await?;
                }
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Audit rows since `since_ms`, oldest first, optionally of one client.
    pub fn audit_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<AuditRow>> {
        self.run("read audit events", Budget::Command, async |conn| {
            Ok(conn
                .query(
                    "SELECT created_at, scope, key, key_source, tool, outcome, n_hits,
                            index_generation, arguments
                       FROM audit_events
                      WHERE created_at >= $1 AND ($2::text IS NULL OR scope = $2)
                      ORDER BY created_at, event_id",
                    &[&since_ms, &client],
                )
                .await?
                .iter()
                .map(|row| AuditRow {
                    created_at: row.get(0),
                    scope: row.get(1),
                    key: row.get(2),
                    key_source: row.get(3),
                    tool: row.get(4),
                    outcome: row.get(5),
                    n_hits: row.get::<_, i64>(6) as u64,
                    index_generation: row.get::<_, i64>(7) as u64,
                    arguments: row.get(8),
                })
                .collect())
        })
    }

    /// Units per client and window since `since_ms`.
    pub fn usage_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<UsageRow>> {
        self.run("read usage", Budget::Command, async |conn| {
            Ok(conn
                .query(
                    "SELECT scope, window_start, window_secs, sum(units)::bigint FROM usage_events
                      WHERE created_at >= $1 AND ($2::text IS NULL OR scope = $2)
                      GROUP BY scope, window_start, window_secs ORDER BY window_start, scope",
                    &[&since_ms, &client],
                )
                .await?
                .iter()
                .map(|row| UsageRow {
                    client: row.get(0),
                    window_start: row.get(1),
                    window_seconds: row.get::<_, i64>(2) as u64,
                    units: row.get::<_, i64>(3) as u64,
                })
                .collect())
        })
    }
}

async fn lookup(tx: &Tx<'_>, scope: &str, key: &str) -> std::result::Result<KeyLookup, PgError> {
    let stored = tx
        .query_opt(
            "SELECT tool, fingerprint, response, is_error, index_generation, created_at, expires_at
               FROM idempotency_keys WHERE scope = $1 AND key = $2",
            &[&scope, &key],
        )
        .await?;
    if let Some(row) = stored {
        return Ok(KeyLookup::Stored(KeyRecord {
            tool: row.get(0),
            fingerprint: row.get(1),
            response: row.get(2),
            is_error: row.get(3),
            index_generation: row.get::<_, i64>(4) as u64,
            created_at: row.get(5),
            expires_at: row.get(6),
        }));
    }
    let audited = tx
        .query_opt(
            "SELECT fingerprint FROM audit_events WHERE scope = $1 AND key = $2",
            &[&scope, &key],
        )
        .await?;
    Ok(match audited {
        Some(row) => KeyLookup::Pruned {
            fingerprint: row.get(0),
        },
        None => KeyLookup::Unused,
    })
}
