//! The index: the Tantivy projection of the ledger's chunks, and the only module that imports
//! tantivy.
//!
//! Each Tantivy document is one chunk: its ID as four 64-bit fast columns (the first,
//! `chunk_key`, also indexed: the delete term and the filter key), the 64-bit key of its
//! normalised text (a fast column: what search folds repeated passages by), its heading path
//! (boosted), its heading path and text together (the scored body), and the labels of the
//! documents that hold it (`ChunkLabels`: file name stems, front-matter titles, identifier
//! fields), each its own boosted field, and every one of them whole (with the documents' titles)
//! in `whole_labels`, which only a query naming it matches. Nothing is stored: the text and heading of a hit are
//! read from the ledger, so a store keeps each passage once. Every text field goes through one analyzer (`tokenizer`:
//! identifier-aware words, lower case, English stemmer), and so does every query. Paths, tags
//! and line ranges are *not* in the index: they live in the ledger, so a tag edit never
//! rewrites the index; only a change of a document's set of file name stems does (the store
//! logs its chunks again). The commit payload holds the ledger generation the commit brings
//! the index to.
//!
//! A reader searches a `Snapshot`: one Tantivy searcher together with the generation of that
//! very commit, read from the commit whose segments the searcher holds (never from a later read
//! of `meta.json`, which an ingest may have moved on meanwhile). Snapshots are cheap to clone
//! and shared by every thread; the last few are kept, so that a page cursor can come back to
//! the generation it was cut from.
//!
//! It never reads the ledger; `store` decides what to write.

mod directory;
mod merges;
mod query;
mod snippet;
mod tokenizer;

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tantivy::collector::{FilterCollector, TopDocs};
use tantivy::directory::MmapDirectory;

use self::directory::CrashDirectory;
use tantivy::doc;
use tantivy::indexer::IndexWriterOptions;
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{
    DocAddress, Index as TantivyIndex, IndexReader, IndexWriter, ReloadPolicy, Searcher, Term,
};

use crate::error::{Error, Result};
use crate::ids::{self, ChunkId, Generation};

/// How many snapshots a reader keeps: the current one and those it replaced.
const KEPT_SNAPSHOTS: usize = 8;
/// How long a replaced snapshot stays available to page cursors.
const KEEP_REPLACED_FOR: Duration = Duration::from_secs(10 * 60);
/// How often a reload reads `meta.json` again when commits land while it looks.
const CAPTURE_TRIES: usize = 16;

pub(crate) use query::query_words;
/// The analyzer of every text field and query, its version, and the name (with the version) an
/// index registers it under: for programs that open a store's index with Tantivy alone (the
/// reference benchmarks).
pub use tokenizer::{analyzer, name as analyzer_name};

/// A chunk as the index receives it.
#[derive(Clone, Debug)]
pub struct IndexedChunk<'a> {
    pub id: ChunkId,
    pub heading_path: &'a [String],
    pub text: &'a str,
    /// What the documents that hold the chunk are called.
    pub labels: &'a ChunkLabels,
}

/// What the documents holding a chunk are called, as the index scores it: each list one
/// field of the chunk's Tantivy document, with its own weight (`QueryConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkLabels {
    /// The file name stems of every source of every such document (`tar`, `eip-1559`).
    pub names: Vec<String>,
    /// Their front-matter titles.
    pub titles: Vec<String>,
    /// The values of their identifier fields (`IdFields`).
    pub ids: Vec<String>,
    /// Their titles as the ledger records them (the front-matter title, else the first level-1
    /// heading). Only matched whole (`Snapshot::named`), never scored.
    pub document_titles: Vec<String>,
}

/// The front-matter keys whose values are indexed as identifiers when `id_fields` is not set.
/// Keys that name a thing (`id`, `slug`, `name`, `aliases`), and the numbering schemes of
/// standards and proposals; never free text (`author`, `description`, `summary`), whose words
/// would make every document by one author a hit for the author's name, nor references to
/// other documents (`requires`, `replaces`), which would make a document a hit for another's
/// number.
pub const DEFAULT_ID_FIELDS: &[&str] = &[
    "id",
    "uid",
    "slug",
    "name",
    "alias",
    "aliases",
    "key",
    "code",
    "identifier",
    "permalink",
    "number",
    "eip",
    "erc",
    "bip",
    "rfc",
    "pep",
    "cve",
    "adr",
];

/// Which front-matter fields are identifiers, by key (compared without case).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdFields(Vec<String>);

impl IdFields {
    pub fn new(keys: &[String]) -> IdFields {
        IdFields(keys.iter().map(|key| key.trim().to_lowercase()).collect())
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0.iter().any(|known| known.eq_ignore_ascii_case(key))
    }

    pub fn keys(&self) -> &[String] {
        &self.0
    }
}

impl Default for IdFields {
    fn default() -> Self {
        IdFields(
            DEFAULT_ID_FIELDS
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        )
    }
}

/// A hit as the index returns it; `search` reads its text and sources from the ledger.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexHit {
    pub id: ChunkId,
    pub score: f32,
    /// `ids::text_key` of the chunk's text: equal keys are the same passage.
    pub text_key: u64,
}

/// How a query is scored.
#[derive(Clone, Copy, Debug)]
pub struct QueryConfig {
    /// Weight of a match in the heading path (title and headings) against one in the text.
    pub heading_boost: f32,
    /// Weight of a match in the file name stems of the chunk's documents.
    pub name_boost: f32,
    /// Weight of a match in the front-matter titles of the chunk's documents.
    pub title_boost: f32,
    /// Weight of a match in the identifier fields of the chunk's documents.
    pub id_boost: f32,
}

impl Default for QueryConfig {
    fn default() -> Self {
        // The heading path is already scored inside the body; this extra weight on a match
        // in the heading alone was chosen on SciFact (nDCG@10: 0.6854 at 0, 0.6968 at 0.25,
        // 0.6814 at 0.5, 0.6379 at 1.5).
        // The name, title and identifier weights: see BOOSTS below.
        QueryConfig {
            heading_boost: 0.25,
            name_boost: BOOSTS.name,
            title_boost: BOOSTS.title,
            id_boost: BOOSTS.id,
        }
    }
}

struct Boosts {
    name: f32,
    title: f32,
    id: f32,
}

/// The weights of the label fields. A label is matched whole, by a run of its parts
/// (`query::build`), each run weighted by its length and faded in queries of more than two
/// words. Chosen on the EIP-like documents of `tests/it/identifiers.rs`: at 1.0 for names and
/// identifiers, a proposal citing `ERC-4337` five times in three lines outranked
/// `erc-4337.md`; at 2.0 every proposal's number finds it first. Matching labels word by word
/// instead cost the documentation questions of `benches/retrieval` half their MRR (a question's
/// `why` named `why-kubernetes-and-eks.md`); docs/BENCHMARKS.md, "Identifiers and titles".
const BOOSTS: Boosts = Boosts {
    name: 2.0,
    title: 0.5,
    id: 2.0,
};

/// The fast columns of a chunk's ID: `chunk_key` (bytes 0..8, little-endian, as
/// `ChunkId::short`) and the rest, eight bytes each.
const ID_COLUMNS: [&str; 4] = ["chunk_key", "chunk_id_1", "chunk_id_2", "chunk_id_3"];
const TEXT_KEY: &str = "text_key";

#[derive(Clone, Copy)]
struct Fields {
    /// `ID_COLUMNS`: the first indexed too (the delete term and the filter key).
    id: [Field; 4],
    text_key: Field,
    heading: Field,
    /// The heading path and the text together: what BM25 scores.
    body: Field,
    /// `ChunkLabels::names`, `titles` and `ids`, indexed and not stored.
    names: Field,
    titles: Field,
    ids: Field,
    /// Every label of the chunk's documents, whole (`tokenizer::whole_label`): what a query
    /// that *is* a document's name, title or identifier matches (`Snapshot::named`). `None` in
    /// an index of the previous schema opened for reading.
    whole_labels: Option<Field>,
}

impl Fields {
    /// The label fields: those a query has a clause in only for the terms the index holds.
    fn labels(&self) -> impl Iterator<Item = Field> + use<> {
        [self.names, self.titles, self.ids]
            .into_iter()
            .chain(self.whole_labels)
    }
}

/// An empty index of the current schema in memory, with the one analyzer registered (for the
/// tests of the index and its queries).
#[cfg(test)]
fn ram_index() -> (TantivyIndex, Fields) {
    let (schema, fields) = schema();
    let index = TantivyIndex::create_in_ram(schema);
    index
        .tokenizers()
        .register(&tokenizer::name(), tokenizer::analyzer());
    (index, fields)
}

/// The Tantivy index of a store.
pub struct Index {
    index: TantivyIndex,
    fields: Fields,
    reader: IndexReader,
    /// Oldest first, the current snapshot last, each with the moment it became current.
    snapshots: RwLock<VecDeque<(Instant, Arc<Snapshot>)>>,
    /// The device and inode of the folder at open, to notice a swap.
    folder: Option<(u64, u64)>,
    dir: std::path::PathBuf,
}

/// One commit as a reader sees it: the searcher, and the generation and segment layout of
/// exactly the commit it searches.
#[derive(Clone)]
pub struct Snapshot {
    searcher: Searcher,
    fields: Fields,
    generation: Generation,
    layout: u64,
    /// Each segment's ID columns, opened by the first search that has a hit there and kept
    /// for every search of this snapshot after it.
    columns: Arc<[std::sync::OnceLock<IdColumns>]>,
    /// The label fields no segment of the snapshot has a term in (`holds`), found by the
    /// first search that asks: a writer's snapshots are never searched.
    empty_fields: Arc<std::sync::OnceLock<Vec<Field>>>,
    /// The index's folder, named when a segment turns out to be damaged.
    dir: Arc<Path>,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let words = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(&tokenizer::name())
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        id: [
            builder.add_u64_field(ID_COLUMNS[0], INDEXED | FAST),
            builder.add_u64_field(ID_COLUMNS[1], FAST),
            builder.add_u64_field(ID_COLUMNS[2], FAST),
            builder.add_u64_field(ID_COLUMNS[3], FAST),
        ],
        text_key: builder.add_u64_field(TEXT_KEY, FAST),
        heading: builder.add_text_field("heading", words.clone()),
        body: builder.add_text_field("body", words),
        // A label is indexed as the keys of whole runs of its parts (`tokenizer::label_terms`):
        // a query matches it by naming one of those runs, never by sharing one plain word.
        names: builder.add_text_field("names", STRING),
        titles: builder.add_text_field("titles", STRING),
        ids: builder.add_text_field("ids", STRING),
        whole_labels: Some(builder.add_text_field("whole_labels", STRING)),
    };
    (builder.build(), fields)
}

/// `text` with the brackets of mnemonic letters taken out of words: `[c]reate`, `E[x]tract`,
/// `[v]erbose` become `create`, `Extract`, `verbose`, as a reader reads them (command-line
/// cheat sheets mark the letter of a short option so). Only one or two letters or digits in
/// brackets that touch a letter or digit on at least one side (`a[i]` reads `ai`); `[1]` alone,
/// `[abc]` and links (`[text](url)`) keep theirs. What the index scores, never what is stored
/// or served.
pub(crate) fn without_mnemonic_brackets(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('[') {
        return std::borrow::Cow::Borrowed(text);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '[' {
            let inner = chars[i + 1..]
                .iter()
                .take(3)
                .take_while(|c| c.is_alphanumeric())
                .count();
            let close = i + 1 + inner;
            if (1..=2).contains(&inner) && chars.get(close) == Some(&']') {
                let before = i > 0 && chars[i - 1].is_alphanumeric();
                let after = chars.get(close + 1).is_some_and(|c| c.is_alphanumeric());
                if before || after {
                    out.extend(&chars[i + 1..close]);
                    i = close + 1;
                    continue;
                }
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

/// File name stems that name no document exactly (`whole_labels`): the landing page of every
/// folder of a documentation site has one.
const GENERIC_FILE_STEMS: &[&str] = &["index", "readme"];

/// Which schemas an opening accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Schemas {
    Current,
    /// The current one, or the one before `whole_labels` (for readers only).
    CurrentOrPrevious,
}

/// The schema before the `whole_labels` field: the current one without it (it is the last
/// field, so every other field keeps its number).
fn previous_schema() -> Schema {
    let (current, _) = schema();
    let mut builder = Schema::builder();
    for (_, entry) in current.fields() {
        if entry.name() != "whole_labels" {
            builder.add_field(entry.clone());
        }
    }
    builder.build()
}

/// The analyzer the text field `name` of `schema` names, when it has one.
fn analyzer_of(schema: &Schema, name: &str) -> Option<String> {
    let field = schema.get_field(name).ok()?;
    match schema.get_field_entry(field).field_type() {
        tantivy::schema::FieldType::Str(options) => options
            .get_indexing_options()
            .map(|indexing| indexing.tokenizer().to_string()),
        _ => None,
    }
}

fn index_error(context: impl Into<String>) -> impl FnOnce(tantivy::TantivyError) -> Error {
    let context = context.into();
    move |source| Error::Index { context, source }
}

/// `read`, with a panic taken as damage: Tantivy asserts or `unwrap`s on some damage to a
/// segment's files (a `.fast` file's list of columns: its length, its blocks) where other
/// damage fails, and the store must say its index is damaged, not crash. (The panic's message
/// still goes to stderr, before the error that names the index.)
fn panic_as_damage<T>(read: impl FnOnce() -> tantivy::Result<T>) -> tantivy::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|_| {
        Err(tantivy::TantivyError::DataCorruption(
            tantivy::error::DataCorruption::comment_only(
                "a segment file is damaged (Tantivy panicked reading it)",
            ),
        ))
    })
}

/// The I/O error inside a Tantivy error, if it is one.
fn io_kind(err: &tantivy::TantivyError) -> Option<std::io::ErrorKind> {
    use tantivy::TantivyError as T;
    use tantivy::directory::error::{LockError, OpenDirectoryError, OpenReadError};
    match err {
        T::IoError(io) => Some(io.kind()),
        T::OpenReadError(OpenReadError::IoError { io_error, .. }) => Some(io_error.kind()),
        T::OpenDirectoryError(OpenDirectoryError::IoError { io_error, .. }) => {
            Some(io_error.kind())
        }
        T::LockFailure(LockError::IoError(io), _) => Some(io.kind()),
        _ => None,
    }
}

/// True when a failure to open an index says something about the machine (permissions, a
/// read-only or full disk, memory), not about the index: rebuilding would not help, and the
/// error is reported as it is. Anything else (a missing or truncated file, bad JSON, an
/// unknown format) means the folder cannot serve as an index.
fn is_environmental(err: &tantivy::TantivyError) -> bool {
    use std::io::ErrorKind as K;
    io_kind(err).is_some_and(|kind| {
        matches!(
            kind,
            K::PermissionDenied
                | K::ReadOnlyFilesystem
                | K::StorageFull
                | K::QuotaExceeded
                | K::OutOfMemory
                | K::Interrupted
                | K::ResourceBusy
                | K::WouldBlock
                | K::TimedOut
        )
    })
}

/// An error opening the index in `dir`: environmental failures as they are, everything else as
/// an index the ledger must make again.
fn open_error(dir: &Path, context: &str) -> impl FnOnce(tantivy::TantivyError) -> Error {
    let dir = dir.to_path_buf();
    let context = format!("{context} {}", dir.display());
    move |source| {
        if is_environmental(&source) {
            Error::Index { context, source }
        } else {
            Error::IndexUnusable {
                path: dir,
                reason: source.to_string(),
            }
        }
    }
}

/// How many threads a writer indexes with, each with an arena of 48 MB that it fills and then
/// writes out as a segment.
///
/// Two threads end a short run sooner: its last documents are indexed in parallel while the
/// run waits for them. A long run fills and flushes its arenas again and again; with one
/// thread it holds one arena rather than two, and the thread takes a core from the reading and
/// chunking less often. On 2 cores (cold ingests, alternating, medians): the generated
/// proposals (16 MB) 1,479 ms with two threads against 1,822 ms with one, 1k generated files
/// 369 against 414 ms; 10k files (30 MB) 2,937 against 2,801 ms, 100k files 38.6 against
/// 36.5 s and 247 against 202 MiB at the peak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Indexing {
    /// Two threads: a short run, or one whose size is not known (a catch-up, a rebuild).
    #[default]
    Short,
    /// One thread: a run that reads `LONG_RUN_BYTES` or more.
    Long,
}

impl Indexing {
    /// A run that reads this many bytes of files or more is long.
    pub const LONG_RUN_BYTES: u64 = 24 * 1024 * 1024;

    /// The indexing of a run that reads `bytes` of files.
    pub fn of_run(bytes: u64) -> Indexing {
        match bytes >= Self::LONG_RUN_BYTES {
            true => Indexing::Long,
            false => Indexing::Short,
        }
    }

    fn threads(self) -> usize {
        match self {
            Indexing::Short => 2,
            Indexing::Long => 1,
        }
    }
}

/// The folder's identity (device and inode): a folder swapped in by a rebuild has another.
fn folder_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

fn directory(dir: &Path) -> Result<CrashDirectory> {
    match MmapDirectory::open(dir) {
        Ok(directory) => Ok(CrashDirectory::new(directory, dir)),
        Err(tantivy::directory::error::OpenDirectoryError::DoesNotExist(_)) => {
            Err(Error::IndexUnusable {
                path: dir.to_path_buf(),
                reason: "the index folder is missing".into(),
            })
        }
        Err(err) => Err(open_error(dir, "open index folder")(err.into())),
    }
}

/// The generation of the index's last commit in `dir`, read from its `meta.json` alone,
/// without opening the index: for `status`, which must work while the index is damaged.
pub(crate) fn committed_generation(dir: &Path) -> Result<Generation> {
    let path = dir.join("meta.json");
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::IndexUnusable {
                path: dir.to_path_buf(),
                reason: "meta.json is missing".into(),
            });
        }
        Err(err) => return Err(Error::io(format!("read {}", path.display()), err)),
    };
    let meta: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|err| Error::IndexUnusable {
            path: dir.to_path_buf(),
            reason: format!("meta.json is not JSON: {err}"),
        })?;
    Ok(Generation(
        meta["payload"]
            .as_str()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0),
    ))
}

impl Index {
    /// Opens the index in `dir`. Fails with `Error::IndexUnusable` when the folder holds no
    /// index, a damaged one or one of another schema (the store then rebuilds it from the
    /// ledger), and with `Error::Index` when the machine refuses (permissions, a full disk).
    pub fn open(dir: &Path) -> Result<Index> {
        Index::open_with(dir, Schemas::Current)
    }

    /// Opens the index in `dir` for reading: as `open`, and also an index of the schema before
    /// `whole_labels` existed, searched without exact-name promotion (a warning says so) until
    /// the next writer rebuilds it. An upgrade then never takes a store's servers down.
    pub(crate) fn open_for_reading(dir: &Path) -> Result<Index> {
        Index::open_with(dir, Schemas::CurrentOrPrevious)
    }

    fn open_with(dir: &Path, schemas: Schemas) -> Result<Index> {
        let meta = dir.join("meta.json");
        // A folder that cannot be read is the machine's refusal, not a missing index.
        let exists = match meta.try_exists() {
            Ok(exists) => exists,
            Err(err) if err.kind() == std::io::ErrorKind::NotADirectory => false,
            Err(err) => return Err(Error::io(format!("read {}", meta.display()), err)),
        };
        if !exists {
            return Err(Error::IndexUnusable {
                path: dir.to_path_buf(),
                reason: if dir.is_dir() {
                    "meta.json is missing".into()
                } else {
                    "the index folder is missing".into()
                },
            });
        }
        let index = TantivyIndex::open(directory(dir)?).map_err(open_error(dir, "open"))?;
        Index::wrap(index, dir, schemas)
    }

    /// Creates an empty index in `dir`, creating the folder; the folder must hold no index.
    pub fn create(dir: &Path) -> Result<Index> {
        std::fs::create_dir_all(dir)
            .map_err(|err| Error::io(format!("create {}", dir.display()), err))?;
        let index = TantivyIndex::create(
            directory(dir)?,
            schema().0,
            tantivy::IndexSettings::default(),
        )
        .map_err(index_error(format!("create {}", dir.display())))?;
        Index::wrap(index, dir, Schemas::Current)
    }

    /// Opens the index in `dir`, creating an empty one when the folder holds none.
    pub fn open_or_create(dir: &Path) -> Result<Index> {
        if dir.join("meta.json").exists() {
            Index::open(dir)
        } else {
            Index::create(dir)
        }
    }

    fn wrap(index: TantivyIndex, dir: &Path, schemas: Schemas) -> Result<Index> {
        let (expected, mut fields) = schema();
        if schemas == Schemas::CurrentOrPrevious && index.schema() == previous_schema() {
            tracing::warn!(
                index = %dir.display(),
                "the index predates exact-name matching: a query naming a document is ranked as any other until the next ingest (or `groundidx rebuild`) rebuilds it"
            );
            fields.whole_labels = None;
        } else if index.schema() != expected {
            return Err(Error::IndexUnusable {
                path: dir.to_path_buf(),
                reason: match analyzer_of(&index.schema(), "body") {
                    Some(made_by) if made_by != tokenizer::name() => format!(
                        "its words were made by another analyzer ({made_by}, not {})",
                        tokenizer::name()
                    ),
                    _ => "its schema is not the one this groundidx writes".into(),
                },
            });
        }
        // Tokenizers are not saved with an index: every opening registers the one analyzer
        // the schema names, for the writer, the queries and the snippets alike.
        index
            .tokenizers()
            .register(&tokenizer::name(), tokenizer::analyzer());
        // Opening the reader opens every segment's files, so a missing or truncated file is
        // found here rather than in the middle of a search.
        let reader = panic_as_damage(|| {
            index
                .reader_builder()
                .reload_policy(ReloadPolicy::Manual)
                .try_into()
        })
        .map_err(open_error(dir, "open reader on"))?;
        let first = capture(&index, &reader, fields, dir)?;
        Ok(Index {
            index,
            fields,
            reader,
            snapshots: RwLock::new(VecDeque::from([(Instant::now(), Arc::new(first))])),
            folder: folder_identity(dir),
            dir: dir.to_path_buf(),
        })
    }

    /// True when the folder this index was opened from has been replaced (a rebuild swapped a
    /// new index in): a reader must open the new one to see its commits.
    pub(crate) fn is_replaced(&self) -> bool {
        folder_identity(&self.dir) != self.folder
    }

    /// The snapshot searches see now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let snapshots = self
            .snapshots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            &snapshots
                .back()
                .expect("an index keeps its current snapshot")
                .1,
        )
    }

    /// A kept snapshot of this generation and segment layout, if there still is one.
    pub(crate) fn snapshot_at(&self, generation: Generation, layout: u64) -> Option<Arc<Snapshot>> {
        let snapshots = self
            .snapshots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        snapshots
            .iter()
            .find(|(_, s)| s.generation == generation && s.layout == layout)
            .map(|(_, s)| Arc::clone(s))
    }

    /// The generation of the last commit on disk (0 for an index never committed). A reader
    /// may not see it yet: what a search saw is `Snapshot::generation`.
    pub fn generation(&self) -> Result<Generation> {
        let metas = self
            .index
            .load_metas()
            .map_err(index_error("read meta.json"))?;
        Ok(Generation(
            metas
                .payload
                .as_deref()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0),
        ))
    }

    /// Makes the reader see the last commit. Returns the generation it now sees. On an error
    /// the previous snapshot stays current.
    pub fn reload(&self) -> Result<Generation> {
        panic_as_damage(|| self.reader.reload()).map_err(index_error("reload"))?;
        let fresh = capture(&self.index, &self.reader, self.fields, &self.dir)?;
        let generation = fresh.generation;
        let mut snapshots = self
            .snapshots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = &snapshots
            .back()
            .expect("an index keeps its current snapshot")
            .1;
        if current.generation == fresh.generation && current.layout == fresh.layout {
            return Ok(generation);
        }
        snapshots.push_back((Instant::now(), Arc::new(fresh)));
        // A snapshot is dropped once it has been replaced for long enough, or when too many
        // are kept; the current one always stays.
        while snapshots.len() > 1
            && (snapshots.len() > KEPT_SNAPSHOTS || snapshots[1].0.elapsed() > KEEP_REPLACED_FOR)
        {
            snapshots.pop_front();
        }
        Ok(generation)
    }

    /// Removes whatever a killed writer left: the files of segments and deletes that the last
    /// commit does not use (a killed commit's `<segment>.<opstamp>.del` would otherwise make
    /// the replay of the same operations fail with `FileAlreadyExists`, for good; killed
    /// merges and rebuilds leave whole segments), and the temporary files of interrupted
    /// atomic writes. For a writer, under the store's lock, before it writes: no other writer
    /// runs, and readers never open a file the last commit does not use (Tantivy's collection
    /// waits for a reader that is opening segments). A clean folder is left untouched.
    pub(crate) fn remove_leftovers(&self) -> Result<()> {
        remove_unused_files(&self.index)?;
        remove_temporary_files(&self.dir)
    }

    /// Starts writing, with as many indexing threads as `indexing` says. The writer holds
    /// Tantivy's own lock until dropped.
    pub fn writer(&self, indexing: Indexing) -> Result<Writer> {
        let options = IndexWriterOptions::builder()
            .num_worker_threads(indexing.threads())
            .memory_budget_per_thread(48 * 1024 * 1024)
            .num_merge_threads(merges::MERGE_THREADS)
            .build();
        let writer: IndexWriter = self
            .index
            .writer_with_options(options)
            .map_err(index_error("open writer"))?;
        writer.set_merge_policy(Box::new(merges::BoundedMerges::new()));
        // Tantivy stamps a new writer's first operation with the last commit's opstamp, which
        // is also the delete opstamp of every segment that commit gave deletes. A merge of
        // committed segments before this writer's first commit then skips a delete of that
        // opstamp in those segments, yet carries on from a cursor past it (when another segment
        // of the merge applied it): the documents it deleted come back. So the first operation
        // is a delete of nothing, which no segment misses.
        writer
            .delete_query(Box::new(tantivy::query::EmptyQuery))
            .map_err(index_error("open writer"))?;
        Ok(Writer {
            writer,
            indexing,
            fields: self.fields,
            analyzer: tokenizer::analyzer(),
        })
    }

    /// Every chunk ID in the current snapshot (see `Snapshot::chunk_ids`).
    pub fn chunk_ids(&self) -> Result<Vec<String>> {
        self.snapshot().chunk_ids()
    }

    /// The number of chunks in the current snapshot.
    pub fn num_chunks(&self) -> u64 {
        self.snapshot().num_chunks()
    }

    /// Runs a query on the current snapshot (see `Snapshot::search`).
    pub fn search(
        &self,
        query_text: &str,
        limit: usize,
        allowed: Option<&std::sync::Arc<std::collections::HashSet<u64>>>,
        config: &QueryConfig,
    ) -> Result<Vec<IndexHit>> {
        self.snapshot().search(query_text, limit, allowed, config)
    }
}

/// Those of `fields` that no segment of `searcher` has postings for, read from each segment's
/// table of contents. (`SegmentReader::inverted_index` would tell too, but for a field the
/// segment lacks it builds a new empty term dictionary, an FST builder of about a megabyte,
/// at every call.) When a segment's table cannot be read, no field is said to be empty; that
/// includes a damaged list of fast columns, on which Tantivy panics rather than fails.
fn fields_without_postings(searcher: &Searcher, fields: impl Iterator<Item = Field>) -> Vec<Field> {
    let schema = searcher.schema();
    let mut present = std::collections::HashSet::new();
    for segment in searcher.segment_readers() {
        let Ok(metadata) = panic_as_damage(|| segment.fields_metadata()) else {
            return Vec::new();
        };
        present.extend(
            metadata
                .iter()
                .filter(|field| field.postings_size.is_some_and(|size| size.get_bytes() > 0))
                .filter_map(|field| schema.get_field(&field.field_name).ok()),
        );
    }
    fields.filter(|field| !present.contains(field)).collect()
}

/// The reader's searcher with the generation of the commit it holds. The searcher is built from
/// the `meta.json` its last reload read, and a commit can land between that reload and a read
/// of `meta.json` here: the generation is taken from the commit whose segments (with their
/// deletes) are exactly the searcher's, reloading until the two agree.
fn capture(
    index: &TantivyIndex,
    reader: &IndexReader,
    fields: Fields,
    dir: &Path,
) -> Result<Snapshot> {
    for _ in 0..CAPTURE_TRIES {
        let metas = index.load_metas().map_err(index_error("read meta.json"))?;
        let searcher = reader.searcher();
        let on_disk: BTreeMap<_, _> = metas
            .segments
            .iter()
            .map(|segment| (segment.id(), segment.delete_opstamp()))
            .collect();
        let held = searcher.generation().segments();
        if &on_disk == held {
            let mut layout = Vec::with_capacity(held.len() * 24);
            for (id, deletes) in held {
                layout.extend_from_slice(id.uuid_string().as_bytes());
                layout.extend_from_slice(&deletes.unwrap_or(0).to_le_bytes());
            }
            let columns = (0..searcher.segment_readers().len())
                .map(|_| std::sync::OnceLock::new())
                .collect();
            return Ok(Snapshot {
                searcher,
                columns,
                empty_fields: Arc::default(),
                dir: Arc::from(dir),
                fields,
                generation: Generation(
                    metas
                        .payload
                        .as_deref()
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(0),
                ),
                layout: ids::layout_key(&layout),
            });
        }
        panic_as_damage(|| reader.reload()).map_err(index_error("reload"))?;
    }
    Err(Error::Inconsistent(format!(
        "the index changed on every one of {CAPTURE_TRIES} reads while it was opened\nhint: try again when the ingest has finished"
    )))
}

impl Snapshot {
    /// The generation of the commit this snapshot searches.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The key of its segment layout (`ids::layout_key`).
    pub(crate) fn layout(&self) -> u64 {
        self.layout
    }

    /// Every chunk ID in the commit this snapshot holds, once per Tantivy document (so a
    /// duplicate shows up twice), sorted.
    pub fn chunk_ids(&self) -> Result<Vec<String>> {
        chunk_ids_of(&self.searcher, &self.dir)
    }

    /// The number of chunks in the commit this snapshot holds.
    pub fn num_chunks(&self) -> u64 {
        self.searcher.num_docs()
    }

    /// Runs a query and returns up to `limit` hits, best first. `allowed` restricts hits to the
    /// chunks whose `ChunkId::short` it contains.
    pub fn search(
        &self,
        query_text: &str,
        limit: usize,
        allowed: Option<&std::sync::Arc<std::collections::HashSet<u64>>>,
        config: &QueryConfig,
    ) -> Result<Vec<IndexHit>> {
        let holds = |term: &tantivy::Term| self.holds(term);
        let query = query::build(
            self.searcher.index(),
            &self.fields,
            query_text,
            config,
            &holds,
        );
        self.top(&*query, limit, allowed)
    }

    /// The best `limit` chunks by `query`, among `allowed` when given.
    fn top(
        &self,
        query: &dyn tantivy::query::Query,
        limit: usize,
        allowed: Option<&std::sync::Arc<std::collections::HashSet<u64>>>,
    ) -> Result<Vec<IndexHit>> {
        let searcher = &self.searcher;
        let limit = limit.max(1);
        let top: Vec<(f32, DocAddress)> = match allowed {
            None => searcher
                .search(query, &TopDocs::with_limit(limit).order_by_score())
                .map_err(index_error("search"))?,
            Some(allowed) => {
                let allowed = std::sync::Arc::clone(allowed);
                let predicate = move |key: u64| allowed.contains(&key);
                searcher
                    .search(
                        query,
                        &FilterCollector::new(
                            "chunk_key".to_string(),
                            predicate,
                            TopDocs::with_limit(limit).order_by_score(),
                        ),
                    )
                    .map_err(index_error("search"))?
            }
        };
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let slot = &self.columns[address.segment_ord as usize];
            let columns = match slot.get() {
                Some(columns) => columns,
                None => {
                    let opened =
                        IdColumns::of(searcher.segment_reader(address.segment_ord), &self.dir)?;
                    slot.get_or_init(|| opened)
                }
            };
            hits.push(IndexHit {
                id: columns.id(address.doc_id)?,
                score,
                text_key: columns.text_key.first(address.doc_id).unwrap_or_default(),
            });
        }
        Ok(hits)
    }

    /// Whether the index may hold `term`: false when no segment has a term in its field, or
    /// none has it. The fields no segment has are found at the snapshot's first search
    /// (`fields_without_postings`): Tantivy makes an empty term dictionary anew for every
    /// look-up in a segment without the field. A term whose frequency cannot be read counts as
    /// held (the query then decides).
    fn holds(&self, term: &tantivy::Term) -> bool {
        !self
            .empty_fields
            .get_or_init(|| fields_without_postings(&self.searcher, self.fields.labels()))
            .contains(&term.field())
            && self.searcher.doc_freq(term).map_or(true, |n| n > 0)
    }

    /// The chunks whose documents the query names exactly, by a file name stem, a title or an
    /// identifier field (`query::build_named`), up to `limit`, the best-scoring by words first
    /// (a chunk that matches no word scores 0). `allowed` as in `search`.
    pub fn named(
        &self,
        query_text: &str,
        limit: usize,
        allowed: Option<&std::sync::Arc<std::collections::HashSet<u64>>>,
        config: &QueryConfig,
    ) -> Result<Vec<IndexHit>> {
        let holds = |term: &tantivy::Term| self.holds(term);
        match query::build_named(
            self.searcher.index(),
            &self.fields,
            query_text,
            config,
            &holds,
        ) {
            Some(query) => self.top(&*query, limit, allowed),
            None => Ok(Vec::new()),
        }
    }

    /// What marks a query's matches in the passages a search returns.
    pub(crate) fn highlighter(
        &self,
        query_text: &str,
        config: &QueryConfig,
    ) -> Result<Highlighter> {
        // Only the body's terms are marked: no label clause is built.
        let query = query::build(
            self.searcher.index(),
            &self.fields,
            query_text,
            config,
            &|_| false,
        );
        // What `SnippetGenerator::create` weighs, with an analyzer that stems only the words
        // that can match (`tokenizer::highlighter`): each term of the body the index holds,
        // weighed by its rarity.
        let mut terms: std::collections::BTreeSet<&tantivy::Term> = Default::default();
        query.query_terms(&mut |term, _| {
            if term.field() == self.fields.body {
                terms.insert(term);
            }
        });
        let mut weights: std::collections::BTreeMap<String, tantivy::Score> = Default::default();
        for term in terms {
            let value = term.value();
            let Some(text) = value.as_str() else {
                continue;
            };
            let documents = self
                .searcher
                .doc_freq(term)
                .map_err(index_error("snippet"))?;
            if documents > 0 {
                weights.insert(text.to_string(), 1.0 / (1.0 + documents as tantivy::Score));
            }
        }
        let terms = snippet::Terms::new(weights);
        let analyzer = tokenizer::highlighter(terms.words());
        Ok(Highlighter { terms, analyzer })
    }
}

/// The longest snippet, in characters.
const SNIPPET_CHARS: usize = 240;

/// Makes the snippets of one query's hits.
pub(crate) struct Highlighter {
    terms: snippet::Terms,
    analyzer: tantivy::tokenizer::TextAnalyzer,
}

impl Highlighter {
    /// A short passage of `text` with the query's matched terms between `**`; how the text
    /// begins when no term of the query is in it (a match in the heading or the labels alone).
    pub fn snippet(&mut self, text: &str) -> String {
        let snippet =
            match snippet::best_fragment(&mut self.analyzer, &self.terms, text, SNIPPET_CHARS) {
                Some(fragment) => mark(text, &fragment),
                None => String::new(),
            };
        if snippet.is_empty() {
            opening(text, SNIPPET_CHARS)
        } else {
            snippet
        }
    }
}

/// The fast columns of one segment that name its chunks.
#[derive(Clone)]
struct IdColumns {
    id: [tantivy::columnar::Column<u64>; 4],
    text_key: tantivy::columnar::Column<u64>,
}

impl IdColumns {
    /// The ID columns of `segment`, of the index in `dir`: a column that cannot be read for
    /// anything but the environment is a damaged index (`Error::IndexUnusable`).
    fn of(segment: &tantivy::SegmentReader, dir: &Path) -> Result<IdColumns> {
        let fast = segment.fast_fields();
        let column = |name: &str| {
            panic_as_damage(|| fast.u64(name)).map_err(open_error(dir, "read the chunk ids of"))
        };
        Ok(IdColumns {
            id: [
                column(ID_COLUMNS[0])?,
                column(ID_COLUMNS[1])?,
                column(ID_COLUMNS[2])?,
                column(ID_COLUMNS[3])?,
            ],
            text_key: column(TEXT_KEY)?,
        })
    }

    fn id(&self, doc: tantivy::DocId) -> Result<ChunkId> {
        let mut bytes = [0u8; 32];
        for (part, column) in bytes.chunks_exact_mut(8).zip(&self.id) {
            let value = column.first(doc).ok_or_else(|| {
                Error::Inconsistent(format!(
                    "the index holds a chunk without an id (document {doc})"
                ))
            })?;
            part.copy_from_slice(&value.to_le_bytes());
        }
        Ok(ChunkId::from_bytes(bytes))
    }
}

/// Every chunk ID in a searcher's commit, once per Tantivy document, sorted.
fn chunk_ids_of(searcher: &tantivy::Searcher, dir: &Path) -> Result<Vec<String>> {
    let mut ids = Vec::with_capacity(searcher.num_docs() as usize);
    for segment in searcher.segment_readers() {
        let columns = IdColumns::of(segment, dir)?;
        for doc in segment.doc_ids_alive() {
            ids.push(columns.id(doc)?.to_hex());
        }
    }
    ids.sort();
    Ok(ids)
}

/// Removes every file Tantivy made in the index that its last commit does not use.
fn remove_unused_files(index: &TantivyIndex) -> Result<()> {
    let metas = index.load_metas().map_err(index_error("read meta.json"))?;
    let mut living = metas.list_segment_files();
    living.insert(std::path::PathBuf::from("meta.json"));
    index
        .clone()
        .directory_mut()
        .garbage_collect(|| living)
        .map_err(index_error("remove the files no commit uses"))?;
    Ok(())
}

/// Removes the temporary files of atomic writes (`meta.json`, `.managed.json`) that a killed
/// writer left: Tantivy does not track them, so its collection never removes them.
fn remove_temporary_files(dir: &Path) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|err| Error::io(format!("list {}", dir.display()), err))?;
    for entry in entries {
        let entry = entry.map_err(|err| Error::io(format!("list {}", dir.display()), err))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(".tmp") {
            let path = entry.path();
            std::fs::remove_file(&path)
                .map_err(|err| Error::io(format!("remove {}", path.display()), err))?;
        }
    }
    Ok(())
}

/// The first words of `text`, white space folded, cut at a word boundary near `max_chars`.
pub fn opening(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if !out.is_empty() && out.chars().count() + 1 + word.chars().count() > max_chars {
            out.push_str(" …");
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Marks the highlighted ranges of a snippet with `**`, and folds white space.
fn mark(text: &str, fragment: &snippet::Fragment) -> String {
    let mut out = String::with_capacity(fragment.range.len() + 16);
    let mut last = fragment.range.start;
    for range in &fragment.marks {
        if range.start < last || range.end > fragment.range.end {
            continue;
        }
        out.push_str(&text[last..range.start]);
        out.push_str("**");
        out.push_str(&text[range.clone()]);
        out.push_str("**");
        last = range.end;
    }
    out.push_str(&text[last..fragment.range.end]);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An open Tantivy writer. Dropping it without `commit` discards what it was given.
pub struct Writer {
    writer: IndexWriter,
    /// How many threads it indexes with.
    indexing: Indexing,
    fields: Fields,
    /// Makes the labels' keys (`tokenizer::label_key`).
    analyzer: tantivy::tokenizer::TextAnalyzer,
}

impl Writer {
    /// Up to this many chunk IDs are deleted a term at a time (`delete`).
    const DELETED_TERM_BY_TERM: usize = 16;

    /// How many threads it indexes with.
    pub fn indexing(&self) -> Indexing {
        self.indexing
    }

    /// Deletes every document whose chunk ID begins with the same 64 bits as one of `ids`
    /// (`ChunkId::short`): these chunks, and any other that shares a key, which the caller adds
    /// back. Always called before `add` for the same IDs, so applying a change twice leaves
    /// exactly one copy. Many IDs are one delete operation: Tantivy keeps every delete until
    /// the next commit, each as a compiled query (a term's takes over a kilobyte), so one per
    /// chunk held 680 MB by the end of a 100k-file run. A few are a delete of each term: the
    /// set's query compiles its terms into an FST, whose builder first fills a table of 20,000
    /// cells: most of the time a one-file edit spent deleting.
    pub fn delete(&mut self, ids: &[ChunkId]) -> Result<()> {
        let term = |id: &ChunkId| Term::from_field_u64(self.fields.id[0], id.short());
        if ids.len() <= Self::DELETED_TERM_BY_TERM {
            for id in ids {
                self.writer.delete_term(term(id));
            }
            return Ok(());
        }
        let terms = ids.iter().map(term);
        self.writer
            .delete_query(Box::new(tantivy::query::TermSetQuery::new(terms)))
            .map_err(index_error("delete chunks"))?;
        Ok(())
    }

    /// Adds one chunk.
    pub fn add(&mut self, chunk: &IndexedChunk<'_>) -> Result<()> {
        let heading = chunk.heading_path.join(" > ");
        // The heading path is context for the passage ("Install" under which product?), so it
        // is scored with the text as well as in its own, boosted, field.
        let body = format!("{heading}\n\n{}", without_mnemonic_brackets(chunk.text));
        let id = chunk.id.as_bytes();
        let part = |i: usize| u64::from_le_bytes(id[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let mut document = doc!(
            self.fields.id[0] => part(0),
            self.fields.id[1] => part(1),
            self.fields.id[2] => part(2),
            self.fields.id[3] => part(3),
            self.fields.text_key => ids::text_key(chunk.text),
            self.fields.heading => heading,
            self.fields.body => body,
        );
        for (field, values) in [
            (self.fields.names, &chunk.labels.names),
            (self.fields.titles, &chunk.labels.titles),
            (self.fields.ids, &chunk.labels.ids),
        ] {
            for value in values {
                for term in tokenizer::label_terms(&mut self.analyzer, value) {
                    document.add_text(field, term);
                }
            }
        }
        let mut wholes: Vec<String> = Vec::new();
        // A site's `index.md` or a folder's `README.md` is not named by "index" or "readme":
        // a query of that word would put every such page first.
        for value in chunk
            .labels
            .names
            .iter()
            .filter(|name| {
                !GENERIC_FILE_STEMS.contains(&name.trim_start_matches('_').to_lowercase().as_str())
            })
            .chain(&chunk.labels.titles)
            .chain(&chunk.labels.ids)
            .chain(&chunk.labels.document_titles)
        {
            if let Some(field) = self.fields.whole_labels
                && let Some(whole) = tokenizer::whole_label(&mut self.analyzer, value)
                && !wholes.contains(&whole)
            {
                document.add_text(field, &whole);
                wholes.push(whole);
            }
        }
        let added = self.writer.add_document(document);
        if let Err(err) = added {
            let cause = self.worker_error().unwrap_or(err);
            return Err(index_error("add chunk")(cause));
        }
        Ok(())
    }

    /// Why the indexing threads stopped. When one fails (the disk is full, say), `add_document`
    /// only answers "the index writer was killed"; joining the threads, as a commit does, gives
    /// the cause. Nothing is committed: a commit that could be prepared is aborted. The writer
    /// must then be dropped, as the store does with a writer whose add failed: an abort rolls
    /// Tantivy's writer back to the last commit's opstamp, the reuse `Index::writer` avoids.
    fn worker_error(&mut self) -> Option<tantivy::TantivyError> {
        match self.writer.prepare_commit() {
            Err(cause) => Some(cause),
            Ok(prepared) => {
                let _ = prepared.abort();
                None
            }
        }
    }

    /// Commits everything given so far, atomically, with `generation` as the payload.
    pub fn commit(&mut self, generation: Generation) -> Result<()> {
        let mut prepared = self
            .writer
            .prepare_commit()
            .map_err(index_error("prepare commit"))?;
        prepared.set_payload(&generation.0.to_string());
        prepared.commit().map_err(index_error("commit"))?;
        Ok(())
    }

    /// Waits for background merges to end, releases Tantivy's lock, and removes the files that
    /// the last commit no longer uses. Tantivy's own collection after each commit keeps the
    /// files of the segments this process's reader still holds, so without this last pass a
    /// writer always left the segments it merged away for the next one to remove.
    pub fn finish(self) -> Result<()> {
        let index = self.writer.index().clone();
        self.writer
            .wait_merging_threads()
            .map_err(index_error("finish merges"))?;
        remove_unused_files(&index)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Index, Indexing, QueryConfig, fields_without_postings, previous_schema, ram_index,
    };
    use crate::error::Error;

    /// A label field is empty only when no segment has a term in it; one segment with a term
    /// is enough to keep it, whichever segment that is.
    #[test]
    fn the_label_fields_without_postings_are_those_no_segment_has() {
        let (index, fields) = ram_index();
        let mut writer: tantivy::IndexWriter = index.writer(15_000_000).expect("a RAM index");
        // One commit a segment: names only in the first, titles only in the second.
        for (field, label) in [(fields.names, "tar"), (fields.titles, "Release notes")] {
            let mut document = tantivy::TantivyDocument::default();
            document.add_text(fields.body, "some words");
            document.add_text(field, label);
            writer.add_document(document).expect("a RAM index");
            writer.commit().expect("a RAM index");
        }
        let searcher = index.reader().expect("a RAM index").searcher();
        assert_eq!(searcher.segment_readers().len(), 2);
        let mut expected = vec![fields.ids];
        expected.extend(fields.whole_labels);
        assert_eq!(
            fields_without_postings(&searcher, fields.labels()),
            expected
        );
        // Every label field is empty in an index of no document.
        let (empty, _) = ram_index();
        let searcher = empty.reader().expect("a RAM index").searcher();
        assert_eq!(
            fields_without_postings(&searcher, fields.labels()),
            fields.labels().collect::<Vec<_>>()
        );
    }

    #[test]
    fn mnemonic_brackets_leave_the_words_they_mark() {
        for (text, expected) in [
            ("[c]reate an archive", "create an archive"),
            ("E[x]tract files, [v]erbose", "Extract files, verbose"),
            ("[l]i[s]t", "list"),
            (
                "see [1] and [link](url), a [b] c",
                "see [1] and [link](url), a [b] c",
            ),
            ("matrix a[i]", "matrix ai"),
            ("[abc]def", "[abc]def"),
            ("no brackets", "no brackets"),
            ("[", "["),
            ("x[y", "x[y"),
        ] {
            assert_eq!(super::without_mnemonic_brackets(text), expected, "{text:?}");
        }
    }

    /// A fresh writer's first operation is stamped with the last commit's opstamp, which is also
    /// the delete opstamp of every segment that commit gave deletes. A merge of committed
    /// segments started before the writer's first commit skips deletes at that opstamp for
    /// those segments, yet keeps a cursor past them: Tantivy then brings back what the delete
    /// removed. The writer's first operation must therefore delete nothing.
    #[test]
    fn a_fresh_writers_first_delete_survives_a_merge_of_committed_segments() {
        use crate::ids::{ChunkId, Generation, chunk_id};
        let dir = tempfile::tempdir().expect("a temporary folder");
        let index = Index::open_or_create(&dir.path().join("index")).expect("an index");
        let labels = super::ChunkLabels::default();
        let chunk = |text: &str| -> ChunkId { chunk_id(&[], text) };
        let add = |writer: &mut super::Writer, text: &str| {
            writer
                .add(&super::IndexedChunk {
                    id: chunk(text),
                    heading_path: &[],
                    text,
                    labels: &labels,
                })
                .expect("add");
        };
        // Two committed segments; the last commit gives the first one a delete.
        let mut writer = index.writer(Indexing::Long).expect("a writer");
        add(&mut writer, "alpha one");
        add(&mut writer, "alpha two");
        writer.commit(Generation(1)).expect("commit");
        add(&mut writer, "beta one");
        add(&mut writer, "beta two");
        writer.commit(Generation(2)).expect("commit");
        writer.delete(&[chunk("alpha one")]).expect("delete");
        writer.commit(Generation(3)).expect("commit");
        writer.finish().expect("finish");
        index.reload().expect("reload");
        let searcher = index.reader.searcher();
        let segments: Vec<tantivy::index::SegmentId> = searcher
            .segment_readers()
            .iter()
            .map(tantivy::SegmentReader::segment_id)
            .collect();
        assert_eq!(segments.len(), 2, "one segment a commit");
        let with_deletes = searcher
            .segment_readers()
            .iter()
            .position(|segment| segment.num_deleted_docs() > 0)
            .expect("the first segment has a delete");
        let (deleted, other) = (segments[with_deletes], segments[1 - with_deletes]);
        // A fresh writer deletes from the segment that has deletes, then merges both, the
        // other first, before it commits.
        let mut writer = index.writer(Indexing::Long).expect("a writer");
        writer.delete(&[chunk("alpha two")]).expect("delete");
        writer
            .writer
            .merge(&[other, deleted])
            .wait()
            .expect("merge");
        writer.commit(Generation(4)).expect("commit");
        writer.finish().expect("finish");
        index.reload().expect("reload");
        let mut expected = vec![chunk("beta one").to_hex(), chunk("beta two").to_hex()];
        expected.sort();
        assert_eq!(index.chunk_ids().expect("chunk ids"), expected);
    }

    /// A few IDs are deleted a term at a time, more as one set: either way exactly those
    /// chunks leave, in the segments committed before and in the writer's own.
    #[test]
    fn a_delete_removes_exactly_its_chunks_term_by_term_or_as_a_set() {
        use crate::ids::{ChunkId, Generation, chunk_id};
        let labels = super::ChunkLabels::default();
        let chunk = |n: usize| -> ChunkId { chunk_id(&[], &format!("passage {n}")) };
        let limit = super::Writer::DELETED_TERM_BY_TERM;
        for deleted in [1, limit, limit + 1, 3 * limit] {
            let dir = tempfile::tempdir().expect("a temporary folder");
            let index = Index::open_or_create(&dir.path().join("index")).expect("an index");
            let mut writer = index.writer(Indexing::Long).expect("a writer");
            let total = 8 * limit;
            for n in 0..total {
                let text = format!("passage {n}");
                writer
                    .add(&super::IndexedChunk {
                        id: chunk(n),
                        heading_path: &[],
                        text: &text,
                        labels: &labels,
                    })
                    .expect("add");
                // Half the chunks in a committed segment, half in the writer's next.
                if n + 1 == total / 2 {
                    writer.commit(Generation(1)).expect("commit");
                }
            }
            // Every other chunk, from both halves.
            let gone: Vec<ChunkId> = (0..deleted).map(|k| chunk(2 * k + 1)).collect();
            writer.delete(&gone).expect("delete");
            writer.commit(Generation(2)).expect("commit");
            writer.finish().expect("finish");
            index.reload().expect("reload");
            let mut expected: Vec<String> = (0..total)
                .map(chunk)
                .filter(|id| !gone.contains(id))
                .map(|id| id.to_hex())
                .collect();
            expected.sort();
            assert_eq!(
                index.chunk_ids().expect("chunk ids"),
                expected,
                "{deleted} deleted"
            );
        }
    }

    #[test]
    fn the_writer_merges_by_the_bounded_policy() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let index = Index::open_or_create(&dir.path().join("index")).expect("an index");
        let writer = index.writer(Indexing::Short).expect("a writer");
        let policy = format!("{:?}", writer.writer.get_merge_policy());
        assert!(policy.starts_with("BoundedMerges"), "{policy}");
    }

    #[test]
    fn an_index_of_the_previous_schema_is_read_without_exact_names_and_rebuilt_by_writers() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("index");
        std::fs::create_dir_all(&path).expect("create the folder");
        tantivy::Index::create_in_dir(&path, previous_schema()).expect("an older index");
        assert!(
            matches!(Index::open(&path), Err(Error::IndexUnusable { .. })),
            "a writer must rebuild it"
        );
        let index = Index::open_for_reading(&path).expect("a reader reads it");
        let snapshot = index.snapshot();
        let named = snapshot
            .named("tar", 10, None, &QueryConfig::default())
            .expect("a query");
        assert!(named.is_empty());
        snapshot
            .search("tar", 10, None, &QueryConfig::default())
            .expect("words still search");
    }
}
