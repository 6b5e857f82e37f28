//! Export: every chunk with its sources, one JSON object per line, for an embedding pipeline
//! or a backup. Read from the ledger alone, in chunk ID order.

use crate::error::Result;
use crate::ledger::Ledger;
use crate::search::{ChunkRecord, chunk_record};

/// Calls `f` with every chunk, in chunk ID order. Needs the ledger alone (`store::open_ledger`).
pub fn export(ledger: &Ledger, mut f: impl FnMut(&ChunkRecord) -> Result<()>) -> Result<()> {
    ledger.for_each_chunk(|chunk| f(&chunk_record(ledger, chunk)?))
}
