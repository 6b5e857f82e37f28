//! Change sets: the rows one batch (or one range of the shared ledger's log) changed, copied by
//! key between the local SQLite ledger and the shared PostgreSQL ledger.
//!
//! With a shared ledger every host's store is a replica of it. A writer applies a batch to its
//! replica as on a store of its own (`apply_batch`), collects the rows the batch changed into a
//! `ChangeSet` inside the same transaction, and publishes it to the shared ledger before that
//! transaction commits; a host that did not write pulls the same kind of change set from the
//! shared ledger's log (`apply_changes`). Both sides apply a change set by the same rules:
//!
//! - each logged chunk the change set holds is written, where the ledger lacks it;
//! - each named source is set to the document it names, or deleted;
//! - each named document is written whole (row, tags, chunk list);
//! - a document no source holds any more after that is released;
//! - each other logged chunk is deleted when no document references it;
//! - the log rows are appended and the generation set.
//!
//! Rows are copied, never derived, so applying a change set twice leaves the same ledger.

use crate::ids::{ChunkId, DocHash, Generation};

/// A source path under a root (its canonical path) and the document it holds, or `None` when
/// the path is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRow {
    pub root: String,
    pub path: String,
    pub doc_hash: Option<DocHash>,
}

/// One chunk of a document: where it sits in the document and in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocChunkRow {
    pub ordinal: i64,
    pub chunk_id: ChunkId,
    pub line_start: i64,
    pub line_end: i64,
    /// First and last page, for a format with pages.
    pub page_start: Option<i64>,
    pub page_end: Option<i64>,
}

/// A document whole, as the ledger stores it (fields as their stored JSON).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentRow {
    pub doc_hash: DocHash,
    pub title: Option<String>,
    pub n_chunks: i64,
    pub fields: Option<String>,
    /// The version of the recipe that made its chunks (`chunk::recipe_version`).
    pub recipe_version: i64,
    pub tags: Vec<String>,
    pub chunks: Vec<DocChunkRow>,
}

/// A chunk as stored: its heading path as stored JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkRow {
    pub chunk_id: ChunkId,
    pub heading: String,
    pub text: String,
}

/// One row of the chunk log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRow {
    pub generation: Generation,
    pub op: String,
    pub chunk_id: ChunkId,
}

/// The last finished ingest run (for answers' `last_ingest`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRow {
    pub run_id: String,
    pub roots: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub generation: Option<i64>,
    pub report: Option<String>,
}

/// The rows a batch or a log range changed; see the module documentation for how it applies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// The ledger's generation once the change set is applied.
    pub generation: Generation,
    pub sources: Vec<SourceRow>,
    pub documents: Vec<DocumentRow>,
    pub log: Vec<LogRow>,
    /// The rows of the logged chunks the ledger holds after the change.
    pub chunks: Vec<ChunkRow>,
}

impl ChangeSet {
    /// True when it names no source and logs no chunk: nothing to publish.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.log.is_empty()
    }
}

/// An embedding model's row, whole (its description as stored JSON).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRecord {
    pub fingerprint: Vec<u8>,
    pub description: String,
    pub dims: i64,
    pub first_seen: i64,
    pub active_since: Option<i64>,
    pub complete_at: Option<i64>,
}

/// One stored vector (little-endian f32 bytes, as stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorRow {
    pub model: Vec<u8>,
    pub chunk_id: ChunkId,
    pub vector: Vec<u8>,
}

/// The embeddings a replica copies: every model's row, and the vectors of the pages after its
/// position (all of them in a snapshot). Vectors are insert-only, so copying one twice is
/// harmless.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorChanges {
    pub models: Vec<ModelRecord>,
    pub vectors: Vec<VectorRow>,
}

/// Where a replica last found its shared ledger, for the message that refuses another one:
/// the URL without its password, and the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaBinding {
    pub url: String,
    pub schema: String,
}

/// Which shared ledger a replica copies, and how far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaState {
    pub ledger_id: String,
    /// The last position of the shared ledger's log the replica holds.
    pub log_seq: u64,
    /// The last page of vectors of the shared ledger the replica holds (its `vector_seq`).
    pub vector_seq: u64,
    /// The shared ledger's token of `log_seq`.
    pub log_token: String,
}
