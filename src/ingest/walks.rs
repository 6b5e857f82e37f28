//! The walks of a run's roots, on a thread of their own, one root after the other.
//!
//! A run that changes nothing is two halves that wait on different things: the walk (the file
//! system) and opening the store and reading its sources (SQLite, Tantivy). So the walks start
//! as soon as the run holds the store alone (`Store::open_writer_then`), and the plan of each
//! root takes its walk when it has read the ledger's sources.
//!
//! They never start before the writer lock: a file another run added after this walk listed
//! its folder would otherwise be in the ledger and missing from the walk, a deletion.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;

use crate::crash::crash_point;
use crate::error::Result;
use crate::format::FormatSet;
use crate::ingest::{IngestConfig, canonical_root};
use crate::walk::{self, Excludes, Walk};

/// The walks of a run's roots, started (`start`) and taken in the roots' order (`next`).
pub struct Walks {
    /// The roots, canonical, in the order given.
    roots: Vec<PathBuf>,
    /// How many walks `next` has handed out.
    taken: usize,
    walking: Walking,
}

enum Walking {
    /// The thread that walks the roots, and where it sends each walk.
    Thread {
        walks: Option<Receiver<Result<Walk>>>,
        thread: Option<JoinHandle<()>>,
    },
    /// No thread to be had: each root is walked when its plan asks.
    Here {
        excludes: Excludes,
        formats: FormatSet,
    },
}

impl Walks {
    /// Starts walking `roots` for a run of `config`: each root's name is resolved and its
    /// walk started on one thread, one root after the other. Errors for a root that is no
    /// folder, or an `--exclude` glob that is not one.
    pub fn start(roots: &[PathBuf], config: &IngestConfig) -> Result<Walks> {
        let excludes = Excludes::new(&config.excludes)?;
        let roots = roots
            .iter()
            .map(|root| canonical_root(root))
            .collect::<Result<Vec<_>>>()?;
        let formats = config.formats;
        let (send, walks) = mpsc::channel();
        let thread_roots = roots.clone();
        let thread_excludes = excludes.clone();
        let spawned = std::thread::Builder::new()
            .name("walk".into())
            .spawn(move || {
                for root in &thread_roots {
                    // A run that stopped taking walks (it failed) wants no more.
                    if send
                        .send(walk_root(root, &thread_excludes, formats))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        let walking = match spawned {
            Ok(thread) => Walking::Thread {
                walks: Some(walks),
                thread: Some(thread),
            },
            Err(err) => {
                tracing::debug!(error = %err, "no thread for the walk; walking in turn");
                Walking::Here { excludes, formats }
            }
        };
        Ok(Walks {
            roots,
            taken: 0,
            walking,
        })
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
            Walking::Here { excludes, formats } => {
                walk_root(&self.roots[index], excludes, *formats)
            }
            Walking::Thread { walks, thread } => {
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
    /// Tells the thread to walk no further root and waits for the one it is walking, so that
    /// nothing reads the folders once the run has returned.
    fn drop(&mut self) {
        if let Walking::Thread { walks, thread } = &mut self.walking {
            drop(walks.take());
            if let Some(thread) = thread.take() {
                // A panic of the walk after the run stopped taking walks changes nothing.
                let _ = thread.join();
            }
        }
    }
}

fn walk_root(root: &std::path::Path, excludes: &Excludes, formats: FormatSet) -> Result<Walk> {
    // A pause point for the tests of a root swapped between being resolved and being opened.
    crash_point("plan.before_walk");
    walk::walk(root, excludes, formats)
}
