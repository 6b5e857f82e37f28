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
    /// The shared ledger each run publishes to, when there is one.
    pub shared: Option<crate::store::SharedWriting>,
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
        let (mut store, _) = Store::open_writer(
            &store_dir,
            config.wait,
            config.ingest.store.clone(),
            config.shared.as_ref(),
        )?;
        let report = ingest(&mut store, &roots, &config.ingest, &NoProgress)?;
        store.close()?;
        Ok(report)
    };
    if !on_run(run_once()) {
        return Ok(());
    }
    let interrupted = || config.ingest.interrupt.signal().is_some();
    loop {
        // Wait for a change that matters, then for the burst to settle; a signal ends the
        // watch between runs (it is checked every `POLL`).
        loop {
            match events.recv_timeout(POLL) {
                Ok(Ok(event)) if relevant(&event, &roots, &store_dir) => {
                    tracing::debug!(paths = ?event.paths, "change seen; waiting for changes to settle");
                    break;
                }
                Ok(Ok(_)) => continue,
                Ok(Err(error)) => {
                    warn_event_error(&error);
                    break;
                }
                Err(mpsc::RecvTimeoutError::Timeout) if interrupted() => return Ok(()),
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        let mut quiet_since = std::time::Instant::now();
        loop {
            if interrupted() {
                return Ok(());
            }
            match events.recv_timeout(POLL.min(config.settle)) {
                Ok(Ok(_)) => quiet_since = std::time::Instant::now(),
                Ok(Err(error)) => {
                    warn_event_error(&error);
                    quiet_since = std::time::Instant::now();
                }
                Err(mpsc::RecvTimeoutError::Timeout) if quiet_since.elapsed() >= config.settle => {
                    break;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        tracing::info!("changes settled; ingesting");
        if !on_run(run_once()) {
            return Ok(());
        }
    }
}

/// How often a waiting watcher checks whether a signal asked it to end.
const POLL: Duration = Duration::from_millis(100);

/// A watcher error (events lost, a watch gone, an inotify limit) means changes may have gone
/// unseen: it is logged with what notify says, and the caller runs a full ingest (a rescan).
fn warn_event_error(error: &notify::Error) {
    tracing::warn!(
        paths = ?error.paths,
        "file-system events may have been lost ({error}); ingesting everything again"
    );
}

/// True when an event touches a path under a root that is not hidden and not in the store, or
/// when notify asks for a rescan (its queue overflowed: any change may have gone unseen).
fn relevant(event: &notify::Event, roots: &[PathBuf], store_dir: &Path) -> bool {
    if event.need_rescan() {
        tracing::warn!(
            paths = ?event.paths,
            "file-system events were lost (the event queue overflowed); ingesting everything again"
        );
        return true;
    }
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use notify::event::{EventKind, Flag, ModifyKind};

    use super::relevant;

    #[test]
    fn a_rescan_notice_is_relevant_and_hidden_or_store_paths_are_not() {
        let roots = [PathBuf::from("/docs")];
        let store = Path::new("/docs/.groundidx");
        let rescan = notify::Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert!(
            relevant(&rescan, &roots, store),
            "a rescan notice was ignored"
        );
        let change = |path: &str| {
            notify::Event::new(EventKind::Modify(ModifyKind::Any)).add_path(PathBuf::from(path))
        };
        assert!(relevant(&change("/docs/a.md"), &roots, store));
        assert!(!relevant(&change("/docs/.hidden/a.md"), &roots, store));
        assert!(!relevant(
            &change("/docs/.groundidx/ledger.sqlite"),
            &roots,
            store
        ));
        assert!(!relevant(&change("/elsewhere/a.md"), &roots, store));
    }
}
