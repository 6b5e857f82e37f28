//! The folder Tantivy reads and writes through: its memory-mapped directory, with crash points
//! at the library's own moments.
//!
//! Tantivy writes a commit as many files (segment files, `.del` files of deletes) and then
//! `meta.json`; a merge writes a new segment and then `meta.json` again. The crash points here
//! let the crash tests abort a process *inside* those steps: while a segment or merge file is
//! being created, just before `meta.json` is saved (every file of the commit is on disk, none
//! is referenced) and just after (the commit is whole, its obsolete files not yet collected).
//! It changes two things more: on a read-only mount a reader opens the index without Tantivy's
//! meta lock, which cannot be taken there (and is not needed: nothing can remove a file); and
//! a merge reads its segments by `pread` rather than through the map, so that a large merge
//! does not hold every page it read in the process's memory. Every other call goes to the
//! `MmapDirectory` it wraps.

use std::io;
use std::path::Path;
use std::sync::Arc;

use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, FileSlice, Lock, META_LOCK, MmapDirectory, OwnedBytes,
    WatchCallback, WatchHandle, WritePtr,
};

use crate::crash::crash_point;

/// A Tantivy directory that reaches a crash point at each file it creates and around every
/// save of `meta.json`.
#[derive(Clone, Debug)]
pub(super) struct CrashDirectory {
    inner: MmapDirectory,
    root: std::path::PathBuf,
}

impl CrashDirectory {
    pub(super) fn new(inner: MmapDirectory, root: &Path) -> CrashDirectory {
        CrashDirectory {
            inner,
            root: root.to_path_buf(),
        }
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
        // A merge reads each of its segments once, through: mapped, every page it touched would
        // stay in the process until the merge ends (up to 289 MiB at a million files). Read
        // by `pread`, the postings and positions it reads a term at a time are the kernel's
        // page cache; what Tantivy reads whole (each segment's term dictionaries, fast
        // columns, field norms) is copied into the process, as it was mapped before. The
        // files stay open for the merge, about seven a segment: a file that cannot be opened
        // so (out of descriptors) is mapped as before, which a server's searches have done
        // already. Searches keep the map.
        if in_merge_thread() {
            match ReadAtFile::open(&self.root.join(path)) {
                Ok(file) => return Ok(Arc::new(file)),
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(OpenReadError::FileDoesNotExist(path.to_path_buf()));
                }
                Err(err) => {
                    // Said once a process: merges then hold more memory, nothing else changes.
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        tracing::warn!(path = %path.display(), error = %err, "a merge could not open a segment file to read it and maps it instead, which holds more memory; hint: raise the open-file limit (ulimit -n)");
                    });
                }
            }
        }
        self.inner.get_file_handle(path)
    }

    fn open_read(&self, path: &Path) -> Result<FileSlice, OpenReadError> {
        let handle = self.get_file_handle(path)?;
        Ok(FileSlice::new(handle))
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

/// A file read by `pread`, each read into a buffer of its own.
#[derive(Debug)]
struct ReadAtFile {
    file: std::fs::File,
    len: usize,
}

impl ReadAtFile {
    fn open(path: &Path) -> io::Result<ReadAtFile> {
        let file = std::fs::File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::other("file too large to address"))?;
        Ok(ReadAtFile { file, len })
    }
}

impl FileHandle for ReadAtFile {
    fn read_bytes(&self, range: std::ops::Range<usize>) -> io::Result<OwnedBytes> {
        use std::os::unix::fs::FileExt;
        if range.is_empty() {
            return Ok(OwnedBytes::empty());
        }
        let mut bytes = vec![0; range.len()];
        self.file.read_exact_at(&mut bytes, range.start as u64)?;
        Ok(OwnedBytes::new(bytes))
    }
}

impl tantivy::HasLen for ReadAtFile {
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tantivy::HasLen;
    use tantivy::directory::{Directory, MmapDirectory};

    use super::{CrashDirectory, in_merge_thread};

    /// Whether this process maps `path` (from `/proc/self/maps`).
    fn mapped(path: &Path) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
        let path = path.to_str().expect("UTF-8 path");
        maps.lines().any(|line| line.ends_with(path))
    }

    fn open(dir: &Path) -> CrashDirectory {
        CrashDirectory::new(MmapDirectory::open(dir).expect("open directory"), dir)
    }

    #[test]
    fn a_merge_reads_its_segments_without_mapping_them() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().canonicalize().expect("canonical");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("merged.idx"), &bytes).expect("write");
        std::fs::write(dir.join("searched.idx"), &bytes).expect("write");
        std::fs::write(dir.join("empty.idx"), b"").expect("write");
        let directory = open(&dir);
        std::thread::Builder::new()
            .name("merge_thread_0".into())
            .spawn({
                let directory = directory.clone();
                let (dir, bytes) = (dir.clone(), bytes.clone());
                move || {
                    assert!(in_merge_thread());
                    let file = directory
                        .open_read(Path::new("merged.idx"))
                        .expect("open in a merge");
                    assert_eq!(file.len(), bytes.len());
                    assert_eq!(file.read_bytes().expect("read").as_slice(), &bytes[..]);
                    let part = file.slice(70_000..70_100).read_bytes().expect("read part");
                    assert_eq!(part.as_slice(), &bytes[70_000..70_100]);
                    assert!(file.slice(5..5).read_bytes().expect("empty").is_empty());
                    assert!(!mapped(&dir.join("merged.idx")), "a merge mapped its input");
                    let empty = directory.open_read(Path::new("empty.idx")).expect("empty");
                    assert!(empty.read_bytes().expect("read empty").is_empty());
                    assert!(matches!(
                        directory.open_read(Path::new("missing.idx")),
                        Err(tantivy::directory::error::OpenReadError::FileDoesNotExist(
                            _
                        ))
                    ));
                }
            })
            .expect("spawn")
            .join()
            .expect("the merge thread's checks");
        // Any other thread (a search) reads through the map.
        let file = directory
            .open_read(Path::new("searched.idx"))
            .expect("open in a search");
        assert_eq!(file.read_bytes().expect("read").as_slice(), &bytes[..]);
        assert!(mapped(&dir.join("searched.idx")), "a search did not map");
    }
}
