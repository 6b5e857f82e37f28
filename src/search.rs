//! Search: a query in, hits with their sources out, never the same passage twice.
//!
//! The index ranks chunks (BM25, stemmed, headings boosted); the ledger adds where each chunk
//! appears. A chunk is one passage with all its sources, so a passage shared by two documents is
//! one hit listing both paths; and two chunks with the same text under different headings are
//! folded into the better-ranked one, so the answer never repeats a passage.

use std::collections::HashMap;

use serde::Serialize;

use crate::clock;
use crate::error::{Error, Result};
use crate::ids::{self, ChunkId};
use crate::index::QueryConfig;
use crate::ledger::{ChunkFilter, Ledger, StoredChunk};
use crate::store::StoreReader;

/// The most hits one search returns, from the CLI (`search -k`) and the agent tool alike.
pub const MAX_TOP_K: usize = 100;

/// A search as the CLI and the agent tool ask for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchRequest {
    pub query: String,
    pub top_k: usize,
    pub filter: ChunkFilter,
}

/// One hit: the `search --json` contract.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hit {
    pub chunk_id: String,
    pub score: f32,
    /// Every source of the chunk, relative to the folder it was ingested from.
    pub paths: Vec<String>,
    pub heading: String,
    /// First and last line of the passage in the first path.
    pub lines: [u32; 2],
    pub snippet: String,
    pub text: String,
}

/// A search answer, with how fresh the index is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResponse {
    pub generation: u64,
    pub last_ingest: Option<String>,
    pub hits: Vec<Hit>,
}

/// Runs a search against the last commit the reader sees.
pub fn search(reader: &StoreReader, request: &SearchRequest) -> Result<SearchResponse> {
    if request.top_k == 0 || request.top_k > MAX_TOP_K {
        return Err(Error::Usage(format!(
            "top_k must be between 1 and {MAX_TOP_K}, not {}",
            request.top_k
        )));
    }
    let ledger = reader.ledger();
    let index = reader.index();
    let allowed = if request.filter.is_empty() {
        None
    } else {
        // Shared, not copied, with every pass of the query below.
        Some(std::sync::Arc::new(
            ledger.chunks_matching(&request.filter)?,
        ))
    };
    let config = QueryConfig::default();
    let mut limit = request.top_k * 2 + 8;
    let hits = loop {
        let raw = index.search(&request.query, limit, allowed.as_ref(), &config)?;
        let exhausted = raw.len() < limit;
        let mut hits: Vec<Hit> = Vec::with_capacity(request.top_k);
        let mut by_text: HashMap<u64, usize> = HashMap::new();
        for raw_hit in raw {
            let sources = ledger.sources_of_chunk(&raw_hit.id)?;
            // A chunk the ledger no longer holds was removed after the commit this reader
            // sees; it is not part of any document now.
            let Some(first) = sources.first() else {
                continue;
            };
            let mut paths: Vec<String> = sources.iter().map(|s| s.path.clone()).collect();
            paths.dedup();
            match by_text.get(&ids::text_key(&raw_hit.text)) {
                Some(&kept) => {
                    for path in paths {
                        if !hits[kept].paths.contains(&path) {
                            hits[kept].paths.push(path);
                        }
                    }
                }
                None => {
                    if hits.len() == request.top_k {
                        continue;
                    }
                    by_text.insert(ids::text_key(&raw_hit.text), hits.len());
                    hits.push(Hit {
                        chunk_id: raw_hit.id.to_hex(),
                        score: raw_hit.score,
                        paths,
                        heading: raw_hit.heading,
                        lines: [first.lines.0, first.lines.1],
                        snippet: raw_hit.snippet,
                        text: raw_hit.text,
                    });
                }
            }
        }
        if hits.len() >= request.top_k || exhausted || limit >= 16 * MAX_TOP_K {
            break hits;
        }
        limit *= 4;
    };
    Ok(SearchResponse {
        generation: index.generation()?.0,
        last_ingest: ledger.last_ingest_ms()?.map(clock::rfc3339),
        hits,
    })
}

/// One chunk with its sources: what `get_chunk` answers and `export` prints per line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChunkRecord {
    pub chunk_id: String,
    pub paths: Vec<String>,
    pub heading: String,
    pub lines: [u32; 2],
    pub text: String,
}

/// Looks up one chunk; `Ok(None)` when the store does not hold it.
pub fn get_chunk(reader: &StoreReader, id: &ChunkId) -> Result<Option<ChunkRecord>> {
    let ledger = reader.ledger();
    match ledger.chunks(std::slice::from_ref(id))?.into_iter().next() {
        Some(chunk) => chunk_record(ledger, chunk).map(Some),
        None => Ok(None),
    }
}

/// A stored chunk with its sources (the first source's lines), as `get_chunk` and `export`
/// give it.
pub fn chunk_record(ledger: &Ledger, chunk: StoredChunk) -> Result<ChunkRecord> {
    let sources = ledger.sources_of_chunk(&chunk.id)?;
    let lines = sources.first().map_or([0, 0], |s| [s.lines.0, s.lines.1]);
    let mut paths: Vec<String> = sources.into_iter().map(|s| s.path).collect();
    paths.dedup();
    Ok(ChunkRecord {
        chunk_id: chunk.id.to_hex(),
        paths,
        heading: chunk.heading_path.join(" > "),
        lines,
        text: chunk.text,
    })
}
