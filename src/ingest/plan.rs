//! Planning a run over one root: walk, compare every stat with the ledger's cache, and decide
//! which files to read and which sources to delete. Planning writes nothing.
//!
//! A file the stat cache vouches for is still read when an older recipe chunked its document
//! (`chunk::recipe_version`), so that a new chunker reaches every store without reading every
//! file on every run.
//!
//! It reads a file only to prove a rename for the mass-delete guard: a path gone and a new path
//! with its inode count as a move only when the new file holds the old content, since a file
//! system reuses the inodes of deleted files for new ones.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ingest::read::{ReadOutcome, read_file};
use crate::ingest::to_read::{FileToRead, FilesToRead};
use crate::ledger::{Ledger, RootId, SourceRecord};
use crate::walk::{self, WalkedFile, Warning};

/// A file whose mtime is this close to (or after) the moment its stat was recorded may have
/// changed again within the file system's timestamp granularity without its stat showing it
/// (git's "racy clean" case), so it is read again.
const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// What a run will do under one root.
#[derive(Debug)]
pub(crate) struct RootPlan {
    /// The root as the ledger names it.
    pub root_key: String,
    /// The root folder, opened once by the walk; every file is read relative to it. `None`
    /// only when it could not be opened, and then `to_read` is empty.
    pub root_dir: Option<OwnedFd>,
    pub root_id: Option<RootId>,
    /// What the ledger knew of every path under the root before the run.
    pub known: KnownSources,
    /// New files, files whose stat changed or cannot be trusted, and files whose document an
    /// older recipe chunked.
    pub to_read: FilesToRead,
    /// Files the stat cache vouches for.
    pub unchanged: usize,
    /// Known paths the walk did not see, under no unreadable folder.
    pub to_delete: Vec<String>,
    /// The files passed over for their format, by extension.
    pub passed_over: walk::PassedOver,
    pub warnings: Vec<Warning>,
}

/// What the ledger knew of every path under a root before the run, sorted by path.
#[derive(Debug, Default)]
pub(crate) struct KnownSources(Vec<(String, SourceRecord)>);

impl KnownSources {
    /// The ledger's sources of a root (sorted here if they are not already).
    pub fn new(mut sources: Vec<(String, SourceRecord)>) -> KnownSources {
        if !sources.is_sorted_by(|a, b| a.0 <= b.0) {
            sources.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        }
        KnownSources(sources)
    }

    /// What the ledger knew of `path`.
    pub fn get(&self, path: &str) -> Option<&SourceRecord> {
        self.0
            .binary_search_by(|(known, _)| known.as_str().cmp(path))
            .ok()
            .map(|i| &self.0[i].1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every known path with its record, sorted by path.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &SourceRecord)> {
        self.0.iter().map(|(path, record)| (path.as_str(), record))
    }
}

/// How a root is planned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlanConfig {
    /// Ignore the stat cache.
    pub rehash: bool,
    pub allow_mass_delete: bool,
    /// Files over this size are not read, here to prove a rename either.
    pub max_file_size: u64,
}

/// Plans one root. `root` must be canonical, and `walk` gives its walk (`Walks::next`),
/// taken once the ledger's sources of the root are read: the two wait on different things (the
/// file system, SQLite), so the walk is on its way already.
pub(crate) fn plan_root(
    ledger: &Ledger,
    root: &Path,
    walk: impl FnOnce() -> Result<walk::Walk>,
    config: &PlanConfig,
) -> Result<RootPlan> {
    let root_key = root
        .to_str()
        .ok_or_else(|| Error::Usage(format!("folder name {} is not valid UTF-8", root.display())))?
        .to_string();
    let root_id = ledger.find_root(&root_key)?;
    let known = match root_id {
        Some(id) => ledger.sources_of_root(id),
        None => Ok(Vec::new()),
    };
    let walked = walk();
    // The ledger's error first, as when the two ran one after the other.
    let known = KnownSources::new(known?);
    let mut walked = walked?;
    // The files to read are the walk's own list with the ones the cache vouches for taken
    // out, in place, then kept compactly for the run (`to_read`).
    let mut to_read = std::mem::take(&mut walked.files);
    let mut unchanged = 0;
    // The walk's files and the known paths are both sorted by path: one merge of the two
    // lists, with no map to build.
    let mut unseen: Vec<&str> = Vec::new();
    let mut known_paths = known.iter().peekable();
    to_read.retain(|file| {
        while let Some((path, _)) = known_paths.next_if(|(path, _)| *path < file.rel_path.as_str())
        {
            unseen.push(path);
        }
        match known_paths.next_if(|(path, _)| *path == file.rel_path.as_str()) {
            Some((_, record))
                if !config.rehash && is_clean(record, file) && chunked_as_now(record, file) =>
            {
                unchanged += 1;
                false
            }
            _ => true,
        }
    });
    unseen.extend(known_paths.map(|(path, _)| path));
    let mut to_delete = Vec::new();
    // A known path the walk did not see under a folder it could not read is kept.
    for path in unseen {
        if !walked.is_held_back(path) {
            to_delete.push(path.to_string());
        }
    }
    // Counting renames costs reads, so only a run that could trip the guard counts them.
    if !config.allow_mass_delete && to_delete.len() * 2 > known.len() {
        let removing =
            to_delete.len() - proven_renames(&walked, &known, &to_delete, &to_read, config);
        if removing > 0 && removing * 2 > known.len() {
            return Err(Error::MassDelete {
                root: root.to_path_buf(),
                removing,
                existing: known.len(),
            });
        }
    }
    Ok(RootPlan {
        root_key,
        root_dir: walked.root_dir,
        root_id,
        known,
        to_read: FilesToRead::new(to_read, config.max_file_size),
        unchanged,
        to_delete,
        passed_over: walked.passed_over,
        warnings: walked.warnings,
    })
}

/// How many of `to_delete` are files moved within the root: a new path holds the deleted
/// path's inode *and* its content. The inode alone proves nothing, since a file system hands
/// the inodes of deleted files to new ones; the size is compared first, and only a file of the
/// same size is read and hashed (in parallel: a whole folder moved is read here once more).
fn proven_renames(
    walked: &walk::Walk,
    known: &KnownSources,
    to_delete: &[String],
    to_read: &[WalkedFile],
    config: &PlanConfig,
) -> usize {
    let Some(root_dir) = walked.root_dir.as_ref() else {
        return 0;
    };
    let new_by_inode: HashMap<u64, &WalkedFile> = to_read
        .iter()
        .filter(|file| known.get(&file.rel_path).is_none())
        .map(|file| (file.stat.inode, file))
        .collect();
    to_delete
        .par_iter()
        .filter(|path| {
            let Some(record) = known.get(path) else {
                return false;
            };
            let Some(file) = new_by_inode.get(&record.stat.inode) else {
                return false;
            };
            if file.stat.size != record.stat.size {
                return false;
            }
            match read_file(
                root_dir.as_fd(),
                &FileToRead::from(*file),
                config.max_file_size,
            ) {
                ReadOutcome::Text { doc_hash, .. } => doc_hash == record.doc_hash,
                ReadOutcome::NotIndexed(_) => false,
            }
        })
        .count()
}

/// True when the cached stat vouches for the file: same size, mtime, ctime and inode, and both
/// times were safely in the past when the stat was recorded. A store written before the ctime
/// was kept has 0 for it, which no file matches, so such a file is read once more.
fn is_clean(record: &SourceRecord, file: &WalkedFile) -> bool {
    let latest = file.stat.mtime_ns.max(file.stat.ctime_ns);
    record.stat == file.stat && latest.saturating_add(RACY_WINDOW_NS) < record.recorded_ns
}

/// True when the file's document was chunked by the recipe this build uses for its kind (or a
/// newer one): reading the file again would give the same chunks.
fn chunked_as_now(record: &SourceRecord, file: &WalkedFile) -> bool {
    record.recipe_version >= crate::chunk::recipe_version(file.format)
}

#[cfg(test)]
mod tests {
    use super::{chunked_as_now, is_clean};
    use crate::format::Format;
    use crate::ids::DocHash;
    use crate::ledger::SourceRecord;
    use crate::stat::FileStat;
    use crate::walk::WalkedFile;

    const SECOND: i64 = 1_000_000_000;

    fn check(recorded: FileStat, recorded_ns: i64, now: FileStat, expect: bool) {
        let record = SourceRecord {
            doc_hash: DocHash::from_slice(&[7; 32]).expect("32 bytes"),
            stat: recorded,
            recorded_ns,
            recipe_version: crate::chunk::CHUNKER_VERSION,
        };
        let file = WalkedFile {
            rel_path: "a.md".into(),
            link_target: None,
            format: Format::Markdown,
            stat: now,
        };
        assert_eq!(
            is_clean(&record, &file),
            expect,
            "{recorded:?} then {now:?}"
        );
    }

    fn stat(size: u64, mtime_s: i64, ctime_s: i64, inode: u64) -> FileStat {
        FileStat {
            size,
            mtime_ns: mtime_s * SECOND,
            ctime_ns: ctime_s * SECOND,
            inode,
        }
    }

    #[test]
    fn the_stat_cache_compares_size_times_and_inode() {
        let old = stat(10, 100, 100, 1);
        check(old, 200 * SECOND, old, true);
        check(old, 200 * SECOND, stat(11, 100, 100, 1), false);
        check(old, 200 * SECOND, stat(10, 101, 101, 1), false);
        // Rewritten in place and `touch -d` back: only the ctime shows it.
        check(old, 200 * SECOND, stat(10, 100, 150, 1), false);
        check(old, 200 * SECOND, stat(10, 100, 100, 2), false);
        // A store of the previous schema kept no ctime.
        check(stat(10, 100, 0, 1), 200 * SECOND, old, false);
    }

    #[test]
    fn racy_and_future_times_are_read_again() {
        let old = stat(10, 100, 100, 1);
        check(old, 101 * SECOND, old, false);
        check(
            stat(10, 100, 199, 1),
            200 * SECOND,
            stat(10, 100, 199, 1),
            false,
        );
        let future = FileStat {
            mtime_ns: i64::MAX,
            ..old
        };
        check(future, 200 * SECOND, future, false);
    }

    #[test]
    fn a_document_of_an_older_recipe_is_read_again() {
        let file = |kind| WalkedFile {
            rel_path: "a.md".into(),
            link_target: None,
            format: kind,
            stat: stat(10, 100, 100, 1),
        };
        let record = |recipe_version| SourceRecord {
            doc_hash: DocHash::from_slice(&[7; 32]).expect("32 bytes"),
            stat: stat(10, 100, 100, 1),
            recorded_ns: 200 * SECOND,
            recipe_version,
        };
        for kind in [Format::Markdown, Format::PlainText] {
            let now = crate::chunk::recipe_version(kind);
            assert!(!chunked_as_now(&record(0), &file(kind)));
            assert!(!chunked_as_now(&record(now - 1), &file(kind)));
            assert!(chunked_as_now(&record(now), &file(kind)));
            // A newer groundidx's chunks are not made older.
            assert!(chunked_as_now(&record(now + 1), &file(kind)));
        }
    }
}
