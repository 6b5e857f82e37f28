//! A store whose ledger mirrors the shared (PostgreSQL) ledger: the writer lease, bringing the
//! mirror up to the shared ledger (`sync_mirror`), and one sync step of a serving host
//! (`sync_replica`).
//!
//! Every host's `--store` is an ordinary store whose `ledger.sqlite` is a mirror: its index and
//! vector index are projections of the mirror by the same protocol as a store of its own.
//! A writer takes the lease, brings its mirror to the shared ledger, and then publishes each
//! batch to the shared ledger before its mirror commits it (`Ledger::apply_batch_publishing`):
//! the mirror commits only what the shared ledger holds, and holds no SQLite write transaction
//! while it waits on PostgreSQL.
//! A host that only serves pulls what others published, after its position, or a whole
//! snapshot when the log no longer reaches back to it.
//!
//! A mirror copies one shared ledger (its `ledger_id`): another one (a mistyped `--ledger` or
//! `--ledger-schema`) is refused, leaving the mirror untouched, unless the sync is told to
//! rebind (`OtherLedger::Rebind`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::embed::Fingerprint;
use crate::error::{Error, Result};
use crate::ids::ChunkId;
use crate::ids::Generation;
use crate::ledger::postgres::{LeaseGrant, PgLedger, Pulled};
use crate::ledger::{Ledger, MirrorBinding, encode_vector};
use crate::store::{CatchUp, LockWait, Store, StoreConfig, Then};

/// The default time a writer's lease lasts without renewal.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// How long a mirror silent for that long stops holding the shared log back.
pub const LOG_RETENTION_SECS: u64 = 7 * 24 * 3600;

/// What bringing a mirror to the shared ledger did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MirrorSync {
    /// The mirror was at the shared ledger's position.
    InStep,
    /// The changes after its position were applied.
    Pulled,
    /// It was made again from a snapshot (new, behind the log, or another ledger's).
    Bootstrapped,
}

/// What bringing a mirror to the shared ledger does when the mirror copies another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtherLedger {
    /// Refuses, leaving the mirror as it is: a mistyped `--ledger-schema` names a new, empty
    /// ledger, and copying it would empty the replica.
    Refuse,
    /// Makes the store a mirror of the given ledger, its content replaced by a copy of it.
    Rebind,
}

/// What one sync step of a replica did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    pub mirror: MirrorSync,
    /// The shared ledger's generation the replica's index now holds.
    pub generation: u64,
    /// The shared log position the mirror holds.
    pub log_seq: u64,
}

/// A held writer lease, renewed by a thread of its own until dropped (then released).
pub struct Lease {
    ledger: PgLedger,
    grant: LeaseGrant,
    lost: Arc<AtomicBool>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    renewer: Option<JoinHandle<()>>,
}

impl Lease {
    /// Takes the lease, waiting for it as `wait` says (polling every 500 ms).
    pub fn take(ledger: &PgLedger, wait: LockWait, ttl: Duration) -> Result<Lease> {
        let ttl_secs = ttl.as_secs().max(1);
        let holder = format!(
            "{}/{}/{}",
            hostname(),
            std::process::id(),
            uuid::Uuid::new_v4()
        );
        let deadline = match wait {
            LockWait::NoWait => Instant::now(),
            LockWait::Wait(duration) => Instant::now() + duration,
        };
        let mut told = false;
        let grant = loop {
            if let Some(grant) = ledger.take_lease(&holder, ttl_secs)? {
                break grant;
            }
            if Instant::now() >= deadline {
                return Err(crate::ledger::postgres::lease_busy(&ledger.lease()?));
            }
            if !told {
                tracing::info!("another writer holds the shared ledger's lease; waiting");
                told = true;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        crate::crash::crash_point("lease.after_take");
        let lost = Arc::new(AtomicBool::new(false));
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let renewer = {
            let (ledger, grant, lost, stop) = (
                ledger.clone(),
                grant.clone(),
                Arc::clone(&lost),
                Arc::clone(&stop),
            );
            std::thread::Builder::new()
                .name("groundidx-lease".into())
                .spawn(move || renew(&ledger, &grant, ttl_secs, &lost, &stop))
                .map_err(|err| Error::io("start the lease's renewal thread", err))?
        };
        Ok(Lease {
            ledger: ledger.clone(),
            grant,
            lost,
            stop,
            renewer: Some(renewer),
        })
    }

    pub fn epoch(&self) -> i64 {
        self.grant.epoch
    }

    pub fn holder(&self) -> &str {
        &self.grant.holder
    }

    /// Fails once the lease is known to be another's.
    pub fn check(&self) -> Result<()> {
        if self.lost.load(Ordering::Relaxed) {
            return Err(Error::LeaseLost {
                context: "another writer took it while this one ran".into(),
            });
        }
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        {
            let (stopped, wake) = &*self.stop;
            *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
            wake.notify_all();
        }
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        crate::crash::crash_point("lease.before_release");
        if let Err(err) = self.ledger.release_lease(&self.grant) {
            tracing::warn!(error = %err, "could not release the writer lease; it expires by itself");
        }
    }
}

fn renew(
    ledger: &PgLedger,
    grant: &LeaseGrant,
    ttl_secs: u64,
    lost: &AtomicBool,
    stop: &(Mutex<bool>, Condvar),
) {
    let every = Duration::from_millis(ttl_secs * 1000 / 3).max(Duration::from_millis(300));
    let (stopped, wake) = stop;
    let mut guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let (next, _) = wake
            .wait_timeout(guard, every)
            .unwrap_or_else(|e| e.into_inner());
        guard = next;
        if *guard {
            return;
        }
        match ledger.renew_lease(grant, ttl_secs) {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("the writer lease was taken by another writer");
                lost.store(true, Ordering::Relaxed);
                return;
            }
            // Unreachable for now: the next renewal tries again, and the fence stops every
            // write if another writer takes the lease meanwhile.
            Err(err) => tracing::warn!(error = %err, "could not renew the writer lease"),
        }
    }
}

/// Where a writer writes when the ledger is shared: the ledger, and how long its lease lasts.
#[derive(Clone, Debug)]
pub struct SharedWriting {
    pub ledger: PgLedger,
    pub lease_ttl: Duration,
}

/// The shared ledger a writer's store publishes to, under its lease.
pub(crate) struct SharedWriter {
    pub(crate) ledger: PgLedger,
    pub(crate) lease: Lease,
}

impl Store {
    /// Opens the store at `dir` as a writer's mirror of `shared`: takes the local lock, then
    /// the shared ledger's lease, brings the mirror to the shared ledger and the index to the
    /// mirror. Every batch staged then is published to the shared ledger.
    pub fn open_shared(
        dir: &Path,
        wait: LockWait,
        config: StoreConfig,
        shared: &PgLedger,
        lease_ttl: Duration,
    ) -> Result<(Store, CatchUp)> {
        let (mut store, _) =
            Store::open_at(dir, wait, Then::Nothing, config).map_err(|err| err.in_store(dir))?;
        require_mirror(&store.ledger, dir, shared)?;
        let lease = Lease::take(shared, wait, lease_ttl)?;
        let synced = sync_mirror(&mut store, shared, OtherLedger::Refuse)?;
        store.shared = Some(SharedWriter {
            ledger: shared.clone(),
            lease,
        });
        let caught_up = match synced {
            MirrorSync::Bootstrapped => {
                let from = store.index_generation;
                let to = store.rebuild()?;
                CatchUp::Rebuilt { from, to }
            }
            _ => store.catch_up()?,
        };
        store.sync_vectors()?;
        store.report_progress()?;
        Ok((store, caught_up))
    }

    /// Opens the store at `dir` for writing: as a store of its own (`open_with`, which a mirror
    /// refuses: its ledger must stay the shared one's copy), or as a mirror of `shared`
    /// (`open_shared`).
    pub fn open_writer(
        dir: &Path,
        wait: LockWait,
        config: StoreConfig,
        shared: Option<&SharedWriting>,
    ) -> Result<(Store, CatchUp)> {
        let Some(shared) = shared else {
            let opened = Store::open_with(dir, wait, config)?;
            if opened.0.ledger.replica_state()?.is_some() {
                return Err(Error::Usage(format!(
                    "the store at {} is a mirror of a shared ledger; an ingest without it would make the mirror disagree with it\nhint: pass the same --ledger postgres://… (or ingest into a store of its own)",
                    dir.display()
                )));
            }
            return Ok(opened);
        };
        Store::open_shared(dir, wait, config, &shared.ledger, shared.lease_ttl)
    }

    /// Records in the shared ledger how far this store's mirror is, so the log is kept for it
    /// (a writer's mirror is a consumer like a server's: pruning past it would cost it a
    /// snapshot at its next run).
    pub(crate) fn report_progress(&self) -> Result<()> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let Some(state) = self.ledger.replica_state()? else {
            return Ok(());
        };
        shared.ledger.report_progress(
            &host_id(&self.paths.dir)?,
            &hostname(),
            &self.paths.dir.display().to_string(),
            &state,
            self.ledger.generation()?,
        )
    }

    /// Records a model the first time a run uses it (in the shared ledger too).
    pub fn register_model(
        &mut self,
        fingerprint: &Fingerprint,
        description: &serde_json::Value,
        dims: usize,
        now_ms: i64,
    ) -> Result<()> {
        self.ledger
            .register_model(fingerprint, description, dims, now_ms)?;
        self.publish_model(fingerprint)
    }

    /// Makes `fingerprint` the model search uses (on every host).
    pub fn activate_model(&mut self, fingerprint: &Fingerprint, now_ms: i64) -> Result<()> {
        self.ledger.activate_model(fingerprint, now_ms)?;
        self.publish_model(fingerprint)
    }

    /// Records that `model`'s vectors cover every chunk of `generation` (on every host).
    pub fn mark_model_complete(
        &mut self,
        fingerprint: &Fingerprint,
        generation: Generation,
    ) -> Result<()> {
        self.ledger.mark_model_complete(fingerprint, generation)?;
        self.publish_model(fingerprint)
    }

    /// Stores one page of vectors: in the shared ledger first (at its next vector position),
    /// then in the mirror at that position. A kill between the two leaves the page in the
    /// shared ledger, which the mirror copies at its next sync; vectors are insert-only.
    pub fn insert_vectors(
        &mut self,
        fingerprint: &Fingerprint,
        vectors: &[(ChunkId, Vec<f32>)],
    ) -> Result<u64> {
        let Some(shared) = &self.shared else {
            return self.ledger.insert_vectors(fingerprint, vectors);
        };
        shared.lease.check()?;
        let encoded: Vec<(ChunkId, Vec<u8>)> = vectors
            .iter()
            .map(|(id, vector)| (*id, encode_vector(vector)))
            .collect();
        let seq = shared
            .ledger
            .publish_vectors(shared.lease.epoch(), &fingerprint.0, &encoded)?;
        self.ledger
            .insert_vectors_at(fingerprint, vectors, Some(seq))
    }

    fn publish_model(&self, fingerprint: &Fingerprint) -> Result<()> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let Some(record) = self.ledger.model_record(&fingerprint.0)? else {
            return Ok(());
        };
        shared.lease.check()?;
        shared.ledger.publish_model(shared.lease.epoch(), &record)
    }

    /// The lease this store writes under, when it mirrors a shared ledger.
    pub fn lease(&self) -> Option<&Lease> {
        self.shared.as_ref().map(|shared| &shared.lease)
    }
}

/// Refuses a store that holds a ledger of its own (it would be overwritten by the mirror).
fn require_mirror(ledger: &Ledger, dir: &Path, shared: &PgLedger) -> Result<()> {
    if ledger.replica_state()?.is_none() && !ledger.is_empty()? {
        return Err(Error::Usage(format!(
            "the store at {} holds a ledger of its own, not a mirror of {}; it is left untouched\nhint: pass a --store folder for the shared ledger's mirror (a new one is fine)",
            dir.display(),
            shared.describe()
        )));
    }
    Ok(())
}

/// Brings the store's mirror to the shared ledger's position: the changes after its own, or a
/// snapshot. A mirror of another shared ledger is refused unless `other` says to rebind. The
/// index is not touched here.
fn sync_mirror(store: &mut Store, shared: &PgLedger, other: OtherLedger) -> Result<MirrorSync> {
    let mirror = store.ledger.replica_state()?;
    let pulled = shared.pull(mirror.as_ref())?;
    if let (Some(mirror), Pulled::Behind(meta)) = (&mirror, &pulled)
        && mirror.ledger_id != meta.ledger_id
        && other == OtherLedger::Refuse
    {
        return Err(another_ledger(store, shared, &mirror.ledger_id)?);
    }
    let synced = apply_pulled(store, shared, pulled)?;
    let binding = MirrorBinding {
        url: shared.shown_url().to_string(),
        schema: shared.schema().to_string(),
    };
    if store.ledger.mirror_binding()?.as_ref() != Some(&binding) {
        store.ledger.set_mirror_binding(&binding)?;
    }
    Ok(synced)
}

/// The refusal of a mirror of another shared ledger, naming both.
fn another_ledger(store: &Store, shared: &PgLedger, mirrored_id: &str) -> Result<Error> {
    let mirrored = match store.ledger.mirror_binding()? {
        Some(binding) => format!(
            "{} (schema {}, ledger {mirrored_id})",
            binding.url, binding.schema
        ),
        None => format!("ledger {mirrored_id}"),
    };
    Ok(Error::Usage(format!(
        "the store at {} is a mirror of another shared ledger, {mirrored}, not of {}; it is left untouched\nhint: check --ledger and --ledger-schema; to make the store a mirror of {} instead (its content replaced by a copy of that ledger), run `groundidx --ledger … --ledger-schema {} sync --rebind`",
        store.paths.dir.display(),
        shared.describe(),
        shared.describe(),
        shared.schema()
    )))
}

/// Applies what `pull` found: nothing, the changes after the mirror's position, or a snapshot.
fn apply_pulled(store: &mut Store, shared: &PgLedger, pulled: Pulled) -> Result<MirrorSync> {
    match pulled {
        Pulled::UpToDate(_) => Ok(MirrorSync::InStep),
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
            crate::crash::crash_point("replica.after_mirror_commit");
            Ok(MirrorSync::Pulled)
        }
        Pulled::Behind(_) => {
            let (snapshot, vectors, state, last_run) = shared.snapshot()?;
            store
                .ledger
                .replace_with(&snapshot, &vectors, &state, last_run.as_ref())?;
            crate::crash::crash_point("bootstrap.after_commit");
            Ok(MirrorSync::Bootstrapped)
        }
    }
}

/// One sync step of a host's replica at `dir`: the mirror to the shared ledger, the index to
/// the mirror, committed, and the host's progress recorded in the shared ledger.
pub fn sync_replica(
    dir: &Path,
    wait: LockWait,
    config: StoreConfig,
    shared: &PgLedger,
    other: OtherLedger,
) -> Result<SyncReport> {
    let (mut store, _) =
        Store::open_at(dir, wait, Then::Nothing, config).map_err(|err| err.in_store(dir))?;
    require_mirror(&store.ledger, dir, shared)?;
    let synced = sync_mirror(&mut store, shared, other)?;
    match synced {
        MirrorSync::Bootstrapped => {
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
        .ok_or_else(|| Error::Inconsistent("a synced mirror has no replica state".into()))?;
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
        mirror: synced,
        generation: generation.0,
        log_seq: state.log_seq,
    })
}

/// Removes the vectors of the embedding models search used before the active one from the
/// shared ledger, under the writer lease (taken as `wait` says): no writer embeds, activates a
/// model or publishes vectors meanwhile. Every mirror follows at its next sync. Returns how many
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
fn forward_spool(mirror: &mut Ledger, shared: &PgLedger) -> Result<()> {
    let served_by = format!("{}/spool", hostname());
    loop {
        let calls = mirror.spooled_calls(1_000)?;
        if calls.is_empty() {
            return Ok(());
        }
        shared.forward_calls(&calls, &served_by)?;
        crate::crash::crash_point("spool.after_forward");
        mirror.remove_spooled(&calls)?;
        tracing::info!(
            calls = calls.len(),
            "forwarded calls answered while the shared ledger was away"
        );
    }
}

/// This store's ID as a consumer of the shared log: a UUID kept in `<store>/host.id`.
fn host_id(dir: &Path) -> Result<String> {
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

/// The machine's name, for lease holders and consumer rows.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
