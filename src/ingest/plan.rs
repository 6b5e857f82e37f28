//! Planning a run over one root: walk, compare every stat with the ledger's cache, and decide
//! which files to read and which sources to delete. Planning writes nothing.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::ledger::{Ledger, RootId, SourceRecord};
use crate::walk::{self, Excludes, WalkedFile, Warning};

/// A file whose mtime is this close to (or after) the moment its stat was recorded may have
/// changed again within the file system's timestamp granularity without its stat showing it
/// (git's "racy clean" case), so it is read again.
const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// What a run will do under one root.
#[derive(Debug)]
pub struct RootPlan {
    /// The canonical root folder.
    pub root: PathBuf,
    /// The root as the ledger names it.
    pub root_key: String,
    pub root_id: Option<RootId>,
    /// What the ledger knew of every path under the root before the run.
    pub known: HashMap<String, SourceRecord>,
    /// New files, and files whose stat changed or cannot be trusted.
    pub to_read: Vec<WalkedFile>,
    /// Files the stat cache vouches for.
    pub unchanged: usize,
    /// Known paths the walk did not see, under no unreadable folder.
    pub to_delete: Vec<String>,
    /// Known paths the walk did not see but whose deletion is held back.
    pub held_back: usize,
    pub warnings: Vec<Warning>,
}

/// Plans one root. `root` must be canonical.
pub fn plan_root(
    ledger: &Ledger,
    root: &Path,
    excludes: &Excludes,
    rehash: bool,
    allow_mass_delete: bool,
) -> Result<RootPlan> {
    let root_key = root
        .to_str()
        .ok_or_else(|| Error::Usage(format!("folder name {} is not valid UTF-8", root.display())))?
        .to_string();
    let root_id = ledger.find_root(&root_key)?;
    let known = match root_id {
        Some(id) => ledger.sources_of_root(id)?,
        None => HashMap::new(),
    };
    let walked = walk::walk(root, excludes)?;
    let mut to_read = Vec::new();
    let mut unchanged = 0;
    let mut seen: HashSet<&str> = HashSet::with_capacity(walked.files.len());
    for file in &walked.files {
        seen.insert(file.rel_path.as_str());
        match known.get(&file.rel_path) {
            Some(record) if !rehash && is_clean(record, file) => unchanged += 1,
            _ => to_read.push(file.clone()),
        }
    }
    let mut to_delete = Vec::new();
    let mut held_back = 0;
    for path in known.keys() {
        if seen.contains(path.as_str()) {
            continue;
        }
        if walked.is_held_back(path) {
            held_back += 1;
        } else {
            to_delete.push(path.clone());
        }
    }
    to_delete.sort();
    if !allow_mass_delete {
        // A file moved within the root keeps its inode; such deletions are renames, not losses.
        let new_inodes: HashSet<u64> = to_read
            .iter()
            .filter(|file| !known.contains_key(&file.rel_path))
            .map(|file| file.stat.inode)
            .collect();
        let removing = to_delete
            .iter()
            .filter(|path| !new_inodes.contains(&known[*path].stat.inode))
            .count();
        if removing > 0 && removing * 2 > known.len() {
            return Err(Error::MassDelete {
                root: root.to_path_buf(),
                removing,
                existing: known.len(),
            });
        }
    }
    Ok(RootPlan {
        root: root.to_path_buf(),
        root_key,
        root_id,
        known,
        to_read,
        unchanged,
        to_delete,
        held_back,
        warnings: walked.warnings,
    })
}

/// True when the cached stat vouches for the file: same size, mtime and inode, and the mtime
/// was safely in the past when the stat was recorded.
fn is_clean(record: &SourceRecord, file: &WalkedFile) -> bool {
    record.stat == file.stat && file.stat.mtime_ns + RACY_WINDOW_NS < record.recorded_ns
}
