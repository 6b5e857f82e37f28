//! Swapping a newly built index folder in for the live one, and finishing or discarding a swap
//! that a killed process left half done.
//!
//! A rebuild writes the whole new index into `index.new/` and commits it there; only then is it
//! swapped in for `index/`. On Linux the two folders are exchanged in one `renameat2`
//! (`RENAME_EXCHANGE`), so `index/` always names a whole index; elsewhere, or on a file system
//! without it, the old folder is first renamed to `index.old/`. Either way a kill at any moment
//! leaves a state `recover` resolves: the old index or the new one at `index/`, or the new one
//! still at `index.new/` beside `index.old/`. It owns no Tantivy file: it moves whole folders.

use std::io;
use std::path::Path;

use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::store::StorePaths;

/// Puts the committed index in `index.new/` at `index/` and removes the one it replaces.
pub(super) fn swap_in(paths: &StorePaths) -> Result<()> {
    let live = paths.index();
    let new = paths.index_new();
    let old = paths.index_old();
    if live.exists() {
        match exchange(&new, &live) {
            // `index.new/` now holds the old index.
            Ok(()) => rename(&new, &old)?,
            Err(err) if exchange_unsupported(&err) => {
                rename(&live, &old)?;
                rename(&new, &live)?;
            }
            Err(err) => {
                return Err(Error::io(
                    format!("swap {} in for {}", new.display(), live.display()),
                    err,
                ));
            }
        }
        sync_folder(&paths.dir)?;
        crash_point("swap.before_removing_old");
        remove_folder(&old)?;
    } else {
        rename(&new, &live)?;
        sync_folder(&paths.dir)?;
    }
    Ok(())
}

/// Finishes or discards what a killed rebuild left. Run by a writer, under the lock, before it
/// opens the index.
///
/// - `index/` gone with both `index.old/` and `index.new/` present: the fallback swap stopped
///   between its two renames, and `index.new/` (renamed only once committed) is whole: move it.
/// - `index.new/` beside `index/`: an unfinished build, or the old index after an exchange.
/// - `index.old/`: the old index after a finished swap.
pub(super) fn recover(paths: &StorePaths) -> Result<()> {
    let live = paths.index();
    let new = paths.index_new();
    let old = paths.index_old();
    if !live.exists() && old.exists() && new.exists() {
        tracing::info!("finishing the swap of a rebuilt index that an earlier run began");
        rename(&new, &live)?;
        sync_folder(&paths.dir)?;
    }
    for leftover in [&new, &old] {
        if leftover.exists() {
            tracing::info!(folder = %leftover.display(), "removing what an interrupted rebuild left");
            remove_folder(leftover)?;
        }
    }
    Ok(())
}

/// Removes an index folder that is no longer (or not yet) the live one (or a file in its place).
pub(super) fn remove_folder(dir: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => std::fs::remove_file(dir),
        _ => std::fs::remove_dir_all(dir),
    };
    match removed {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(Error::io(format!("remove {}", dir.display()), err)),
    }
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// The file system (or the kernel) cannot exchange two names; fall back to two renames.
fn exchange_unsupported(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::Unsupported
        || matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS))
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|err| {
        Error::io(
            format!("rename {} to {}", from.display(), to.display()),
            err,
        )
    })
}

/// Makes the renames in the store folder durable.
fn sync_folder(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|folder| folder.sync_all())
        .map_err(|err| Error::io(format!("sync {}", dir.display()), err))
}
