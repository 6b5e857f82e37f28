//! Export: every chunk with its sources, one JSON object per line, for an embedding pipeline
//! or a backup. Read from the ledger alone, in chunk ID order.

use crate::error::Result;
use crate::search::{ChunkRecord, chunk_record};
use crate::store::StoreReader;

/// Calls `f` with every chunk, in chunk ID order.
pub fn export(reader: &StoreReader, mut f: impl FnMut(&ChunkRecord) -> Result<()>) -> Result<()> {
    let ledger = reader.ledger()?;
    ledger.for_each_chunk(|chunk| f(&chunk_record(&ledger, chunk)?))
}
