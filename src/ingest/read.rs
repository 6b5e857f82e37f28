//! Reading one document file: open it safely, read it, hash it, decode it.
//!
//! The file is opened with `O_NOFOLLOW | O_NONBLOCK`, so a path that turned into a link or a
//! FIFO after the walk is refused instead of followed or waited on, and its stat is taken from
//! the open descriptor before and after the read: a file that changed meanwhile is reported and
//! read again on the next run, never recorded half-written.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use crate::clock;
use crate::ids::{self, DocHash};
use crate::walk::{FileStat, WalkedFile, Warning, stat_of};

/// What reading a file gave.
#[derive(Debug)]
pub enum ReadOutcome {
    /// The text of the file, its hash, and the stat the text belongs to.
    Text {
        doc_hash: DocHash,
        stat: FileStat,
        recorded_ns: i64,
        text: String,
    },
    /// The file was not indexed; the warning says why.
    NotIndexed(Warning),
}

/// Reads `file`, refusing anything over `max_size` bytes.
pub fn read_file(file: &WalkedFile, max_size: u64) -> ReadOutcome {
    let rel = file.rel_path.as_str();
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&file.read_path);
    let mut handle = match opened {
        Ok(handle) => handle,
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return ReadOutcome::NotIndexed(Warning::skipped(
                rel,
                "became a symbolic link after the walk; not followed",
            ));
        }
        Err(err) => {
            return ReadOutcome::NotIndexed(Warning::unreadable(
                rel,
                format!("cannot open: {err}"),
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
    let sniff = &bytes[..bytes.len().min(8192)];
    if sniff.contains(&0) {
        return ReadOutcome::NotIndexed(Warning::skipped(rel, "binary data (NUL bytes); skipped"));
    }
    let doc_hash = ids::doc_hash(&bytes);
    match String::from_utf8(bytes) {
        Ok(text) => ReadOutcome::Text {
            doc_hash,
            stat,
            recorded_ns,
            text,
        },
        Err(err) => ReadOutcome::NotIndexed(Warning::skipped(
            rel,
            format!(
                "not valid UTF-8 (at byte {}); skipped",
                err.utf8_error().valid_up_to()
            ),
        )),
    }
}
