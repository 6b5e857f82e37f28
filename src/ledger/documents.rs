//! Documents as the read tools list them: an entry per document, a passage, a page of a listing,
//! and the glob a path filter is matched with.

use std::collections::BTreeMap;

use globset::{GlobBuilder, GlobMatcher};

use crate::ids::{ChunkId, DocHash, Generation};

/// A path glob as every filter reads it: `*` and `?` stay within one path segment, `**`
/// crosses segments, `{a,b}` and `[abc]` as in a shell; matched against the path relative to
/// its root.
pub fn path_glob(pattern: &str) -> std::result::Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|err| {
            format!(
                "path_glob {pattern:?} is not a glob: {}; use * within a folder, ** across folders, {{a,b}} and [abc]",
                err.kind()
            )
        })
}

/// A document at one path: what `list_documents` lists and `read_document` heads its answer
/// with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DocumentEntry {
    /// The folder it was ingested from (canonical path).
    pub root: String,
    /// Its path relative to `root`.
    pub path: String,
    pub doc_hash: DocHash,
    pub title: Option<String>,
    pub tags: Vec<String>,
    /// Its front-matter fields (scalars, as text).
    pub fields: BTreeMap<String, String>,
    /// How many passages it is made of.
    pub chunks: u64,
    /// The generation from which this path has held this content, as chunked now.
    pub since: Generation,
}

/// One passage of a document, in document order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Passage {
    /// Its place in the document, from 0.
    pub ordinal: u32,
    pub chunk_id: ChunkId,
    pub heading_path: Vec<String>,
    pub text: String,
    pub lines: (u32, u32),
    pub pages: Option<(u32, u32)>,
}

/// A page of a listing: the entries, and whether more follow.
pub(crate) struct Listing {
    pub documents: Vec<DocumentEntry>,
    pub more: bool,
}
