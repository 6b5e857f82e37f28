//! Reading one document file: open it safely, read it, hash it, decode it.
//!
//! The file is opened relative to the root folder's handle, one path component at a time:
//! each folder with `O_DIRECTORY | O_NOFOLLOW`, the file itself with `O_NOFOLLOW | O_NONBLOCK`.
//! So a folder or file that turned into a link after the walk is refused instead of followed
//! (however the tree changes, a read never leaves the root), and a FIFO is not waited on.
//! The stat is taken from the open descriptor before and after the read: a file that changed
//! meanwhile is reported and read again on the next run, never recorded half-written.
//!
//! A file of a text format with a NUL byte anywhere is binary and skipped (a NUL never reaches
//! chunk text), and one that is not UTF-8 is skipped; a file of a binary format (PDF) is read
//! as bytes, and its extractor decides.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::clock;
use crate::ids::{self, DocHash};
use crate::ingest::to_read::FileToRead;
use crate::stat::{FileStat, stat_of};
use crate::walk::Warning;

/// What reading a file gave.
#[derive(Debug)]
pub(crate) enum ReadOutcome {
    /// The content of the file (valid UTF-8 for a text format), its hash, and the stat the
    /// content belongs to.
    Text {
        doc_hash: DocHash,
        stat: FileStat,
        recorded_ns: i64,
        content: Vec<u8>,
    },
    /// The file was not indexed; the warning says why.
    NotIndexed(Warning),
}

/// Reads `file` under the root folder `root_dir`, refusing anything over `max_size` bytes.
pub(crate) fn read_file(root_dir: BorrowedFd<'_>, file: &FileToRead, max_size: u64) -> ReadOutcome {
    let rel = file.rel_path.as_str();
    let mut handle = match open_beneath(root_dir, file.read_path()) {
        Ok(fd) => File::from(fd),
        Err(Opening::File(Errno::LOOP)) => {
            return ReadOutcome::NotIndexed(Warning::skipped(
                rel,
                "became a symbolic link after the walk; not followed",
            ));
        }
        Err(Opening::Folder(folder, Errno::LOOP | Errno::NOTDIR)) => {
            return ReadOutcome::NotIndexed(Warning::unreadable(
                rel,
                format!(
                    "folder {folder} became a symbolic link or a file after the walk; not followed, read again on the next run"
                ),
            ));
        }
        Err(Opening::Folder(folder, errno)) => {
            return ReadOutcome::NotIndexed(Warning::unreadable(
                rel,
                format!(
                    "cannot open folder {folder}: {}",
                    std::io::Error::from(errno)
                ),
            ));
        }
        Err(Opening::File(errno)) => {
            return ReadOutcome::NotIndexed(Warning::unreadable(
                rel,
                format!("cannot open: {}", std::io::Error::from(errno)),
            ));
        }
    };
    let before = match handle.metadata() {
        Ok(meta) if meta.is_file() => meta,
        Ok(_) => {
            return ReadOutcome::NotIndexed(Warning::skipped(rel, "not a regular file; skipped"));
        }
        Err(err) => {
            return ReadOutcome::NotIndexed(Warning::unreadable(
                rel,
                format!("cannot stat: {err}"),
            ));
        }
    };
    if before.len() > max_size {
        return ReadOutcome::NotIndexed(Warning::skipped(
            rel,
            format!(
                "{} bytes is over the {max_size}-byte limit (--max-file-size); skipped",
                before.len()
            ),
        ));
    }
    let recorded_ns = clock::now_ns();
    let mut bytes = Vec::with_capacity(before.len() as usize);
    if let Err(err) = (&mut handle).take(max_size + 1).read_to_end(&mut bytes) {
        return ReadOutcome::NotIndexed(Warning::unreadable(rel, format!("cannot read: {err}")));
    }
    let stat = stat_of(&before);
    let after = handle.metadata().map(|meta| stat_of(&meta));
    if after.as_ref().ok() != Some(&stat) || bytes.len() as u64 != stat.size {
        return ReadOutcome::NotIndexed(Warning::unreadable(
            rel,
            "changed while being read; it will be read again on the next run",
        ));
    }
    let doc_hash = ids::doc_hash_in(file.format.hash_context(), &bytes);
    if file.format.is_binary() {
        return ReadOutcome::Text {
            doc_hash,
            stat,
            recorded_ns,
            content: bytes,
        };
    }
    // The whole file, not a prefix: a NUL after the first few KB would reach chunk text.
    // `<[u8]>::contains` is the standard library's memchr, built optimised even into a debug
    // binary, so the scan costs next to nothing beside the hash; only a binary file pays for
    // the position.
    if bytes.contains(&0) {
        let at = bytes.iter().position(|byte| *byte == 0).unwrap_or_default();
        return ReadOutcome::NotIndexed(Warning::skipped(
            rel,
            format!("binary data (a NUL byte at byte {at}); skipped"),
        ));
    }
    if let Err(err) = std::str::from_utf8(&bytes) {
        return ReadOutcome::NotIndexed(Warning::skipped(
            rel,
            format!("not valid UTF-8 (at byte {}); skipped", err.valid_up_to()),
        ));
    }
    ReadOutcome::Text {
        doc_hash,
        stat,
        recorded_ns,
        content: bytes,
    }
}

/// Why `open_beneath` failed: at a folder on the way (named relative to the root), or at the
/// file itself.
enum Opening {
    Folder(String, Errno),
    File(Errno),
}

/// Opens `rel_path` (relative, `/` separators) under `root_dir` without following any link:
/// every folder on the way is opened from its parent's handle with `O_NOFOLLOW`, so no
/// component can lead out of the root, whatever was swapped since the walk.
fn open_beneath(root_dir: BorrowedFd<'_>, rel_path: &str) -> Result<OwnedFd, Opening> {
    let mut parts: Vec<&str> = rel_path.split('/').collect();
    let file_name = parts.pop().unwrap_or_default();
    let mut folder: Option<OwnedFd> = None;
    for (depth, part) in parts.iter().enumerate() {
        let named = || parts[..=depth].join("/");
        if !is_plain_name(part) {
            return Err(Opening::Folder(named(), Errno::INVAL));
        }
        let parent = folder.as_ref().map_or(root_dir, |fd| fd.as_fd());
        let opened = rustix::fs::openat(
            parent,
            *part,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| Opening::Folder(named(), errno))?;
        folder = Some(opened);
    }
    if !is_plain_name(file_name) {
        return Err(Opening::File(Errno::INVAL));
    }
    let parent = folder.as_ref().map_or(root_dir, |fd| fd.as_fd());
    rustix::fs::openat(
        parent,
        file_name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Opening::File)
}

/// A name `openat` takes as one entry of the folder: not empty, not `.` or `..`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('\0')
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;

    use super::{Opening, open_beneath};

    fn outcome(root: &std::path::Path, rel: &str) -> Result<(), (String, Errno)> {
        let root_dir = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .expect("open root");
        match open_beneath(root_dir.as_fd(), rel) {
            Ok(_) => Ok(()),
            Err(Opening::Folder(folder, errno)) => Err((folder, errno)),
            Err(Opening::File(errno)) => Err((String::new(), errno)),
        }
    }

    #[test]
    fn opens_only_plain_names_and_never_through_a_link() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub/deeper")).expect("mkdir");
        std::fs::write(root.join("sub/deeper/a.md"), "a").expect("write");
        std::fs::write(dir.path().join("outside.md"), "secret").expect("write");
        std::os::unix::fs::symlink(root.join("sub"), root.join("link")).expect("link");
        std::os::unix::fs::symlink(dir.path().join("outside.md"), root.join("sub/out.md"))
            .expect("link");
        assert_eq!(outcome(&root, "sub/deeper/a.md"), Ok(()));
        assert_eq!(
            outcome(&root, "link/deeper/a.md"),
            // `O_DIRECTORY | O_NOFOLLOW` on a link: Linux says ENOTDIR (others ELOOP).
            Err(("link".into(), Errno::NOTDIR))
        );
        assert_eq!(
            outcome(&root, "sub/out.md"),
            Err((String::new(), Errno::LOOP))
        );
        assert_eq!(
            outcome(&root, "sub/deeper/a.md/x.md"),
            Err(("sub/deeper/a.md".into(), Errno::NOTDIR))
        );
        assert_eq!(
            outcome(&root, "sub/../../outside.md"),
            Err(("sub/..".into(), Errno::INVAL))
        );
        assert_eq!(outcome(&root, ""), Err((String::new(), Errno::INVAL)));
    }
}
