//! The files a run has to read under one root, held compactly from the plan to the last batch.
//!
//! A cold ingest of a million files holds this list for most of the run. Each file's walk
//! record (`WalkedFile`) is 80 bytes and an allocation for its path, about 145 MB for a
//! million files; reading needs only the path, the format and, for a link, its target. So the
//! plan keeps the paths one after another in one string, with where each ends and each
//! format beside them: about 9 bytes a file and the path's own bytes (about 32 MB for the
//! generated million). Batches are taken off the front in path order.

use crate::format::Format;
use crate::walk::WalkedFile;

/// A file to read, as a batch takes it off the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileToRead {
    /// Relative to the root, with `/` separators: the source's name in the ledger.
    pub rel_path: String,
    /// For a link inside the root, its canonical target (relative, `/` separators).
    pub link_target: Option<Box<str>>,
    pub format: Format,
}

impl FileToRead {
    /// What to open: the entry itself, or for a link inside the root, its canonical target.
    pub fn read_path(&self) -> &str {
        self.link_target.as_deref().unwrap_or(&self.rel_path)
    }
}

impl From<&WalkedFile> for FileToRead {
    fn from(file: &WalkedFile) -> FileToRead {
        FileToRead {
            rel_path: file.rel_path.clone(),
            link_target: file.link_target.clone(),
            format: file.format,
        }
    }
}

/// The files to read under a root, in the order they were added (the plan adds them in path
/// order).
#[derive(Debug, Default)]
pub(crate) struct FilesToRead {
    /// Every path, one after another.
    paths: String,
    /// Where each file's path ends in `paths`.
    ends: Vec<usize>,
    formats: Vec<Format>,
    /// The targets of the links among the files, by the file's position, in order.
    links: Vec<(usize, Box<str>)>,
    /// How many files batches have taken.
    taken: usize,
    /// The files' sizes added up, as the walk found them, each at most the size read.
    bytes: u64,
}

impl FilesToRead {
    /// The files not taken yet.
    pub fn len(&self) -> usize {
        self.ends.len() - self.taken
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sizes of all the files, taken or not, added up as the walk found them, each counted
    /// at most as the largest file read (a file over it is not read).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The files to read, in the order given; a file is counted in `bytes` at most as
    /// `max_file_size`.
    pub fn new(files: impl IntoIterator<Item = WalkedFile>, max_file_size: u64) -> FilesToRead {
        let mut list = FilesToRead::default();
        for file in files {
            list.push(file, max_file_size);
        }
        list.paths.shrink_to_fit();
        list.ends.shrink_to_fit();
        list.formats.shrink_to_fit();
        list.links.shrink_to_fit();
        list
    }

    fn push(&mut self, file: WalkedFile, max_file_size: u64) {
        if let Some(target) = file.link_target {
            self.links.push((self.ends.len(), target));
        }
        self.paths.push_str(&file.rel_path);
        self.ends.push(self.paths.len());
        self.formats.push(file.format);
        self.bytes = self.bytes.saturating_add(file.stat.size.min(max_file_size));
    }

    /// Takes up to `size` files (at least one) off the front; `None` once every file is taken.
    pub fn next_batch(&mut self, size: usize) -> Option<Vec<FileToRead>> {
        if self.is_empty() {
            return None;
        }
        let range = self.taken..self.ends.len().min(self.taken.saturating_add(size.max(1)));
        // The links are in file order: those of this batch are at the front of the ones left.
        let first_link = self.links.partition_point(|(at, _)| *at < range.start);
        let mut links = self.links[first_link..]
            .iter()
            .take_while(|(at, _)| range.contains(at))
            .peekable();
        let batch = range
            .clone()
            .map(|at| {
                let start = match at {
                    0 => 0,
                    at => self.ends[at - 1],
                };
                FileToRead {
                    rel_path: self.paths[start..self.ends[at]].to_string(),
                    link_target: links
                        .next_if(|(link, _)| *link == at)
                        .map(|(_, target)| target.clone()),
                    format: self.formats[at],
                }
            })
            .collect();
        self.taken = range.end;
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::{FileToRead, FilesToRead};
    use crate::format::Format;
    use crate::stat::FileStat;
    use crate::walk::WalkedFile;

    fn file(i: usize) -> WalkedFile {
        WalkedFile {
            // Paths of different lengths, some not ASCII, every third a link.
            rel_path: format!("{}/f{i}é.md", "d".repeat(i % 5)),
            link_target: i
                .is_multiple_of(3)
                .then(|| format!("target/{i}.md").into_boxed_str()),
            format: [Format::Markdown, Format::PlainText, Format::Html][i % 3],
            stat: FileStat {
                size: i as u64,
                mtime_ns: 1,
                ctime_ns: 2,
                inode: 3,
            },
        }
    }

    #[test]
    fn batches_hand_out_every_file_once_in_order_as_it_was_walked() {
        for (files, size) in [(0, 3), (1, 3), (7, 3), (9, 3), (100, 1), (1000, 64), (5, 0)] {
            let walked: Vec<WalkedFile> = (0..files).map(file).collect();
            let mut list = FilesToRead::new(walked.iter().cloned(), u64::MAX);
            assert_eq!(list.len(), files);
            assert_eq!(list.bytes(), (0..files as u64).sum::<u64>());
            let capped = FilesToRead::new(walked.iter().cloned(), 5);
            assert_eq!(
                capped.bytes(),
                (0..files as u64).map(|size| size.min(5)).sum::<u64>()
            );
            let mut batches = Vec::new();
            while let Some(batch) = list.next_batch(size) {
                batches.push(batch);
            }
            assert!(
                batches
                    .iter()
                    .all(|batch| !batch.is_empty() && batch.len() <= size.max(1)),
                "{files} files in batches of {size}"
            );
            let expected: Vec<FileToRead> = walked.iter().map(FileToRead::from).collect();
            assert_eq!(
                batches.concat(),
                expected,
                "{files} files in batches of {size}"
            );
            assert!(list.is_empty());
            assert_eq!(list.next_batch(size), None);
        }
    }

    #[test]
    fn a_link_is_read_through_its_target_and_named_by_its_own_path() {
        let mut list = FilesToRead::new((0..4).map(file), u64::MAX);
        let batch = list.next_batch(10).expect("a batch");
        assert_eq!(batch[0].read_path(), "target/0.md");
        assert_eq!(batch[0].rel_path, "/f0é.md");
        assert_eq!(batch[1].read_path(), "d/f1é.md");
        assert_eq!(batch[3].read_path(), "target/3.md");
    }

    #[test]
    fn it_holds_the_paths_and_nine_bytes_a_file() {
        let walked: Vec<WalkedFile> = (0..10_000).map(file).collect();
        let path_bytes: usize = walked.iter().map(|file| file.rel_path.len()).sum();
        let list = FilesToRead::new(walked, u64::MAX);
        assert_eq!(list.paths.capacity(), path_bytes);
        assert_eq!(list.ends.capacity(), 10_000);
        assert_eq!(list.formats.capacity(), 10_000);
        assert_eq!(
            std::mem::size_of::<usize>() + std::mem::size_of::<Format>(),
            9
        );
        // Only the links keep a target of their own.
        assert_eq!(list.links.len(), 3_334);
    }
}
