//! Embeddings on the shared ledger: a writer publishes each page of vectors (fenced, at the
//! next `vector_seq`) and each change to a model's row; replicas copy every model row and the
//! vectors of the pages after their own position. Vectors are insert-only and keyed by model
//! and chunk, so a passage is embedded once whichever host runs the model; only `gc` removes
//! them, a replaced model's whole, and replicas drop a model the shared ledger no longer lists.

use crate::error::Result;
use crate::ids::ChunkId;
use crate::ledger::postgres::meta::{chunk_id, fence};
use crate::ledger::postgres::{Budget, PgError, PgLedger};
use crate::ledger::{ModelRecord, VectorChanges, VectorRow};

type Tx<'a> = deadpool_postgres::Transaction<'a>;

impl PgLedger {
    /// Stores one page of vectors of `model` (encoded as the ledger stores them) at the next
    /// vector position, if the writer still holds the lease at `epoch`; returns that position.
    pub(crate) fn publish_vectors(
        &self,
        epoch: i64,
        model: &[u8],
        vectors: &[(ChunkId, Vec<u8>)],
    ) -> Result<u64> {
        let ids: Vec<Vec<u8>> = vectors
            .iter()
            .map(|(id, _)| id.as_bytes().to_vec())
            .collect();
        let blobs: Vec<Vec<u8>> = vectors.iter().map(|(_, v)| v.clone()).collect();
        self.run("publish vectors", Budget::Writer, async |conn| {
            let tx = conn.transaction().await?;
            let meta = fence(&tx, epoch).await?;
            let seq = (meta.vector_seq + 1) as i64;
            tx.execute(
                "INSERT INTO vectors (model, chunk_id, vector, seq)
                 SELECT $1, id, v, $4 FROM unnest($2::bytea[], $3::bytea[]) AS t(id, v)
                 ON CONFLICT (model, chunk_id) DO NOTHING",
                &[&model, &ids, &blobs, &seq],
            )
            .await?;
            tx.execute(
                "UPDATE ledger_meta SET vector_seq = $1 WHERE id = 1",
                &[&seq],
            )
            .await?;
            tx.commit().await?;
            Ok(seq as u64)
        })
    }

    /// Removes the models search used before the active one (the last activated), and their
    /// vectors, if the writer still holds the lease at `epoch`; returns how many vectors went.
    ///
    /// Replicas follow at their next sync: the vector position moves on, so none of them is in
    /// step any more, and a replica drops every model the shared ledger no longer lists (with
    /// its vectors) when it copies the model rows (`Ledger::apply_changes`).
    pub(crate) fn remove_replaced_models(&self, epoch: i64) -> Result<u64> {
        self.run(
            "remove the vectors of replaced models",
            Budget::Command,
            async |conn| {
                let tx = conn.transaction().await?;
                let meta = fence(&tx, epoch).await?;
                let replaced = "SELECT fingerprint FROM embedding_models
                                 WHERE active_since IS NOT NULL
                                   AND fingerprint <> (SELECT fingerprint FROM embedding_models
                                                        WHERE active_since IS NOT NULL
                                                        ORDER BY active_since DESC, first_seen DESC
                                                        LIMIT 1)";
                let vectors = tx
                    .execute(
                        &format!("DELETE FROM vectors WHERE model IN ({replaced})"),
                        &[],
                    )
                    .await?;
                let models = tx
                    .execute(
                        &format!("DELETE FROM embedding_models WHERE fingerprint IN ({replaced})"),
                        &[],
                    )
                    .await?;
                if vectors + models > 0 {
                    tx.execute(
                        "UPDATE ledger_meta SET vector_seq = $1 WHERE id = 1",
                        &[&((meta.vector_seq + 1) as i64)],
                    )
                    .await?;
                }
                tx.commit().await?;
                Ok(vectors)
            },
        )
    }

    /// Writes a model's row as the writer's replica has it, if the writer still holds the lease.
    pub(crate) fn publish_model(&self, epoch: i64, model: &ModelRecord) -> Result<()> {
        self.run("publish an embedding model", Budget::Writer, async |conn| {
            let tx = conn.transaction().await?;
            fence(&tx, epoch).await?;
            tx.execute(
                "INSERT INTO embedding_models
                   (fingerprint, description, dims, first_seen, active_since, complete_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (fingerprint) DO UPDATE SET description = excluded.description,
                   dims = excluded.dims, first_seen = excluded.first_seen,
                   active_since = excluded.active_since, complete_at = excluded.complete_at",
                &[
                    &model.fingerprint,
                    &model.description,
                    &model.dims,
                    &model.first_seen,
                    &model.active_since,
                    &model.complete_at,
                ],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }
}

/// Every model's row, and the vectors of the pages after `after` (every vector when `None`).
pub(super) async fn since(
    tx: &Tx<'_>,
    after: Option<u64>,
) -> std::result::Result<VectorChanges, PgError> {
    let models = tx
        .query(
            "SELECT fingerprint, description, dims, first_seen, active_since, complete_at
               FROM embedding_models ORDER BY fingerprint",
            &[],
        )
        .await?
        .iter()
        .map(|row| ModelRecord {
            fingerprint: row.get(0),
            description: row.get(1),
            dims: row.get(2),
            first_seen: row.get(3),
            active_since: row.get(4),
            complete_at: row.get(5),
        })
        .collect();
    let after = after.map_or(-1, |seq| seq as i64);
    let vectors = tx
        .query(
            "SELECT model, chunk_id, vector FROM vectors WHERE seq > $1 ORDER BY model, chunk_id",
            &[&after],
        )
        .await?
        .into_iter()
        .map(|row| {
            Ok(VectorRow {
                model: row.get(0),
                chunk_id: chunk_id(row.get(1))?,
                vector: row.get(2),
            })
        })
        .collect::<Result<_>>()
        .map_err(PgError::App)?;
    Ok(VectorChanges { models, vectors })
}
