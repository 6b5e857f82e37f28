//! The ledger: the source of truth, in one of two dialects side by side.
//!
//! This module holds the vocabulary both dialects share, with no SQL: a batch of changes under
//! one root and its outcome, the change sets copied between them, the agent path's call records,
//! embedding models and the vector encoding, document listings and chunk filters.
//! `sqlite` is a store's own ledger (and every host's replica of a shared one); `postgres` is the
//! shared ledger several hosts write under a lease. Each keeps its schema and migrations beside
//! its SQL (`sqlite::schema`, `postgres/migrations`), and `tests::the_dialects_agree` checks that
//! the tables they both hold have the same columns.
//!
//! A ledger never touches the index; `store` applies its `chunk_log` to Tantivy.

mod calls;
mod changes;
mod documents;
mod embeddings;
pub mod postgres;
pub mod sqlite;

use std::collections::BTreeMap;

use crate::chunk::Chunk;
use crate::error::Result;
use crate::ids::{ChunkId, DocHash, Generation};
use crate::stat::FileStat;

pub(crate) use calls::{
    AuditRow, KeyLookup, KeyRecord, NewCall, RecordOutcome, SpooledCall, UsageRow,
};
pub use changes::{ChangeSet, RunRow};
pub(crate) use changes::{
    ChunkRow, DocChunkRow, DocumentRow, LogRow, ModelRecord, ReplicaBinding, ReplicaState,
    SourceRow, VectorChanges, VectorRow,
};
pub use documents::path_glob;
pub(crate) use documents::{DocumentEntry, Listing, Passage};
pub(crate) use embeddings::{ModelRow, VectorCoverage, VectorGc, decode_vector, encode_vector};
pub(crate) use sqlite::on_read_only_mount;
pub(crate) use sqlite::pool::{LedgerPool, PooledLedger, READ_CONNECTIONS};
pub use sqlite::schema::SCHEMA_VERSION;
pub use sqlite::{Dictionary, Ledger, PackedTexts};
pub(crate) use sqlite::{Packer, Samples};

/// What a replica's batch calls to publish its change set to the shared ledger, before it
/// commits; it returns the shared log position the change set took.
pub(crate) type Publish<'a> = dyn FnMut(&ChangeSet) -> Result<ReplicaState> + 'a;

/// How a ledger is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Creates the database if missing; used under the writer lock and by the agent path.
    ReadWrite,
    /// Never writes, never creates; used by search, status, verify and export.
    ReadOnly,
}

/// What the ledger knows of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SourceRecord {
    pub doc_hash: DocHash,
    pub stat: FileStat,
    /// When the stat was recorded, in ns since the epoch (for the racy-clean check).
    pub recorded_ns: i64,
    /// The version of the recipe that made its document's chunks (`chunk::recipe_version`).
    pub recipe_version: u32,
}

/// A root folder's row ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RootId(i64);

/// The content of a document that the ledger may not know yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewDocument {
    pub title: Option<String>,
    pub tags: Vec<String>,
    /// Every top-level scalar front-matter field, by key; kept up to `MAX_FIELDS` fields of
    /// `MAX_FIELD_CHARS` characters each.
    pub fields: BTreeMap<String, String>,
    pub chunks: Vec<Chunk>,
    /// The version of the recipe that made the chunks (`chunk::recipe_version`).
    pub recipe_version: u32,
    /// The chunks' text as the ledger stores it, compressed where the batch was chunked;
    /// `None` to compress it in the batch's transaction.
    pub packed: Option<PackedTexts>,
}

/// The most front-matter fields kept per document (the first, by key).
pub(crate) const MAX_FIELDS: usize = 64;
/// The longest front-matter key or value kept, in characters; a longer one is cut.
pub(crate) const MAX_FIELD_CHARS: usize = 256;

/// What the documents that hold a chunk are called, as the ledger knows it now: what the index
/// labels the chunk with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChunkDocuments {
    /// The file name stems (the name without its folder and last extension) of every source of
    /// every such document, distinct and sorted.
    pub names: Vec<String>,
    /// Their front-matter fields, `(key, value)`, distinct and sorted.
    pub fields: Vec<(String, String)>,
    /// Their titles (the front-matter title, else the first level-1 heading), distinct and
    /// sorted.
    pub titles: Vec<String>,
}

/// A path that now holds `doc_hash`.
#[derive(Clone, Debug)]
pub struct SourceUpsert {
    pub path: String,
    pub doc_hash: DocHash,
    pub stat: FileStat,
    pub recorded_ns: i64,
    /// The chunked content, unless the ledger already had this document when it was read.
    pub document: Option<NewDocument>,
}

/// One transaction's worth of changes under one root.
#[derive(Clone, Debug)]
pub struct Batch {
    pub root: RootId,
    pub upserts: Vec<SourceUpsert>,
    /// Paths under the root that no longer exist.
    pub deletes: Vec<String>,
    /// Paths whose content is unchanged but whose stat is new.
    pub stat_updates: Vec<(String, FileStat, i64)>,
}

impl Batch {
    pub fn new(root: RootId) -> Batch {
        Batch {
            root,
            upserts: Vec::new(),
            deletes: Vec::new(),
            stat_updates: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty() && self.stat_updates.is_empty()
    }
}

/// What one committed batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// The new generation, when the batch changed the set of chunks.
    pub generation: Option<Generation>,
    pub chunks_added: u64,
    pub chunks_removed: u64,
    /// Chunks whose set of chunks did not change but whose documents' names or fields did, so
    /// the index writes them again.
    pub chunks_reindexed: u64,
}

/// A chunk as the ledger stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    pub id: ChunkId,
    pub heading_path: Vec<String>,
    pub text: String,
}

/// Where a chunk appears: a source path under a root, with the chunk's lines there (and its
/// pages, for a format with pages: its lines are then lines of those pages' text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkSource {
    pub root: String,
    pub path: String,
    pub lines: (u32, u32),
    pub pages: Option<(u32, u32)>,
}

/// Counts for `status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub documents: u64,
    pub sources: u64,
    pub chunks: u64,
    pub audit_events: u64,
    pub usage_units: u64,
    pub idempotency_keys: u64,
}

/// A search filter the ledger resolves to a set of chunks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkFilter {
    /// Keep chunks with a source whose path (relative to its root) starts with this.
    pub path_prefix: Option<String>,
    /// Keep chunks with a source whose path matches this glob (`documents::path_glob`).
    pub path_glob: Option<String>,
    /// Keep chunks of documents that carry every one of these tags.
    pub tags: Vec<String>,
    /// Keep chunks with a source under this root (its canonical path, as `roots` lists it).
    pub root: Option<String>,
    /// Keep chunks of documents whose front-matter field `key` is `value` (ignoring case),
    /// for every pair.
    pub fields: Vec<(String, String)>,
}

impl ChunkFilter {
    /// A path as a filter compares it, from the CLI or a tool alike: relative to its root,
    /// without a leading `./`; `None` for a path that names no file (empty, or `./` alone).
    pub fn normalise_path(path: &str) -> Option<String> {
        let trimmed = path.trim_start_matches("./");
        (!trimmed.is_empty()).then(|| trimmed.to_string())
    }

    pub fn is_empty(&self) -> bool {
        self.path_prefix.is_none()
            && self.path_glob.is_none()
            && self.tags.is_empty()
            && self.root.is_none()
            && self.fields.is_empty()
    }
}
