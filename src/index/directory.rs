//! The folder Tantivy reads and writes through: its memory-mapped directory, with crash points
//! at the library's own moments.
//!
//! Tantivy writes a commit as many files (segment files, `.del` files of deletes) and then
//! `meta.json`; a merge writes a new segment and then `meta.json` again. The crash points here
//! let the crash tests abort a process *inside* those steps: while a segment or merge file is
//! being created, just before `meta.json` is saved (every file of the commit is on disk, none
//! is referenced) and just after (the commit is whole, its obsolete files not yet collected).
//! It changes one thing more: on a read-only mount a reader opens the index without Tantivy's
//! meta lock, which cannot be taken there (and is not needed: nothing can remove a file).
//! Every other call goes to the `MmapDirectory` it wraps.

use std::io;
use std::path::Path;
use std::sync::Arc;

use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, FileSlice, Lock, META_LOCK, MmapDirectory, WatchCallback,
    WatchHandle, WritePtr,
};

use crate::crash::crash_point;

/// A Tantivy directory that reaches a crash point at each file it creates and around every
/// save of `meta.json`.
#[derive(Clone, Debug)]
pub(super) struct CrashDirectory {
    inner: MmapDirectory,
}

impl CrashDirectory {
    pub(super) fn new(inner: MmapDirectory) -> CrashDirectory {
        CrashDirectory { inner }
    }
}

/// Merges run on Tantivy threads named `merge_thread_N`; files they create belong to a merge.
fn in_merge_thread() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|name| name.starts_with("merge_thread"))
}

impl Directory for CrashDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }

    fn open_read(&self, path: &Path) -> Result<FileSlice, OpenReadError> {
        self.inner.open_read(path)
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        let writer = self.inner.open_write(path)?;
        if in_merge_thread() {
            crash_point("tantivy.merge_file_created");
        } else if path.extension().is_some_and(|ext| ext == "del") {
            crash_point("tantivy.delete_file_created");
        } else {
            crash_point("tantivy.segment_file_created");
        }
        Ok(writer)
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let is_meta = path == Path::new("meta.json");
        if is_meta {
            crash_point("tantivy.before_meta_save");
        }
        self.inner.atomic_write(path, data)?;
        if is_meta {
            crash_point("tantivy.after_meta_save");
        }
        Ok(())
    }

    fn sync_directory(&self) -> io::Result<()> {
        self.inner.sync_directory()
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        match self.inner.acquire_lock(lock) {
            // A reader takes the meta lock while it opens a commit's segments, so that no
            // writer's garbage collection removes them meanwhile; the lock is a file opened for
            // writing, which a read-only mount refuses, and every reader failed there. Nothing
            // can remove a file on a read-only mount either, so the lock is not needed.
            Err(LockError::IoError(error))
                if error.kind() == io::ErrorKind::ReadOnlyFilesystem
                    && lock.filepath == META_LOCK.filepath =>
            {
                Ok(DirectoryLock::from(Box::new(())))
            }
            other => other,
        }
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}
