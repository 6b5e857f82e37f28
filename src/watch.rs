//! Watching folders: re-ingest after changes settle, for deployments that want freshness
//! without cron.
//!
//! File-system events only say *that* something may have changed; what changed is decided, as
//! always, by the ingest's stat cache and hashes, so a burst of events costs one run and an
//! event that changed nothing writes no chunk. Events on hidden paths and inside the store are
//! ignored: the store's own writes must not wake the watcher. Every run takes the writer lock
//! like any ingest, so watching mixes safely with cron.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use crate::error::{Error, Result};
use crate::ingest::{IngestConfig, IngestReport, NoProgress, canonical_root, ingest};
use crate::store::{LockWait, Store};

/// What a watcher does, and how patient it is.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    pub roots: Vec<PathBuf>,
    pub ingest: IngestConfig,
    pub wait: LockWait,
    /// How long events must stop before a run starts.
    pub settle: Duration,
}

/// Runs one ingest now, then one after every settled burst of changes, until `on_run` returns
/// false. `on_run` gets every run's outcome; a failed run does not stop the watch.
pub fn watch(
    store_dir: &Path,
    config: &WatchConfig,
    mut on_run: impl FnMut(Result<IngestReport>) -> bool,
) -> Result<()> {
    let roots: Vec<PathBuf> = config
        .roots
        .iter()
        .map(|root| canonical_root(root))
        .collect::<Result<_>>()?;
    std::fs::create_dir_all(store_dir)
        .map_err(|err| Error::io(format!("create store {}", store_dir.display()), err))?;
    let store_dir = store_dir
        .canonicalize()
        .map_err(|err| Error::io(format!("open store {}", store_dir.display()), err))?;
    let (sender, events) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // A closed channel means the watch is over; nothing to tell.
        let _ = sender.send(event);
    })
    .map_err(|err| Error::io("start watching", std::io::Error::other(err.to_string())))?;
    for root in &roots {
        watcher
            .watch(root, RecursiveMode::Recursive)
            .map_err(|err| {
                Error::io(
                    format!("watch {}", root.display()),
                    std::io::Error::other(err.to_string()),
                )
            })?;
    }
    let run_once = || -> Result<IngestReport> {
        let (mut store, _) = Store::open(&store_dir, config.wait)?;
        let report = ingest(&mut store, &roots, &config.ingest, &NoProgress)?;
        store.close()?;
        Ok(report)
    };
    if !on_run(run_once()) {
        return Ok(());
    }
    loop {
        // Wait for a change that matters, then for the burst to settle.
        loop {
            match events.recv() {
                Ok(Ok(event)) if relevant(&event, &roots, &store_dir) => {
                    tracing::debug!(paths = ?event.paths, "change seen; waiting for changes to settle");
                    break;
                }
                Ok(_) => continue,
                Err(_) => return Ok(()),
            }
        }
        loop {
            match events.recv_timeout(config.settle) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        tracing::info!("changes settled; ingesting");
        if !on_run(run_once()) {
            return Ok(());
        }
    }
}

/// True when an event touches a path under a root that is not hidden and not in the store.
fn relevant(event: &notify::Event, roots: &[PathBuf], store_dir: &Path) -> bool {
    if matches!(event.kind, notify::EventKind::Access(_)) {
        return false;
    }
    event.paths.iter().any(|path| {
        !path.starts_with(store_dir)
            && roots.iter().any(|root| {
                path.strip_prefix(root).is_ok_and(|rel| {
                    !rel.components()
                        .any(|c| c.as_os_str().as_encoded_bytes().first() == Some(&b'.'))
                })
            })
    })
}
