//! The walks of a run's roots, on a thread of their own, one root after the other.
//!
//! A run that changes nothing is two halves that wait on different things: the walk (the file
//! system) and opening the store and reading its sources (SQLite, Tantivy). So `open_walking`
//! starts the walks as soon as the run holds the store alone (`Store::open_writer_then`), and
//! the plan of each root takes its walk when it has read the ledger's sources.
//!
//! They never start before the writer lock: a file another run added after this walk listed
//! its folder would otherwise be in the ledger and missing from the walk, a deletion. Only
//! `open_walking` (with its store) and `ingest::ingest` (on a store open already) start them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;

use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::format::FormatSet;
use crate::ingest::{IngestConfig, canonical_root};
use crate::store::{LockWait, SharedWriting, Store};
use crate::walk::{self, Excludes, Walk};

/// Opens the store at `dir` for writing (`Store::open_writer`) and walks `roots` for a run of
/// `config` while it opens, from the moment the store is this run's alone. The roots and the
/// `--exclude` globs are checked first, before any lock is waited for.
pub fn open_walking(
    dir: &Path,
    wait: LockWait,
    shared: Option<&SharedWriting>,
    roots: &[PathBuf],
    config: &IngestConfig,
) -> Result<(Store, Walks)> {
    let to_walk = ToWalk::new(roots, config)?;
    let (store, _caught_up, walks) =
        Store::open_writer_then(dir, wait, config.store.clone(), shared, || {
            to_walk.start(dir)
        })?;
    Ok((store, walks))
}

/// The walks of a run's roots, started and taken in the roots' order (`next`).
pub struct Walks {
    /// The store they were started for.
    store: PathBuf,
    /// The roots, canonical, in the order given.
    roots: Vec<PathBuf>,
    /// How many walks `next` has handed out.
    taken: usize,
    walking: Walking,
}

enum Walking {
    /// The thread that walks the roots, where it hands each walk over (one at a time: a walk
    /// holds 80 bytes and a path a file until its plan compacts it), and what stops it.
    Thread {
        walks: Option<Receiver<Result<Walk>>>,
        thread: Option<JoinHandle<()>>,
        stop: Arc<AtomicBool>,
    },
    /// No thread to be had: each root is walked when its plan asks.
    Here {
        excludes: Excludes,
        formats: FormatSet,
    },
}

/// What a run walks, checked.
struct ToWalk {
    roots: Vec<PathBuf>,
    excludes: Excludes,
    formats: FormatSet,
}

impl ToWalk {
    /// Resolves each root's name and compiles the `--exclude` globs: errors for a root that
    /// is no folder, or a glob that is not one.
    fn new(roots: &[PathBuf], config: &IngestConfig) -> Result<ToWalk> {
        Ok(ToWalk {
            excludes: Excludes::new(&config.excludes)?,
            roots: roots
                .iter()
                .map(|root| canonical_root(root))
                .collect::<Result<Vec<_>>>()?,
            formats: config.formats,
        })
    }

    /// Starts walking, for the store at `store`, which this run must hold alone.
    fn start(self, store: &Path) -> Walks {
        let ToWalk {
            roots,
            excludes,
            formats,
        } = self;
        let (send, walks) = mpsc::sync_channel(0);
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_roots, thread_excludes, thread_stop) =
            (roots.clone(), excludes.clone(), Arc::clone(&stop));
        let spawned = std::thread::Builder::new()
            .name("walk".into())
            .spawn(move || {
                for root in &thread_roots {
                    let walked = walk_root(root, &thread_excludes, formats, &thread_stop);
                    // A run that stopped taking walks (it failed) wants no more.
                    if send.send(walked).is_err() {
                        return;
                    }
                }
            });
        let walking = match spawned {
            Ok(thread) => Walking::Thread {
                walks: Some(walks),
                thread: Some(thread),
                stop,
            },
            Err(err) => {
                tracing::debug!(error = %err, "no thread for the walk; walking in turn");
                Walking::Here { excludes, formats }
            }
        };
        Walks {
            store: store.to_path_buf(),
            roots,
            taken: 0,
            walking,
        }
    }
}

impl Walks {
    /// Starts walking `roots` for a run of `config` into the store at `store`, which this run
    /// holds open already.
    pub(crate) fn start(store: &Path, roots: &[PathBuf], config: &IngestConfig) -> Result<Walks> {
        Ok(ToWalk::new(roots, config)?.start(store))
    }

    /// Refuses walks started for another store than the one at `store`.
    pub(crate) fn check_store(&self, store: &Path) -> Result<()> {
        if self.store != store {
            return Err(Error::Usage(format!(
                "the folders were walked for the store at {}, not the one at {}",
                self.store.display(),
                store.display()
            )));
        }
        Ok(())
    }

    /// The roots, canonical, in the order their walks come.
    pub(crate) fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The walk of the next root, waited for. Call it once per root, in order.
    pub(crate) fn next(&mut self) -> Result<Walk> {
        let index = self.taken;
        self.taken += 1;
        match &mut self.walking {
            Walking::Here { excludes, formats } => walk_root(
                &self.roots[index],
                excludes,
                *formats,
                &AtomicBool::new(false),
            ),
            Walking::Thread { walks, thread, .. } => {
                let received = walks.as_ref().map(Receiver::recv);
                match received {
                    Some(Ok(walk)) => walk,
                    // The thread ended without sending: it panicked; so does the run.
                    _ => {
                        let panic = thread.take().map(JoinHandle::join).and_then(Result::err);
                        match panic {
                            Some(panic) => std::panic::resume_unwind(panic),
                            None => panic!("the walk of root {index} was taken twice"),
                        }
                    }
                }
            }
        }
    }
}

impl Drop for Walks {
    /// Stops the walk under way and waits for the thread to end, so that nothing reads the
    /// folders once the run has returned, and a run that fails says so without waiting for a
    /// whole walk.
    fn drop(&mut self) {
        if let Walking::Thread {
            walks,
            thread,
            stop,
        } = &mut self.walking
        {
            stop.store(true, Ordering::Relaxed);
            drop(walks.take());
            if let Some(thread) = thread.take() {
                // A panic of the walk after the run stopped taking walks changes nothing.
                let _ = thread.join();
            }
        }
    }
}

fn walk_root(
    root: &Path,
    excludes: &Excludes,
    formats: FormatSet,
    stop: &AtomicBool,
) -> Result<Walk> {
    // A pause point for the tests of a root swapped between being resolved and being opened.
    crash_point("plan.before_walk");
    walk::walk(root, excludes, formats, stop)
}
