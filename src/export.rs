//! Export: every chunk with its sources, one JSON object per line, for an embedding pipeline
//! or a backup. Read from the ledger alone, in chunk ID order.

use serde::Serialize;

use crate::error::Result;
use crate::store::StoreReader;

/// One exported line: the `export` contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExportedChunk {
    pub chunk_id: String,
    pub paths: Vec<String>,
    pub heading: String,
    pub lines: [u32; 2],
    pub text: String,
}

/// Calls `f` with every chunk, in chunk ID order.
pub fn export(reader: &StoreReader, mut f: impl FnMut(&ExportedChunk) -> Result<()>) -> Result<()> {
    let ledger = reader.ledger();
    ledger.for_each_chunk(|chunk| {
        let sources = ledger.sources_of_chunk(&chunk.id)?;
        let lines = sources.first().map_or([0, 0], |s| [s.lines.0, s.lines.1]);
        let mut paths: Vec<String> = sources.into_iter().map(|s| s.path).collect();
        paths.dedup();
        f(&ExportedChunk {
            chunk_id: chunk.id.to_hex(),
            paths,
            heading: chunk.heading_path.join(" > "),
            lines,
            text: chunk.text,
        })
    })
}
