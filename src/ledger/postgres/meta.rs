//! The shared ledger's counter row (`ledger_meta`): what it holds, the fence every writer's
//! transaction takes on it first, and the decoders of the hashes its rows hold.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::ids::{ChunkId, DocHash};
use crate::ledger::postgres::PgError;

type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// The counter row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SharedMeta {
    pub ledger_id: String,
    pub generation: u64,
    pub log_seq: u64,
    pub log_floor_seq: u64,
    pub writer_epoch: i64,
    pub vector_seq: u64,
    /// The token of `log_seq`.
    pub log_token: String,
}

/// The first statement of every write of a writer: its epoch must still be the ledger's.
pub(super) async fn fence(tx: &Tx<'_>, epoch: i64) -> std::result::Result<SharedMeta, PgError> {
    tx.batch_execute(super::LOCK_TIMEOUT).await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT {META_COLUMNS} FROM ledger_meta WHERE id = 1 AND writer_epoch = $1 FOR UPDATE"
            ),
            &[&epoch],
        )
        .await?;
    match row {
        Some(row) => Ok(meta_of(&row)),
        None => Err(PgError::App(Error::LeaseLost {
            context: format!("another writer took the lease after epoch {epoch}"),
        })),
    }
}

/// The counter row's columns, in the order `meta_of` reads them.
pub(super) const META_COLUMNS: &str =
    "ledger_id, generation, log_seq, log_floor_seq, writer_epoch, vector_seq, log_token";

/// The counter row, as the transaction sees it.
pub(super) async fn read_meta(tx: &Tx<'_>) -> std::result::Result<SharedMeta, PgError> {
    let row = tx
        .query_one(
            &format!("SELECT {META_COLUMNS} FROM ledger_meta WHERE id = 1"),
            &[],
        )
        .await?;
    Ok(meta_of(&row))
}

pub(super) fn meta_of(row: &tokio_postgres::Row) -> SharedMeta {
    SharedMeta {
        ledger_id: row.get(0),
        generation: row.get::<_, i64>(1) as u64,
        log_seq: row.get::<_, i64>(2) as u64,
        log_floor_seq: row.get::<_, i64>(3) as u64,
        writer_epoch: row.get(4),
        vector_seq: row.get::<_, i64>(5) as u64,
        log_token: row.get(6),
    }
}

pub(super) fn damaged(what: &str) -> Error {
    Error::Inconsistent(format!("the shared ledger holds a damaged {what}"))
}

pub(super) fn chunk_id(bytes: Vec<u8>) -> Result<ChunkId> {
    ChunkId::from_slice(&bytes).ok_or_else(|| damaged("chunk ID"))
}

pub(super) fn doc_hash(bytes: Vec<u8>) -> Result<DocHash> {
    DocHash::from_slice(&bytes).ok_or_else(|| damaged("document hash"))
}
