//! The store's writer lock: an exclusive advisory lock on `<store>/lock`.
//!
//! Taken by every writer (`Store::open_writer`: ingest, embed, rebuild, a replica's sync);
//! never by readers, nor by gc (which removes nothing a reader or writer uses). The operating system drops it when the
//! process ends, however it ends, so a killed writer never leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long to wait for another writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockWait {
    /// Fail at once with `Error::LockBusy`.
    NoWait,
    /// Poll until the lock is free or this much time has passed.
    Wait(Duration),
}

/// A held writer lock; released on drop.
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
    path: PathBuf,
}

impl WriterLock {
    /// Takes the lock in `store_dir`, waiting as `wait` says.
    pub fn acquire(store_dir: &Path, wait: LockWait) -> Result<WriterLock> {
        let path = store_dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|err| Error::io(format!("open lock file {}", path.display()), err))?;
        let deadline = match wait {
            LockWait::NoWait => Instant::now(),
            LockWait::Wait(duration) => Instant::now() + duration,
        };
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(WriterLock { _file: file, path }),
                Err(TryLockError::WouldBlock) => {
                    if !told && wait != LockWait::NoWait {
                        tracing::info!(store = %store_dir.display(), "another writer holds the store; waiting");
                        told = true;
                    }
                    if Instant::now() >= deadline {
                        return Err(Error::LockBusy {
                            path: store_dir.to_path_buf(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(TryLockError::Error(err)) => {
                    return Err(Error::io(format!("lock {}", path.display()), err));
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::{LockWait, WriterLock};
    use crate::error::Error;

    #[test]
    fn second_writer_is_refused_until_the_first_drops() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = WriterLock::acquire(dir.path(), LockWait::NoWait).expect("first lock");
        let second = WriterLock::acquire(
            dir.path(),
            LockWait::Wait(std::time::Duration::from_millis(120)),
        );
        assert!(matches!(second, Err(Error::LockBusy { .. })));
        drop(first);
        WriterLock::acquire(dir.path(), LockWait::NoWait).expect("lock after release");
    }
}
