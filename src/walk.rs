//! Walking a root folder: which files are documents, and what could not be looked at.
//!
//! The walk finds the files of the formats a run reads (`format::FormatSet`), counts every
//! other file by its extension (nothing is left out silently), skips hidden entries and
//! `--exclude` globs, never follows a symbolic link out of the root (nor any link to a folder), and skips
//! anything that is not a regular file with a warning. It reads no file contents; it records
//! the folders and files it could not read so that deletions under them are held back.
//!
//! It also opens the root folder itself, once, from `/` down without following a link (its
//! name is resolved before, so a link found then is a swap): every file is later opened
//! relative to that handle, one component at a time and never through a link
//! (`ingest::read`), so a folder swapped for a link after the walk cannot lead a read out of
//! the root.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;

use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::format::{Format, FormatSet};
use crate::stat::{FileStat, stat_of};

/// A problem with one input path. It never stops a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The path, relative to the root it was found under.
    pub path: String,
    pub message: String,
    #[serde(skip)]
    pub kind: WarningKind,
}

/// Whether a warning means the path's state is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarningKind {
    /// The path was looked at and deliberately left out (or indexed with a caveat).
    Skipped,
    /// The path could not be read: its documents (and those under it) are kept as they were.
    Unreadable,
}

impl Warning {
    pub fn skipped(path: &str, message: impl Into<String>) -> Warning {
        Warning {
            path: path.to_string(),
            message: message.into(),
            kind: WarningKind::Skipped,
        }
    }

    pub fn unreadable(path: &str, message: impl Into<String>) -> Warning {
        Warning {
            path: path.to_string(),
            message: message.into(),
            kind: WarningKind::Unreadable,
        }
    }
}

/// Which entries the walk leaves out.
#[derive(Clone, Debug, Default)]
pub struct Excludes {
    by_name: GlobSet,
    by_path: GlobSet,
}

impl Excludes {
    /// Compiles `--exclude` globs. A glob without `/` matches a file or folder name anywhere
    /// (`drafts`, `*.tmp.md`); a glob with `/` matches the path relative to the root
    /// (`archive/**`, `**/old/*.md`).
    pub fn new(globs: &[String]) -> Result<Excludes> {
        let mut by_name = GlobSetBuilder::new();
        let mut by_path = GlobSetBuilder::new();
        for glob in globs {
            let compiled = Glob::new(glob.trim_start_matches("./"))
                .map_err(|err| Error::Usage(format!("bad --exclude glob {glob:?}: {err}")))?;
            if glob.contains('/') {
                by_path.add(compiled);
            } else {
                by_name.add(compiled);
            }
        }
        let build = |builder: GlobSetBuilder| {
            builder
                .build()
                .map_err(|err| Error::Usage(format!("bad --exclude globs: {err}")))
        };
        Ok(Excludes {
            by_name: build(by_name)?,
            by_path: build(by_path)?,
        })
    }

    fn excludes(&self, name: &OsStr, rel_path: &str) -> bool {
        self.by_name.is_match(name) || self.by_path.is_match(rel_path)
    }
}

/// A document file found by the walk.
///
/// A cold ingest holds one of these for every file it has still to read, so it is kept small
/// (80 bytes and its path): the target is kept only for a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkedFile {
    /// Relative to the root, with `/` separators: the source's name in the ledger.
    pub rel_path: String,
    /// For a link inside the root, its canonical target (relative, `/` separators); `None`
    /// for the entry itself.
    pub link_target: Option<Box<str>>,
    pub format: Format,
    pub stat: FileStat,
}

// One per file a cold ingest has still to read: kept from growing unnoticed.
const _: () = assert!(std::mem::size_of::<WalkedFile>() <= 80);

impl WalkedFile {
    /// What to open, relative to the root with `/` separators: the entry itself, or for a
    /// link inside the root, its canonical target.
    pub fn read_path(&self) -> &str {
        self.link_target.as_deref().unwrap_or(&self.rel_path)
    }
}

/// What a walk found.
#[derive(Debug, Default)]
pub struct Walk {
    /// The root folder, opened once; `None` (with a warning) when it could not be opened, and
    /// then `files` is empty.
    pub root_dir: Option<OwnedFd>,
    pub files: Vec<WalkedFile>,
    pub warnings: Vec<Warning>,
    /// Relative paths (files or folders) that could not be read.
    pub unreadable: Vec<String>,
    /// The regular files not indexed for their format, counted by extension.
    pub passed_over: PassedOver,
}

/// The files a walk passed over for their format, counted by extension (`.docx`, or
/// `(no extension)`), so a report can say what was not indexed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PassedOver {
    /// Files of no format groundidx reads.
    pub unsupported: std::collections::BTreeMap<String, u64>,
    /// Files of a format the run was asked not to read (`--formats`).
    pub not_selected: std::collections::BTreeMap<String, u64>,
}

impl PassedOver {
    pub fn is_empty(&self) -> bool {
        self.unsupported.is_empty() && self.not_selected.is_empty()
    }

    pub fn add(&mut self, other: &PassedOver) {
        for (mine, theirs) in [
            (&mut self.unsupported, &other.unsupported),
            (&mut self.not_selected, &other.not_selected),
        ] {
            for (extension, count) in theirs {
                *mine.entry(extension.clone()).or_default() += count;
            }
        }
    }

    fn count(&mut self, name: &str, format: Option<Format>) {
        let extension = match name.rsplit_once('.') {
            Some((stem, extension)) if !stem.is_empty() && !extension.is_empty() => {
                format!(".{}", extension.to_lowercase())
            }
            _ => "(no extension)".to_string(),
        };
        let counts = match format {
            Some(_) => &mut self.not_selected,
            None => &mut self.unsupported,
        };
        *counts.entry(extension).or_default() += 1;
    }

    /// One line for a report: `12 .docx, 3 .png: not a supported format; 4 .pdf: not among the
    /// formats read (--formats)`. Empty when nothing was passed over.
    pub fn describe(&self) -> String {
        let list = |counts: &std::collections::BTreeMap<String, u64>| {
            let mut counts: Vec<(&String, &u64)> = counts.iter().collect();
            counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            counts
                .iter()
                .map(|(extension, count)| format!("{count} {extension}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.unsupported.is_empty() {
            parts.push(format!(
                "{}: not a supported format",
                list(&self.unsupported)
            ));
        }
        if !self.not_selected.is_empty() {
            parts.push(format!(
                "{}: not among the formats read (--formats)",
                list(&self.not_selected)
            ));
        }
        parts.join("; ")
    }
}

impl Walk {
    /// True when `rel_path` is, or is under, a path that could not be read.
    pub(crate) fn is_held_back(&self, rel_path: &str) -> bool {
        self.unreadable.iter().any(|bad| {
            bad.is_empty()
                || rel_path == bad
                || (rel_path.starts_with(bad.as_str())
                    && rel_path.as_bytes().get(bad.len()) == Some(&b'/'))
        })
    }
}

/// Walks `root`, which must be a canonical path to a folder, for the files of `formats`. Once
/// `stop` is set, it lists nothing more and returns a walk that holds every path back (no
/// file, the root unreadable), which no plan can take a deletion from.
pub fn walk(
    root: &Path,
    excludes: &Excludes,
    formats: FormatSet,
    stop: &AtomicBool,
) -> Result<Walk> {
    let meta = std::fs::metadata(root)
        .map_err(|err| Error::Usage(format!("cannot read folder {}: {err}", root.display())))?;
    if !meta.is_dir() {
        return Err(Error::Usage(format!("{} is not a folder", root.display())));
    }
    let mut walk = Walk::default();
    let root_name = root.display().to_string();
    if !open_walked_root(&mut walk, root, &root_name) {
        return Ok(walk);
    }
    // Listed in the order the file system gives, and sorted once at the end: walkdir's sort by
    // file name takes each name apart again on every comparison.
    let entries = walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .filter_entry(|entry| {
            if entry.depth() == 0 {
                return true;
            }
            let name = entry.file_name();
            if name.as_encoded_bytes().first() == Some(&b'.') {
                return false;
            }
            match relative(root, entry.path()) {
                Some(rel) => !excludes.excludes(name, &rel),
                None => true,
            }
        });
    let mut first_entry = true;
    // The open folders above the current entry, by depth (index 0, the root, is unused: the
    // root's handle is `walk.root_dir`): files are stat'ed relative to their folder, so the
    // kernel does not resolve every path from `/` again.
    let mut folders: Vec<Option<(std::path::PathBuf, OwnedFd)>> = Vec::new();
    for entry in entries {
        if stop.load(Ordering::Relaxed) {
            walk.files.clear();
            walk.warnings = vec![Warning::unreadable(
                &root_name,
                "the walk was stopped; nothing under the folder is read or deleted",
            )];
            walk.unreadable = vec![String::new()];
            return Ok(walk);
        }
        if first_entry {
            // A pause point for the tests of a root swapped while the walk lists it.
            crash_point("walk.first_entry");
            first_entry = false;
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                let rel = err
                    .path()
                    .and_then(|p| relative(root, p))
                    .unwrap_or_default();
                let message = match err.io_error() {
                    Some(io) => format!("cannot read: {io}"),
                    None => format!("cannot read: {err}"),
                };
                // The root itself is named by its full path: an empty name says nothing.
                let named = if rel.is_empty() { &root_name } else { &rel };
                walk.warnings.push(Warning::unreadable(named, message));
                walk.unreadable.push(rel);
                continue;
            }
        };
        if entry.depth() == 0 {
            continue;
        }
        add_entry(&mut walk, &mut folders, root, &entry, excludes, formats);
    }
    settle(&mut walk, root, &root_name);
    Ok(walk)
}

/// Opens the root for the walk (`walk.root_dir`); when it cannot be, records why and that
/// nothing under it is read or deleted, and returns false.
fn open_walked_root(walk: &mut Walk, root: &Path, root_name: &str) -> bool {
    match open_root(root) {
        Ok(dir) => {
            walk.root_dir = Some(dir);
            true
        }
        Err(errno) => {
            let why = match errno {
                // `O_DIRECTORY | O_NOFOLLOW` on a link: Linux says ENOTDIR, others ELOOP.
                Errno::NOTDIR | Errno::LOOP => {
                    "it or a folder above it became a symbolic link or a file after its name was resolved; not followed".to_string()
                }
                errno => std::io::Error::from(errno).to_string(),
            };
            walk.warnings.push(Warning::unreadable(
                root_name,
                format!("cannot read the folder: {why}; nothing under it is read or deleted"),
            ));
            walk.unreadable.push(String::new());
            false
        }
    }
}

/// Adds one entry of the listing below the root: a document file with its stat, a link
/// followed inside the root, or the warning or count that says why it is left out.
fn add_entry(
    walk: &mut Walk,
    folders: &mut Vec<Option<(std::path::PathBuf, OwnedFd)>>,
    root: &Path,
    entry: &walkdir::DirEntry,
    excludes: &Excludes,
    formats: FormatSet,
) {
    let Some(rel) = relative(root, entry.path()) else {
        walk.warnings.push(Warning::skipped(
            &entry.path().to_string_lossy(),
            "file name is not valid UTF-8; skipped",
        ));
        return;
    };
    let file_type = entry.file_type();
    if file_type.is_dir() {
        return;
    }
    let name = entry.file_name().to_string_lossy();
    if file_type.is_symlink() {
        if let Some(file) = follow_link(root, entry.path(), &rel, &name, excludes, formats, walk) {
            walk.files.push(file);
        }
        return;
    }
    if !file_type.is_file() {
        walk.warnings.push(Warning::skipped(
            &rel,
            format!("not a regular file ({}); skipped", special_kind(&file_type)),
        ));
        return;
    }
    let kind = match Format::from_file_name(&name) {
        Some(format) if formats.contains(format) => format,
        other => {
            walk.passed_over.count(&name, other);
            return;
        }
    };
    let stat = match stat_in_folder(walk, folders, entry) {
        Some(stat) => Ok(stat),
        None => entry.metadata().map(|meta| stat_of(&meta)),
    };
    match stat {
        Ok(stat) => walk.files.push(WalkedFile {
            rel_path: rel,
            link_target: None,
            format: kind,
            stat,
        }),
        Err(err) => {
            walk.warnings
                .push(Warning::unreadable(&rel, format!("cannot stat: {err}")));
            walk.unreadable.push(rel);
        }
    }
}

/// Sorts the listing, and empties it when the root was swapped while it was listed.
fn settle(walk: &mut Walk, root: &Path, root_name: &str) {
    // The listing goes by name. If the name no longer leads to the folder opened above, the
    // root was swapped while it was listed: what was listed may be another folder's, and the
    // paths missing from it are no deletions. So nothing is read or deleted this run.
    let listed_root_is_opened_root = match (&walk.root_dir, std::fs::metadata(root)) {
        (Some(dir), Ok(meta)) => rustix::fs::fstat(dir)
            .is_ok_and(|opened| opened.st_dev == meta.dev() && opened.st_ino == meta.ino()),
        _ => false,
    };
    walk.files
        .sort_unstable_by(|a, b| a.rel_path.cmp(&b.rel_path));
    walk.warnings.sort_by(|a, b| a.path.cmp(&b.path));
    if !listed_root_is_opened_root {
        walk.files.clear();
        walk.warnings = vec![Warning::unreadable(
            root_name,
            "the folder changed during the walk (swapped for a link or moved); nothing under it is read or deleted, it is walked again on the next run",
        )];
        walk.unreadable = vec![String::new()];
    }
}

/// The stat of a file entry (not following a link), taken relative to its folder's open handle
/// (opened once per folder, without following a link; at most one per depth is kept open).
/// `None` when the folder cannot be opened so, or the stat fails: the caller then stats by path,
/// as before, and reports what that finds.
fn stat_in_folder(
    walk: &Walk,
    folders: &mut Vec<Option<(std::path::PathBuf, OwnedFd)>>,
    entry: &walkdir::DirEntry,
) -> Option<FileStat> {
    use std::os::fd::AsFd;
    let depth = entry.depth();
    let parent = entry.path().parent()?;
    // Folders deeper than this entry's are done with.
    folders.truncate(depth);
    let stat = if depth == 1 {
        let root = walk.root_dir.as_ref()?;
        rustix::fs::statat(
            root,
            entry.file_name(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
    } else {
        if folders.len() < depth {
            folders.resize_with(depth, || None);
        }
        let slot = &mut folders[depth - 1];
        if slot
            .as_ref()
            .is_none_or(|(path, _)| path.as_os_str() != parent.as_os_str())
        {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::open(parent, flags, Mode::empty()).ok()?;
            *slot = Some((parent.to_path_buf(), fd));
        }
        let (_, fd) = slot.as_ref()?;
        rustix::fs::statat(
            fd.as_fd(),
            entry.file_name(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
    };
    stat.ok().map(|stat| FileStat::of(&stat))
}

/// Opens the canonical `root` from `/` down, one component at a time with `O_NOFOLLOW`: the
/// name was resolved before (links and all), so a link found on the way now is a swap made
/// since, and following it would lead every read of the run out of the root.
fn open_root(root: &Path) -> rustix::io::Result<OwnedFd> {
    let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open("/", folder, Mode::empty())?;
    for component in root.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(name) => {
                dir = rustix::fs::openat(&dir, name, folder | OFlags::NOFOLLOW, Mode::empty())?;
            }
            // A canonical path has none of these.
            Component::Prefix(_) | Component::CurDir | Component::ParentDir => {
                return Err(Errno::INVAL);
            }
        }
    }
    Ok(dir)
}

/// A symbolic link inside the root: indexed under its own name when it leads to a document
/// file inside the root that the walk itself would take (not hidden, not excluded: a link
/// must not undo an `--exclude`); otherwise skipped, with a warning unless it leads to a
/// folder (which the walk reaches by its real path anyway, so following it would only count
/// it twice).
fn follow_link(
    root: &Path,
    path: &Path,
    rel: &str,
    name: &str,
    excludes: &Excludes,
    formats: FormatSet,
    walk: &mut Walk,
) -> Option<WalkedFile> {
    let target = match std::fs::canonicalize(path) {
        Ok(target) => target,
        Err(err) => {
            if Format::from_file_name(name).is_some_and(|format| formats.contains(format)) {
                walk.warnings.push(Warning::skipped(
                    rel,
                    format!("symbolic link is dangling or loops ({err}); skipped"),
                ));
            }
            return None;
        }
    };
    if !target.starts_with(root) {
        walk.warnings.push(Warning::skipped(
            rel,
            "symbolic link leads out of the folder; not followed",
        ));
        return None;
    }
    let meta = std::fs::metadata(&target).ok()?;
    if !meta.is_file() {
        return None;
    }
    let kind = match Format::from_file_name(name) {
        Some(format) if formats.contains(format) => format,
        other => {
            walk.passed_over.count(name, other);
            return None;
        }
    };
    let Some(read_path) = relative(root, &target) else {
        walk.warnings.push(Warning::skipped(
            rel,
            "symbolic link leads to a name that is not valid UTF-8; skipped",
        ));
        return None;
    };
    if is_hidden_or_excluded(&read_path, excludes) {
        walk.warnings.push(Warning::skipped(
            rel,
            "symbolic link leads to a hidden or excluded file; not followed",
        ));
        return None;
    }
    Some(WalkedFile {
        rel_path: rel.to_string(),
        link_target: Some(read_path.into()),
        format: kind,
        stat: stat_of(&meta),
    })
}

/// True when the walk would not take `rel_path` (relative, `/` separators): some component
/// of it is hidden or excluded, by name or by its path so far, as `walk` decides for entries.
fn is_hidden_or_excluded(rel_path: &str, excludes: &Excludes) -> bool {
    let mut end = 0;
    rel_path.split('/').any(|part| {
        end += part.len();
        let so_far = &rel_path[..end];
        end += 1;
        part.starts_with('.') || excludes.excludes(OsStr::new(part), so_far)
    })
}

fn special_kind(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "device"
    } else {
        "unknown type"
    }
}

/// `path` relative to `root` with `/` separators; `None` when not valid UTF-8. The walk
/// builds every path by joining names to the root, so what follows the root's own
/// components is already the relative path, with `/` between its names.
fn relative(root: &Path, path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    // Compared as bytes: `Path::strip_prefix` takes both paths apart into components.
    let rest = path
        .as_os_str()
        .as_bytes()
        .strip_prefix(root.as_os_str().as_bytes())?;
    let rest = match rest.strip_prefix(b"/") {
        Some(rest) => rest,
        // `root` is `/` (its joins add no separator), or `path` is `root` itself.
        None if rest.is_empty() || root.as_os_str().as_bytes().ends_with(b"/") => rest,
        // A sibling whose name only begins like the root's (`/docs2` under `/docs`).
        None => return None,
    };
    std::str::from_utf8(rest).ok().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::{Excludes, Walk, walk};

    #[test]
    fn relative_paths_are_what_follows_the_root() {
        use std::path::Path;
        let rel = |root: &str, path: &str| super::relative(Path::new(root), Path::new(path));
        assert_eq!(rel("/docs", "/docs/a/b.md").as_deref(), Some("a/b.md"));
        assert_eq!(rel("/docs", "/docs").as_deref(), Some(""));
        assert_eq!(rel("/", "/a/b.md").as_deref(), Some("a/b.md"));
        assert_eq!(rel("/docs", "/docs2/a.md"), None);
        assert_eq!(rel("/docs", "/other/a.md"), None);
    }

    #[test]
    fn finds_documents_and_skips_hidden_and_excluded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical");
        for (path, text) in [
            ("a.md", "a"),
            ("b.txt", "b"),
            ("c.rs", "c"),
            (".hidden.md", "h"),
            (".git/x.md", "x"),
            ("sub/d.markdown", "d"),
            ("drafts/e.md", "e"),
            ("archive/old/f.md", "f"),
        ] {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(full, text).expect("write");
        }
        let excludes = Excludes::new(&["drafts".into(), "archive/**".into()]).expect("globs");
        let found = walk(
            &root,
            &excludes,
            Default::default(),
            &AtomicBool::new(false),
        )
        .expect("walk");
        let paths: Vec<&str> = found.files.iter().map(|f| f.rel_path.as_str()).collect();
        assert_eq!(paths, ["a.md", "b.txt", "sub/d.markdown"]);
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        assert_eq!(
            found.passed_over.describe(),
            "1 .rs: not a supported format"
        );
    }

    #[test]
    fn counts_what_it_passes_over_by_extension() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical");
        for path in [
            "a.md", "b.PDF", "c.pdf", "d.docx", "e.docx", "f.png", "LICENSE", "g.rst",
        ] {
            std::fs::write(root.join(path), "x").expect("write");
        }
        let formats = crate::format::FormatSet::parse(&["md,rst"]).expect("formats");
        let found = walk(
            &root,
            &Excludes::default(),
            formats,
            &AtomicBool::new(false),
        )
        .expect("walk");
        let paths: Vec<&str> = found.files.iter().map(|f| f.rel_path.as_str()).collect();
        assert_eq!(paths, ["a.md", "g.rst"]);
        assert_eq!(
            found.passed_over.describe(),
            "2 .docx, 1 (no extension), 1 .png: not a supported format; 2 .pdf: not among the formats read (--formats)"
        );
    }

    #[test]
    fn a_stopped_walk_holds_every_path_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::write(root.join("a.md"), "a").expect("write");
        let found = walk(
            &root,
            &Excludes::default(),
            Default::default(),
            &AtomicBool::new(true),
        )
        .expect("walk");
        assert!(found.files.is_empty(), "{:?}", found.files);
        assert!(found.is_held_back("a.md"));
        assert!(found.is_held_back("any/other.md"));
        assert!(found.warnings[0].message.contains("stopped"));
    }

    #[test]
    fn held_back_matches_whole_components() {
        let walk = Walk {
            unreadable: vec!["locked".into()],
            ..Walk::default()
        };
        assert!(walk.is_held_back("locked/a.md"));
        assert!(walk.is_held_back("locked"));
        assert!(!walk.is_held_back("lockedness.md"));
    }
}
