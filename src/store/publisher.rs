//! Where a writer's ledger writes go, decided once when the store opens: the store's own
//! ledger alone, or the shared ledger first (under the writer lease, fenced by its epoch) and
//! then this store's replica of it.
//!
//! Every ledger write a `Store` makes passes through its `Publisher`, so the lease check, the
//! epoch and the publish live here and nowhere else. A replica opened without its shared ledger
//! (`Detached`, for `rebuild`) may rewrite its projections but never its ledger: a row written
//! there alone would disagree with the shared ledger, and a vector position moved there alone
//! would make the next sync skip a page of vectors.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::embed::Fingerprint;
use crate::error::{Error, Result};
use crate::ids::ChunkId;
use crate::ledger::postgres::{LeaseGrant, PgLedger};
use crate::ledger::{Batch, BatchOutcome, Ledger, encode_vector};
use crate::store::LockWait;

/// How long a replica silent for that long stops holding the shared log back.
pub(crate) const LOG_RETENTION_SECS: u64 = 7 * 24 * 3600;

/// Where a store's ledger writes go.
pub(crate) enum Publisher {
    /// The store's ledger is its own.
    Own,
    /// The store's ledger is a replica and this writer holds the shared ledger's lease: each
    /// write reaches the shared ledger first.
    Shared { ledger: PgLedger, lease: Lease },
    /// The store's ledger is a replica opened without its shared ledger: only the index and
    /// the vector index may be written.
    Detached,
}

impl Publisher {
    /// Whether the store's ledger is a replica of a shared ledger.
    pub(crate) fn is_replica(&self) -> bool {
        !matches!(self, Publisher::Own)
    }

    /// The lease this store writes under, when it holds one.
    pub(crate) fn lease(&self) -> Option<&Lease> {
        match self {
            Publisher::Shared { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// Fails unless the store's ledger may be written by this writer.
    fn writable(&self, what: &str, dir: &Path) -> Result<()> {
        match self {
            Publisher::Own => Ok(()),
            Publisher::Shared { lease, .. } => lease.check(),
            Publisher::Detached => Err(detached(what, dir)),
        }
    }

    /// Commits one batch: to the store's ledger alone, or to the shared ledger first and then
    /// to the replica at the position the shared ledger gave it.
    pub(crate) fn apply_batch(
        &self,
        ledger: &mut Ledger,
        batch: &Batch,
        dir: &Path,
    ) -> Result<BatchOutcome> {
        self.writable("commit a batch", dir)?;
        let Publisher::Shared {
            ledger: shared,
            lease,
        } = self
        else {
            return ledger.apply_batch(batch);
        };
        let expected = ledger.replica_state()?.map_or(0, |state| state.log_seq);
        let epoch = lease.epoch();
        ledger.apply_batch_publishing(batch, &mut |changes| {
            shared.publish(epoch, expected, changes)
        })
    }

    /// Stores one page of vectors: in the shared ledger first (at its next vector position),
    /// then in the replica at that position. A kill between the two leaves the page in the
    /// shared ledger, which the replica copies at its next sync; vectors are insert-only.
    pub(crate) fn insert_vectors(
        &self,
        ledger: &mut Ledger,
        fingerprint: &Fingerprint,
        vectors: &[(ChunkId, Vec<f32>)],
        dir: &Path,
    ) -> Result<u64> {
        self.writable("store vectors", dir)?;
        let Publisher::Shared {
            ledger: shared,
            lease,
        } = self
        else {
            return ledger.insert_vectors(fingerprint, vectors);
        };
        let encoded: Vec<(ChunkId, Vec<u8>)> = vectors
            .iter()
            .map(|(id, vector)| (*id, encode_vector(vector)))
            .collect();
        let seq = shared.publish_vectors(lease.epoch(), &fingerprint.0, &encoded)?;
        ledger.insert_vectors_at(fingerprint, vectors, Some(seq))
    }

    /// Runs `write` on the store's ledger, then publishes the model's row as it now stands.
    pub(crate) fn model(
        &self,
        ledger: &mut Ledger,
        fingerprint: &Fingerprint,
        dir: &Path,
        write: impl FnOnce(&mut Ledger) -> Result<()>,
    ) -> Result<()> {
        self.write_then_publish(
            ledger,
            "record a model",
            dir,
            write,
            |ledger, shared, lease| match ledger.model_record(&fingerprint.0)? {
                Some(record) => shared.publish_model(lease.epoch(), &record),
                None => Ok(()),
            },
        )
    }

    /// Runs `write` on the store's ledger, then publishes the run's row as it now stands.
    pub(crate) fn run(
        &self,
        ledger: &mut Ledger,
        run_id: &str,
        dir: &Path,
        write: impl FnOnce(&mut Ledger) -> Result<()>,
    ) -> Result<()> {
        self.write_then_publish(
            ledger,
            "record a run",
            dir,
            write,
            |ledger, shared, lease| match ledger.run_row(run_id)? {
                Some(run) => shared.publish_run(lease.epoch(), lease.holder(), &run),
                None => Ok(()),
            },
        )
    }

    /// Runs `write` on the store's ledger when this writer may write it, then, under a held
    /// lease, `publish` (which reads back the row as it now stands).
    fn write_then_publish(
        &self,
        ledger: &mut Ledger,
        what: &str,
        dir: &Path,
        write: impl FnOnce(&mut Ledger) -> Result<()>,
        publish: impl FnOnce(&Ledger, &PgLedger, &Lease) -> Result<()>,
    ) -> Result<()> {
        self.writable(what, dir)?;
        write(ledger)?;
        let Publisher::Shared {
            ledger: shared,
            lease,
        } = self
        else {
            return Ok(());
        };
        lease.check()?;
        publish(ledger, shared, lease)
    }

    /// Removes the vectors of `model` that are not `dims` f32s, so the next embedding run
    /// makes them again: in a store of its own. A replica's vectors are the shared ledger's
    /// pages at their positions, so a damaged one is left (out of the vector index) and only
    /// reported.
    pub(crate) fn remove_damaged_vectors(
        &self,
        ledger: &mut Ledger,
        model: &Fingerprint,
        dims: usize,
        dir: &Path,
    ) -> Result<()> {
        // A store that became a replica since it opened (a new store's first sync) is one too.
        if self.is_replica() || ledger.replica_state()?.is_some() {
            let damaged = ledger.damaged_vectors(model, dims)?.len();
            if damaged > 0 {
                tracing::warn!(
                    damaged,
                    store = %dir.display(),
                    "this replica holds damaged vectors; they are left out of the vector index (to copy the shared ledger again, remove the store folder and run `groundidx sync`)"
                );
            }
            return Ok(());
        }
        let removed = ledger.remove_damaged_vectors(model, dims)?;
        if removed > 0 {
            tracing::warn!(
                removed,
                "removed damaged vectors from the ledger; the next embedding run makes them again"
            );
        }
        Ok(())
    }

    /// Records in the shared ledger how far this store's replica is, so the log is kept for it
    /// (a writer's replica is a consumer like a server's: pruning past it would cost it a
    /// snapshot at its next run).
    pub(crate) fn report_progress(&self, ledger: &Ledger, dir: &Path) -> Result<()> {
        let Publisher::Shared { ledger: shared, .. } = self else {
            return Ok(());
        };
        let Some(state) = ledger.replica_state()? else {
            return Ok(());
        };
        shared.report_progress(
            &super::replica::host_id(dir)?,
            &hostname(),
            &dir.display().to_string(),
            &state,
            ledger.generation()?,
        )
    }

    /// Ends the writer's turn: prunes the shared log below the slowest replica and gives the
    /// lease back.
    pub(crate) fn close(self) {
        if let Publisher::Shared { ledger, lease } = self {
            if let Err(err) = ledger.prune_log(LOG_RETENTION_SECS) {
                tracing::warn!(error = %err, "could not prune the shared log; the next writer does");
            }
            drop(lease);
        }
    }
}

/// The refusal of a ledger write by a replica opened without its shared ledger.
fn detached(what: &str, dir: &Path) -> Error {
    Error::Usage(format!(
        "cannot {what}: the store at {} is a replica of a shared ledger, opened without it\nhint: pass the same --ledger postgres://… (or use a store of its own)",
        dir.display()
    ))
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
            *stopped
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
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
    let mut guard = stopped
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let (next, _) = wake
            .wait_timeout(guard, every)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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

/// The machine's name, for lease holders and consumer rows.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
