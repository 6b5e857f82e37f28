//! Search: a query in, hits with their sources out, never the same passage twice.
//!
//! The index ranks chunks (BM25, stemmed, headings boosted); the ledger adds where each chunk
//! appears. A chunk is one passage with all its sources, so a passage shared by two documents is
//! one hit listing both paths; and two chunks with the same text under different headings are
//! folded into the better-ranked one, so the answer never repeats a passage.
//!
//! A search runs on one index snapshot from start to end, and its answer names that snapshot's
//! generation; pages of one snapshot (`search_page`) follow each other exactly.

use std::collections::HashMap;

use serde::Serialize;

use crate::clock;
use crate::error::{Error, Result};
use crate::ids::{self, ChunkId};
use crate::index::{QueryConfig, Snapshot};
use crate::ledger::{ChunkFilter, Ledger, StoredChunk};
use crate::store::StoreReader;

/// The most hits one search returns, from the CLI (`search -k`) and the agent tool alike.
pub const MAX_TOP_K: usize = 100;

/// How deep the pages of one search (`cursor`, `next_cursor`) may reach, in hits.
pub const MAX_PAGED_HITS: usize = 1_000;

/// A search as the CLI and the agent tool ask for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchRequest {
    pub query: String,
    pub top_k: usize,
    pub filter: ChunkFilter,
}

/// Where a passage appears: a path under one of the store's roots, and its lines there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HitSource {
    /// The folder the document was ingested from (its canonical path).
    pub root: String,
    /// The document's path relative to `root`.
    pub path: String,
    /// First and last line of the passage in that document.
    pub lines: [u32; 2],
}

/// One hit: the `search --json` contract.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hit {
    pub chunk_id: String,
    pub score: f32,
    /// Every path of the chunk relative to the folder it was ingested from, each once; the same
    /// relative path under two roots is one entry here and two in `sources`.
    pub paths: Vec<String>,
    /// Every source of the chunk with its root: what tells two roots' `a.md` apart.
    pub sources: Vec<HitSource>,
    pub heading: String,
    /// First and last line of the passage in the first path.
    pub lines: [u32; 2],
    pub snippet: String,
    pub text: String,
}

/// A search answer, with how fresh the index is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResponse {
    /// The generation of the index commit the hits come from.
    pub generation: u64,
    pub last_ingest: Option<String>,
    pub hits: Vec<Hit>,
}

/// One page of a search: the hits after the first `offset`, and whether more follow.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchPage {
    pub response: SearchResponse,
    /// There are hits after this page (and the page does not end at `MAX_PAGED_HITS`).
    pub more: bool,
}

/// Runs a search against the reader's current snapshot of the index.
pub fn search(reader: &StoreReader, request: &SearchRequest) -> Result<SearchResponse> {
    let snapshot = reader.index().snapshot();
    let ledger = reader.ledger()?;
    Ok(search_page(&snapshot, &ledger, request, 0)?.response)
}

/// Runs a search against one snapshot and returns the `request.top_k` hits after the first
/// `offset`. The same snapshot gives the same ranking, so the pages of one snapshot follow each
/// other without a gap or a repeat. A page ends at `MAX_PAGED_HITS` at the latest.
pub fn search_page(
    snapshot: &Snapshot,
    ledger: &Ledger,
    request: &SearchRequest,
    offset: usize,
) -> Result<SearchPage> {
    if request.top_k == 0 || request.top_k > MAX_TOP_K {
        return Err(Error::Usage(format!(
            "top_k must be between 1 and {MAX_TOP_K}, not {}",
            request.top_k
        )));
    }
    if offset >= MAX_PAGED_HITS {
        return Err(Error::Usage(format!(
            "the pages of a search reach at most {MAX_PAGED_HITS} hits; this page would start at hit {}",
            offset + 1
        )));
    }
    // The last page stops at `MAX_PAGED_HITS`, whatever `top_k` the pages before it used.
    let end = offset.saturating_add(request.top_k).min(MAX_PAGED_HITS);
    let allowed = if request.filter.is_empty() {
        None
    } else {
        // Shared, not copied, with every pass of the query below.
        Some(std::sync::Arc::new(
            ledger.chunks_matching(&request.filter)?,
        ))
    };
    let config = QueryConfig::default();
    // One hit past the page says whether another page follows.
    let wanted = end + 1;
    let mut limit = wanted * 2 + 8;
    let hits = loop {
        let raw = snapshot.search(&request.query, limit, allowed.as_ref(), &config)?;
        let exhausted = raw.len() < limit;
        let mut hits: Vec<Hit> = Vec::with_capacity(wanted);
        let mut by_text: HashMap<u64, usize> = HashMap::new();
        for raw_hit in raw {
            let sources = ledger.sources_of_chunk(&raw_hit.id)?;
            // A chunk the ledger no longer holds was removed after the commit this snapshot
            // holds; it is not part of any document now.
            let Some(first) = sources.first() else {
                continue;
            };
            let lines = [first.lines.0, first.lines.1];
            let sources: Vec<HitSource> = sources
                .into_iter()
                .map(|s| HitSource {
                    root: s.root,
                    path: s.path,
                    lines: [s.lines.0, s.lines.1],
                })
                .collect();
            match by_text.get(&ids::text_key(&raw_hit.text)) {
                Some(&kept) => add_sources(&mut hits[kept], sources),
                None => {
                    if hits.len() == wanted {
                        continue;
                    }
                    by_text.insert(ids::text_key(&raw_hit.text), hits.len());
                    let mut hit = Hit {
                        chunk_id: raw_hit.id.to_hex(),
                        score: raw_hit.score,
                        paths: Vec::new(),
                        sources: Vec::new(),
                        heading: raw_hit.heading,
                        lines,
                        snippet: raw_hit.snippet,
                        text: raw_hit.text,
                    };
                    add_sources(&mut hit, sources);
                    hits.push(hit);
                }
            }
        }
        if hits.len() >= wanted || exhausted || limit >= 16 * MAX_PAGED_HITS {
            break hits;
        }
        limit *= 4;
    };
    let more = hits.len() > end && end < MAX_PAGED_HITS;
    let page: Vec<Hit> = hits.into_iter().skip(offset).take(end - offset).collect();
    Ok(SearchPage {
        response: SearchResponse {
            generation: snapshot.generation().0,
            last_ingest: ledger.last_ingest_ms()?.map(clock::rfc3339),
            hits: page,
        },
        more,
    })
}

/// Adds the sources a hit does not list yet, and their paths to `paths` once each.
fn add_sources(hit: &mut Hit, sources: Vec<HitSource>) {
    for source in sources {
        if hit
            .sources
            .iter()
            .any(|s| s.root == source.root && s.path == source.path)
        {
            continue;
        }
        if !hit.paths.contains(&source.path) {
            hit.paths.push(source.path.clone());
        }
        hit.sources.push(source);
    }
}

/// One chunk with its sources: what `get_chunk` answers and `export` prints per line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChunkRecord {
    pub chunk_id: String,
    /// Every path relative to its root, each once.
    pub paths: Vec<String>,
    /// Every source with its root and lines.
    pub sources: Vec<HitSource>,
    pub heading: String,
    pub lines: [u32; 2],
    pub text: String,
}

/// Looks up one chunk; `Ok(None)` when the store does not hold it.
pub fn get_chunk(reader: &StoreReader, id: &ChunkId) -> Result<Option<ChunkRecord>> {
    let ledger = reader.ledger()?;
    match ledger.chunks(std::slice::from_ref(id))?.into_iter().next() {
        Some(chunk) => chunk_record(&ledger, chunk).map(Some),
        None => Ok(None),
    }
}

/// A stored chunk with its sources (the first source's lines), as `get_chunk` and `export`
/// give it.
pub fn chunk_record(ledger: &Ledger, chunk: StoredChunk) -> Result<ChunkRecord> {
    let sources = ledger.sources_of_chunk(&chunk.id)?;
    let lines = sources.first().map_or([0, 0], |s| [s.lines.0, s.lines.1]);
    let mut paths: Vec<String> = Vec::with_capacity(sources.len());
    for source in &sources {
        if !paths.contains(&source.path) {
            paths.push(source.path.clone());
        }
    }
    Ok(ChunkRecord {
        chunk_id: chunk.id.to_hex(),
        paths,
        sources: sources
            .into_iter()
            .map(|s| HitSource {
                root: s.root,
                path: s.path,
                lines: [s.lines.0, s.lines.1],
            })
            .collect(),
        heading: chunk.heading_path.join(" > "),
        lines,
        text: chunk.text,
    })
}
