//! A store whose ledger is a replica of the shared (PostgreSQL) ledger: opening one for writing
//! (the lease, then the replica brought to the shared ledger), one sync step of a serving host
//! (`sync_replica`), and collecting the shared ledger.
//!
//! Every host's `--store` is an ordinary store whose `ledger.sqlite` is a replica: its index and
//! vector index are projections of the replica by the same protocol as a store of its own.
//! A writer takes the lease, brings its replica to the shared ledger, and then publishes each
//! batch to the shared ledger before its replica commits it (`Publisher`): the replica commits
//! only what the shared ledger holds, and holds no SQLite write transaction while it waits on
//! PostgreSQL. A host that only serves pulls what others published, after its position, or a
//! whole snapshot when the log no longer reaches back to it.
//!
//! A replica copies one shared ledger (its `ledger_id`): another one (a mistyped `--ledger` or
//! `--ledger-schema`) is refused, leaving the replica untouched, unless the sync is told to
//! rebind (`OtherLedger::Rebind`).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::ids::Generation;
use crate::ledger::postgres::{PgLedger, Pulled};
use crate::ledger::{Ledger, ReplicaBinding};
use crate::store::publisher::{Lease, Publisher, hostname};
use crate::store::{CatchUp, LockWait, Store, StoreConfig, Then};

/// What bringing a replica to the shared ledger did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaSync {
    /// The replica was at the shared ledger's position.
    InStep,
    /// The changes after its position were applied.
    Pulled,
    /// It was made again from a snapshot (new, behind the log, or another ledger's).
    Bootstrapped,
}

/// What bringing a replica to the shared ledger does when the replica copies another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtherLedger {
    /// Refuses, leaving the replica as it is: a mistyped `--ledger-schema` names a new, empty
    /// ledger, and copying it would empty the replica.
    Refuse,
    /// Makes the store a replica of the given ledger, its content replaced by a copy of it.
    Rebind,
}

/// What one sync step of a replica did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// What the replica's sync did (`mirror` in JSON, as it has always been named there).
    #[serde(rename = "mirror")]
    pub replica: ReplicaSync,
    /// The shared ledger's generation the replica's index now holds.
    pub generation: u64,
    /// The shared log position the replica holds.
    pub log_seq: u64,
}

/// Where a writer writes when the ledger is shared: the ledger, and how long its lease lasts.
#[derive(Clone, Debug)]
pub struct SharedWriting {
    pub ledger: PgLedger,
    pub lease_ttl: Duration,
}

impl Store {
    /// Opens the store at `dir` for writing, the one way to: as a store of its own, or as a
    /// writer's replica of `shared` (the local lock, then the shared ledger's lease, the replica
    /// brought to the shared ledger and the index to the replica; every write then reaches the
    /// shared ledger first). A replica without its shared ledger is refused: its ledger must
    /// stay the shared one's copy.
    pub fn open_writer(
        dir: &Path,
        wait: LockWait,
        config: StoreConfig,
        shared: Option<&SharedWriting>,
    ) -> Result<(Store, CatchUp)> {
        Store::open_writer_then(dir, wait, config, shared, || ())
            .map(|(store, caught_up, ())| (store, caught_up))
    }

    /// `open_writer`, calling `once_alone` as soon as this writer holds the store alone (its
    /// lock, and the shared ledger's lease when there is one), before the ledger is brought up
    /// to date and the index opened and caught up: work that needs the store to itself but not
    /// the store open (a run's walk, `ingest::Walks`) goes on meanwhile. Returns what it made.
    pub fn open_writer_then<T>(
        dir: &Path,
        wait: LockWait,
        config: StoreConfig,
        shared: Option<&SharedWriting>,
        once_alone: impl FnOnce() -> T,
    ) -> Result<(Store, CatchUp, T)> {
        let mut once_alone = Some(once_alone);
        let mut made = None;
        let Some(shared) = shared else {
            let opened = Store::open_at(dir, wait, Then::CatchUp, config, &mut || {
                made = once_alone.take().map(|call| call());
            })
            .map_err(|err| err.in_store(dir))?;
            if opened.0.publisher.is_replica() {
                return Err(Error::Usage(format!(
                    "the store at {} is a replica of a shared ledger; writing it without the shared ledger would make the replica disagree with it\nhint: pass the same --ledger postgres://… (or use a store of its own)",
                    dir.display()
                )));
            }
            let made = made.expect("open_at calls it once the store is locked");
            return Ok((opened.0, opened.1, made));
        };
        let (mut store, _) = Store::open_at(dir, wait, Then::Nothing, config, &mut || {})
            .map_err(|err| err.in_store(dir))?;
        require_replica(&store.ledger, dir, &shared.ledger)?;
        let lease = Lease::take(&shared.ledger, wait, shared.lease_ttl)?;
        // Before the replica is brought to the shared ledger: a writer that took the lease
        // since (this one's lapsed) may add a file the walk missed, but every write of this one
        // is then refused by the lease's epoch (`postgres::log::fence` in each commit).
        let made = once_alone.take().map(|call| call());
        let synced = pull_into_replica(&mut store, &shared.ledger, OtherLedger::Refuse)?;
        store.publisher = Publisher::Shared {
            ledger: shared.ledger.clone(),
            lease,
        };
        let caught_up = match synced {
            ReplicaSync::Bootstrapped => {
                let from = store.index_generation;
                let to = store.rebuild()?;
                CatchUp::Rebuilt { from, to }
            }
            _ => store.catch_up()?,
        };
        store.sync_vectors()?;
        store.publisher.report_progress(&store.ledger, dir)?;
        Ok((store, caught_up, made.expect("called above")))
    }

    /// Opens the store at `dir` for writing and makes its index again from its ledger
    /// (`rebuild`), without replaying the log first: a rebuild must heal an index that a replay
    /// cannot write to. A replica is rebuilt from its own copy of the shared ledger, which
    /// the rebuild never writes. Returns the generation the new index holds.
    pub fn open_writer_to_rebuild(
        dir: &Path,
        wait: LockWait,
        config: StoreConfig,
    ) -> Result<(Store, Generation)> {
        let (mut store, opened) = Store::open_at(dir, wait, Then::Rebuild, config, &mut || {})
            .map_err(|err| err.in_store(dir))?;
        let generation = match opened {
            CatchUp::Replaced { to } => to,
            _ => store.rebuild()?,
        };
        Ok((store, generation))
    }
}

/// Refuses a store that holds a ledger of its own (it would be overwritten by the replica).
fn require_replica(ledger: &Ledger, dir: &Path, shared: &PgLedger) -> Result<()> {
    if ledger.replica_state()?.is_none() && !ledger.is_empty()? {
        return Err(Error::Usage(format!(
            "the store at {} holds a ledger of its own, not a replica of {}; it is left untouched\nhint: pass a --store folder for the shared ledger's replica (a new one is fine)",
            dir.display(),
            shared.describe()
        )));
    }
    Ok(())
}

/// Brings the store's replica to the shared ledger's position: the changes after its own, or a
/// snapshot. A replica of another shared ledger is refused unless `other` says to rebind. The
/// index is not touched here.
fn pull_into_replica(
    store: &mut Store,
    shared: &PgLedger,
    other: OtherLedger,
) -> Result<ReplicaSync> {
    let replica = store.ledger.replica_state()?;
    let pulled = shared.pull(replica.as_ref())?;
    if let (Some(replica), Pulled::Behind(meta)) = (&replica, &pulled)
        && replica.ledger_id != meta.ledger_id
        && other == OtherLedger::Refuse
    {
        return Err(another_ledger(store, shared, &replica.ledger_id)?);
    }
    let synced = apply_pulled(store, shared, pulled)?;
    let binding = ReplicaBinding {
        url: shared.shown_url().to_string(),
        schema: shared.schema().to_string(),
    };
    if store.ledger.replica_binding()?.as_ref() != Some(&binding) {
        store.ledger.set_replica_binding(&binding)?;
    }
    Ok(synced)
}

/// The refusal of a replica of another shared ledger, naming both.
fn another_ledger(store: &Store, shared: &PgLedger, copied_id: &str) -> Result<Error> {
    let copied = match store.ledger.replica_binding()? {
        Some(binding) => format!(
            "{} (schema {}, ledger {copied_id})",
            binding.url, binding.schema
        ),
        None => format!("ledger {copied_id}"),
    };
    Ok(Error::Usage(format!(
        "the store at {} is a replica of another shared ledger, {copied}, not of {}; it is left untouched\nhint: check --ledger and --ledger-schema; to make the store a replica of {} instead (its content replaced by a copy of that ledger), run `groundidx --ledger … --ledger-schema {} sync --rebind`",
        store.paths.dir.display(),
        shared.describe(),
        shared.describe(),
        shared.schema()
    )))
}

/// Applies what `pull` found: nothing, the changes after the replica's position, or a snapshot.
fn apply_pulled(store: &mut Store, shared: &PgLedger, pulled: Pulled) -> Result<ReplicaSync> {
    match pulled {
        Pulled::UpToDate(_) => Ok(ReplicaSync::InStep),
        Pulled::Changes {
            changes,
            vectors,
            state,
            last_run,
        } => {
            crate::crash::crash_point("replica.after_fetch");
            store
                .ledger
                .apply_changes(&changes, &vectors, &state, last_run.as_ref())?;
            crate::crash::crash_point("replica.after_commit");
            Ok(ReplicaSync::Pulled)
        }
        Pulled::Behind(_) => {
            let (snapshot, vectors, state, last_run) = shared.snapshot()?;
            store
                .ledger
                .replace_with(&snapshot, &vectors, &state, last_run.as_ref())?;
            crate::crash::crash_point("bootstrap.after_commit");
            Ok(ReplicaSync::Bootstrapped)
        }
    }
}

/// One sync step of a host's replica at `dir`: the replica to the shared ledger, the index to
/// the replica, committed, and the host's progress recorded in the shared ledger.
pub fn sync_replica(
    dir: &Path,
    wait: LockWait,
    config: StoreConfig,
    shared: &PgLedger,
    other: OtherLedger,
) -> Result<SyncReport> {
    let (mut store, _) = Store::open_at(dir, wait, Then::Nothing, config, &mut || {})
        .map_err(|err| err.in_store(dir))?;
    require_replica(&store.ledger, dir, shared)?;
    let synced = pull_into_replica(&mut store, shared, other)?;
    // A replica now, whatever it was when it opened: its ledger is written by syncs alone.
    store.publisher = Publisher::Detached;
    match synced {
        ReplicaSync::Bootstrapped => {
            store.rebuild()?;
        }
        _ => {
            store.catch_up()?;
        }
    }
    store.sync_vectors()?;
    let state = store
        .ledger
        .replica_state()?
        .ok_or_else(|| Error::Inconsistent("a synced replica has no replica state".into()))?;
    let generation: Generation = store.ledger.generation()?;
    forward_spool(&mut store.ledger, shared)?;
    store.close()?;
    crate::crash::crash_point("replica.before_progress");
    shared.report_progress(
        &host_id(dir)?,
        &hostname(),
        &dir.display().to_string(),
        &state,
        generation,
    )?;
    Ok(SyncReport {
        replica: synced,
        generation: generation.0,
        log_seq: state.log_seq,
    })
}

/// Removes the vectors of the embedding models search used before the active one from the
/// shared ledger, under the writer lease (taken as `wait` says): no writer embeds, activates a
/// model or publishes vectors meanwhile. Every replica follows at its next sync. Returns how many
/// vectors went.
pub fn gc_shared_vectors(shared: &PgLedger, wait: LockWait, lease_ttl: Duration) -> Result<u64> {
    let lease = Lease::take(shared, wait, lease_ttl)?;
    let removed = shared.remove_replaced_models(lease.epoch())?;
    lease.check()?;
    Ok(removed)
}

/// Forwards the calls this host answered while the shared ledger was away, then removes them
/// from the spool. A kill between the two forwards them again, and their `(scope, key)` keeps
/// one row each.
fn forward_spool(replica: &mut Ledger, shared: &PgLedger) -> Result<()> {
    let served_by = format!("{}/spool", hostname());
    loop {
        let calls = replica.spooled_calls(1_000)?;
        if calls.is_empty() {
            return Ok(());
        }
        shared.forward_calls(&calls, &served_by)?;
        crate::crash::crash_point("spool.after_forward");
        replica.remove_spooled(&calls)?;
        tracing::info!(
            calls = calls.len(),
            "forwarded calls answered while the shared ledger was away"
        );
    }
}

/// This store's ID as a consumer of the shared log: a UUID kept in `<store>/host.id`.
pub(crate) fn host_id(dir: &Path) -> Result<String> {
    let path = dir.join("host.id");
    if let Ok(text) = std::fs::read_to_string(&path)
        && uuid::Uuid::parse_str(text.trim()).is_ok()
    {
        return Ok(text.trim().to_string());
    }
    let id = uuid::Uuid::new_v4().to_string();
    let partial = dir.join("host.id.partial");
    std::fs::write(&partial, format!("{id}\n"))
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|err| Error::io(format!("write {}", path.display()), err))?;
    Ok(id)
}
