//! Where the agent path records its calls, chosen once when the agent opens: the store's own
//! ledger, or the shared ledger, with this host's replica spooling what it answers while the
//! shared ledger cannot be reached.
//!
//! `CallLedger` is what both ledgers do for the agent path (look a key up, record a call, count
//! units, list audit and usage rows, prune keys); `Recorder` is the one value the agent holds
//! and the only place that knows which ledger records a call and what happens while the shared
//! one is away.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::group_commit::GroupCommit;
use super::{CallError, KeySource, is_unreachable, unavailable};
use crate::clock;
use crate::error::{Error, Result};
use crate::ledger::postgres::{PgLedger, SharedCall};
use crate::ledger::{
    Access, AuditRow, KeyLookup, Ledger, LedgerPool, NewCall, READ_CONNECTIONS, RecordOutcome,
    UsageRow,
};
use crate::store::StorePaths;

/// What a ledger does for the agent path; the store's own (SQLite) and the shared (PostgreSQL)
/// ledger both implement it.
pub trait CallLedger: Send + Sync {
    /// How `key` was used in `scope`: never, with a stored answer, or pruned.
    fn lookup_key(&self, scope: &str, key: &str) -> Result<KeyLookup>;

    /// Records one call in one transaction (its key, audit row and usage unit) unless its key
    /// is already used, its scope over the quota, or it was cancelled before the commit.
    /// Returns the outcome and the time its window and expiry were decided by (the database's
    /// for the shared ledger).
    fn record_call(
        &self,
        call: &NewCall<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(RecordOutcome, i64)>;

    /// The units `scope` used in the `window_secs` window holding `now_ms` (the shared ledger
    /// reads its own clock), with the time that decided the window.
    fn units_used(&self, scope: &str, window_secs: u64, now_ms: i64) -> Result<(u64, i64)>;

    /// The audit rows since `since_ms`, of one client or all, oldest first.
    fn audit_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<AuditRow>>;

    /// The units used per client and window since `since_ms`.
    fn usage_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<UsageRow>>;

    /// Deletes the key records that expired by `now_ms` (the shared ledger by its own clock),
    /// and nothing else; returns how many.
    fn prune_keys(&self, now_ms: i64) -> Result<u64>;
}

/// A store's own ledger as the agent path uses it: read-only connections for lookups and
/// quotas, and one connection for the writes (SQLite takes one writer at a time in any case),
/// which records the calls that arrive together in one transaction (`GroupCommit`); absent on
/// a read-only mount.
pub(crate) struct LocalCalls {
    dir: std::path::PathBuf,
    reads: LedgerPool,
    writes: Option<GroupCommit>,
}

impl LocalCalls {
    /// Opens the ledger of the store at `dir` (which must exist) for the agent path.
    pub fn open(dir: &Path, busy_timeout: Duration) -> Result<LocalCalls> {
        let path = StorePaths::new(dir).existing_ledger()?;
        let writes = if crate::ledger::on_read_only_mount(&path) {
            None
        } else {
            let ledger = Ledger::open(&path, Access::ReadWrite)?;
            ledger.set_busy_timeout(busy_timeout)?;
            ledger.journal_calls_in_memory()?;
            Some(GroupCommit::new(ledger))
        };
        Ok(LocalCalls {
            dir: dir.to_path_buf(),
            reads: LedgerPool::open_unmapped(&path, READ_CONNECTIONS)?,
            writes,
        })
    }

    /// Opens the ledger of the store at `dir` (which must exist) for its reads alone.
    pub fn open_for_reading(dir: &Path) -> Result<LocalCalls> {
        let path = StorePaths::new(dir).existing_ledger()?;
        Ok(LocalCalls {
            dir: dir.to_path_buf(),
            reads: LedgerPool::open_unmapped(&path, READ_CONNECTIONS)
                .map_err(|err| err.in_store(dir))?,
            writes: None,
        })
    }

    /// Whether calls can be recorded here (not on a read-only mount).
    pub fn writable(&self) -> bool {
        self.writes.is_some()
    }

    /// The read connections, for the agent's other reads of the ledger.
    pub fn reads(&self) -> &LedgerPool {
        &self.reads
    }

    fn writer(&self) -> Result<&GroupCommit> {
        self.writes.as_ref().ok_or_else(|| {
            Error::io(
                format!("write to the store at {}", self.dir.display()),
                std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem),
            )
        })
    }
}

impl CallLedger for LocalCalls {
    fn lookup_key(&self, scope: &str, key: &str) -> Result<KeyLookup> {
        self.reads.get()?.lookup_key(scope, key)
    }

    fn record_call(
        &self,
        call: &NewCall<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(RecordOutcome, i64)> {
        let outcome = self.writer()?.record(call, cancelled)?;
        Ok((outcome, call.now_ms))
    }

    fn units_used(&self, scope: &str, window_secs: u64, now_ms: i64) -> Result<(u64, i64)> {
        let start = clock::window_start(now_ms, window_secs);
        // The writer's count is a shortcut: when it cannot be read, the rows answer (and say
        // why they cannot).
        if let Some(writer) = &self.writes
            && let Ok(Some(used)) = writer.units_used(scope, start)
        {
            return Ok((used, now_ms));
        }
        Ok((self.reads.get()?.units_used(scope, start)?, now_ms))
    }

    fn audit_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<AuditRow>> {
        self.reads.get()?.audit_rows(since_ms, client)
    }

    fn usage_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<UsageRow>> {
        self.reads.get()?.usage_rows(since_ms, client)
    }

    /// A replica is refused: what it holds is the shared ledger's, and rows removed here alone
    /// (behind the replica's position) would never come back.
    fn prune_keys(&self, now_ms: i64) -> Result<u64> {
        if self.reads.get()?.replica_state()?.is_some() {
            return Err(Error::Usage(format!(
                "the store at {} is a replica of a shared ledger; gc without it would remove rows the shared ledger still holds\nhint: pass the same --ledger postgres://… (gc then collects the shared ledger, and every replica follows at its next sync)",
                self.dir.display()
            )));
        }
        self.writer()?.exclusive(|ledger| ledger.prune_keys(now_ms))
    }
}

/// The shared ledger as the agent path uses it: every host's keys, audit, usage and rate limit
/// in one PostgreSQL transaction per call.
pub(crate) struct SharedCalls {
    ledger: PgLedger,
    /// This host's name in the audit rows.
    served_by: String,
    /// How long a key's answer is kept.
    ttl_ms: i64,
}

impl SharedCalls {
    pub fn new(ledger: PgLedger, served_by: String, ttl_ms: i64) -> SharedCalls {
        SharedCalls {
            ledger,
            served_by,
            ttl_ms,
        }
    }
}

impl CallLedger for SharedCalls {
    fn lookup_key(&self, scope: &str, key: &str) -> Result<KeyLookup> {
        self.ledger.lookup_key(scope, key)
    }

    fn record_call(
        &self,
        call: &NewCall<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(RecordOutcome, i64)> {
        let shared = SharedCall {
            ttl_ms: self.ttl_ms,
            served_by: &self.served_by,
        };
        self.ledger.record_call(call, shared, cancelled)
    }

    fn units_used(&self, scope: &str, window_secs: u64, _now_ms: i64) -> Result<(u64, i64)> {
        self.ledger.units_used(scope, window_secs)
    }

    fn audit_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<AuditRow>> {
        self.ledger.audit_rows(since_ms, client)
    }

    fn usage_rows(&self, since_ms: i64, client: Option<&str>) -> Result<Vec<UsageRow>> {
        self.ledger.usage_rows(since_ms, client)
    }

    fn prune_keys(&self, _now_ms: i64) -> Result<u64> {
        self.ledger.prune_keys()
    }
}

/// The call ledger of the store at `dir` outside a server: the shared ledger when one is
/// given, else the store's own, opened for reading alone (`audit`, `usage`: never creating,
/// upgrading or waiting on the ledger) or to prune (`gc`).
pub fn call_ledger(
    dir: &Path,
    shared: Option<PgLedger>,
    access: Access,
) -> Result<Box<dyn CallLedger>> {
    Ok(match (shared, access) {
        (Some(ledger), _) => Box::new(SharedCalls::new(ledger, String::new(), 0)),
        (None, Access::ReadOnly) => Box::new(LocalCalls::open_for_reading(dir)?),
        (None, Access::ReadWrite) => Box::new(LocalCalls::open(dir, Duration::from_secs(5))?),
    })
}

/// What recording a call came to.
pub(super) struct Recorded {
    pub outcome: RecordOutcome,
    /// The time that decided the call's window (the shared ledger's clock, when it recorded it).
    pub now_ms: i64,
    /// Recorded in this host's spool while the shared ledger was away, or not at all on a
    /// read-only mount: the answer says it is read-only.
    pub read_only: bool,
}

/// Where the agent path records its calls.
pub(super) enum Recorder {
    /// The store's own ledger.
    Local(LocalCalls),
    /// The shared ledger, with this host's replica as the spool of the unkeyed calls answered
    /// while it cannot be reached.
    Shared {
        shared: SharedCalls,
        spool: LocalCalls,
        /// Since when (ms) and why the shared ledger could not be reached, while it cannot.
        away: Mutex<Option<(i64, String)>>,
    },
}

impl Recorder {
    /// The local ledger: the store's own, or the replica that spools.
    pub(super) fn local(&self) -> &LocalCalls {
        match self {
            Recorder::Local(local) => local,
            Recorder::Shared { spool, .. } => spool,
        }
    }

    pub(super) fn is_shared(&self) -> bool {
        matches!(self, Recorder::Shared { .. })
    }

    /// Whether the shared ledger answered the last time it was asked: `Err` says since when
    /// (ms) and why not. Always `Ok` for the store's own ledger.
    pub(super) fn reachable(&self) -> std::result::Result<(), (i64, String)> {
        match self {
            Recorder::Local(_) => Ok(()),
            Recorder::Shared { away, .. } => {
                match &*away
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                {
                    Some(problem) => Err(problem.clone()),
                    None => Ok(()),
                }
            }
        }
    }

    /// Records whether the shared ledger answered: while it does not, caller-keyed calls are
    /// refused at once and unkeyed ones answered from the replica and spooled.
    pub(super) fn note(&self, outcome: std::result::Result<(), &Error>) {
        let Recorder::Shared { away, .. } = self else {
            return;
        };
        let mut state = away
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match outcome {
            Ok(()) => *state = None,
            Err(err) if is_unreachable(err) => {
                if state.is_none() {
                    tracing::warn!(error = %err, "the shared ledger cannot be reached: read-only until it answers");
                    *state = Some((clock::now_ms(), err.to_string()));
                }
            }
            Err(_) => {}
        }
    }

    /// Whether a call with a new key can be recorded somewhere that a retry will find it.
    pub(super) fn records_new_keys(&self) -> bool {
        match self {
            Recorder::Local(local) => local.writable(),
            Recorder::Shared { .. } => true,
        }
    }

    /// How a caller's key was used in `scope`. While the shared ledger is away a caller-keyed
    /// call is refused: only the shared ledger knows whether another host answered it.
    pub(super) fn lookup(&self, scope: &str, key: &str) -> Result<KeyLookup, CallError> {
        match self {
            Recorder::Local(local) => local.lookup_key(scope, key).map_err(unavailable),
            Recorder::Shared { shared, .. } => {
                if let Err((_, why)) = self.reachable() {
                    return Err(CallError::Unavailable(format!(
                        "the shared ledger cannot be reached, so this call could not be recorded ({why}); retry with the same key"
                    )));
                }
                let found = shared.lookup_key(scope, key);
                self.note(found.as_ref().map(|_| ()));
                found.map_err(unavailable)
            }
        }
    }

    /// Records one answered call. An unkeyed call while the shared ledger is away (or found
    /// away now) goes to this host's spool, limited by this host's count meanwhile; on a
    /// read-only mount it is answered unrecorded (`None`).
    pub(super) fn record(
        &self,
        call: &NewCall<'_>,
        source: KeySource,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<Recorded>, CallError> {
        let spooled = |spool: &LocalCalls| -> Result<Option<Recorded>, CallError> {
            let (outcome, now_ms) = spool.record_call(call, cancelled).map_err(unavailable)?;
            Ok(Some(Recorded {
                outcome,
                now_ms,
                read_only: true,
            }))
        };
        match self {
            Recorder::Local(local) if !local.writable() => Ok(None),
            Recorder::Local(local) => {
                let (outcome, now_ms) = local.record_call(call, cancelled).map_err(unavailable)?;
                Ok(Some(Recorded {
                    outcome,
                    now_ms,
                    read_only: false,
                }))
            }
            Recorder::Shared { spool, .. }
                if source == KeySource::Server && self.reachable().is_err() =>
            {
                spooled(spool)
            }
            Recorder::Shared { shared, spool, .. } => {
                let recorded = shared.record_call(call, cancelled);
                self.note(recorded.as_ref().map(|_| ()));
                match recorded {
                    Ok((outcome, now_ms)) => Ok(Some(Recorded {
                        outcome,
                        now_ms,
                        read_only: false,
                    })),
                    Err(err) if source == KeySource::Server && is_unreachable(&err) => {
                        spooled(spool)
                    }
                    Err(err) => Err(unavailable(err)),
                }
            }
        }
    }

    /// The units `scope` used in the window holding `now_ms`, and the time that decided it:
    /// the shared ledger's count while it answers, else this host's.
    pub(super) fn units_used(
        &self,
        scope: &str,
        window_secs: u64,
        now_ms: i64,
    ) -> Result<(u64, i64), CallError> {
        match self {
            Recorder::Shared { shared, .. } if self.reachable().is_ok() => shared
                .units_used(scope, window_secs, now_ms)
                .map_err(unavailable),
            _ => self
                .local()
                .units_used(scope, window_secs, now_ms)
                .map_err(unavailable),
        }
    }
}
