//! The embeddings' SQL: models, the fingerprint cache, vectors, and what still lacks one.
//!
//! Vectors are keyed by (model fingerprint, chunk ID) and are only ever inserted: a vector
//! outlives its chunk, so text that comes back is not embedded again, until `gc` removes the
//! vectors of chunks the ledger no longer holds and of models that are no longer active.
//! Each committed batch of vectors bumps `vector_seq` in `meta`, which names the state of the
//! vectors the way the generation names the state of the chunks.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{Ledger, chunk_id_column, decode_heading, sql_error};
use crate::crash::crash_point;
use crate::embed::Fingerprint;
use crate::error::{Error, Result};
use crate::ids::{ChunkId, Generation};
use crate::ledger::{ModelRow, StoredChunk, VectorCoverage, VectorGc, encode_vector};

fn fingerprint_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Fingerprint> {
    let bytes: Vec<u8> = row.get(index)?;
    bytes
        .try_into()
        .map(Fingerprint)
        .map_err(|_| super::bad_blob(index))
}

impl Ledger {
    /// True when the ledger has the embedding tables (schema 3 or later): a reader of an older
    /// store sees no vectors rather than an error.
    pub(crate) fn has_vector_tables(&self) -> Result<bool> {
        self.conn
            .query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'vectors'",
                [],
                |row| row.get(0),
            )
            .map_err(sql_error("read schema"))
    }

    /// The fingerprint computed when a model's files last looked like `stat_key`.
    pub(crate) fn cached_fingerprint(&self, stat_key: &str) -> Result<Option<Fingerprint>> {
        if !self.has_vector_tables()? {
            return Ok(None);
        }
        self.conn
            .query_row(
                "SELECT fingerprint FROM model_stat_cache WHERE stat_key = ?1",
                [stat_key],
                |row| fingerprint_column(row, 0),
            )
            .optional()
            .map_err(sql_error("read the model fingerprint cache"))
    }

    pub(crate) fn cache_fingerprint(
        &mut self,
        stat_key: &str,
        fingerprint: &Fingerprint,
    ) -> Result<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO model_stat_cache (stat_key, fingerprint) VALUES (?1, ?2)",
                params![stat_key, fingerprint.0.as_slice()],
            )
            .map(drop)
            .map_err(sql_error("write the model fingerprint cache"))
    }

    /// Records a model the first time a run uses it. A model recorded before with other
    /// dimensions is refused: its stored vectors and the ones it makes now could not be
    /// compared, and vectors of a length other than the recorded one would count as damaged,
    /// be removed by `rebuild` and be made again, damaged, by every run after.
    pub(crate) fn register_model(
        &mut self,
        fingerprint: &Fingerprint,
        description: &serde_json::Value,
        dims: usize,
        now_ms: i64,
    ) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO embedding_models (fingerprint, description, dims, first_seen)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (fingerprint) DO NOTHING",
                params![
                    fingerprint.0.as_slice(),
                    description.to_string(),
                    dims as i64,
                    now_ms
                ],
            )
            .map_err(sql_error("record the embedding model"))?;
        let recorded: i64 = self
            .conn
            .query_row(
                "SELECT dims FROM embedding_models WHERE fingerprint = ?1",
                [fingerprint.0.as_slice()],
                |row| row.get(0),
            )
            .map_err(sql_error("read the embedding model"))?;
        if recorded != dims as i64 {
            return Err(Error::Model {
                model: format!("{fingerprint} ({description})"),
                message: format!(
                    "it makes vectors of {dims} dimensions, but its vectors in this store have {recorded}\nhint: the model changed without changing its fingerprint; configure it under another name or prefix so that it is a new model"
                ),
            });
        }
        Ok(())
    }

    /// Every model the ledger knows, the active one (last activated) first.
    pub fn models(&self) -> Result<Vec<ModelRow>> {
        if !self.has_vector_tables()? {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT fingerprint, description, dims, active_since FROM embedding_models
                 ORDER BY active_since IS NULL, active_since DESC, first_seen DESC",
            )
            .map_err(sql_error("read embedding models"))?;
        let rows = stmt
            .query_map([], |row| {
                let description: String = row.get(1)?;
                Ok(ModelRow {
                    fingerprint: fingerprint_column(row, 0)?,
                    description: serde_json::from_str(&description)
                        .unwrap_or(serde_json::Value::Null),
                    dims: row.get::<_, i64>(2)? as usize,
                    active_since: row.get(3)?,
                })
            })
            .map_err(sql_error("read embedding models"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read embedding models"))
    }

    /// The model search uses: the one whose vectors last became complete.
    pub fn active_model(&self) -> Result<Option<ModelRow>> {
        Ok(self
            .models()?
            .into_iter()
            .find(|model| model.active_since.is_some()))
    }

    /// Makes `fingerprint` the model search uses.
    pub(crate) fn activate_model(&mut self, fingerprint: &Fingerprint, now_ms: i64) -> Result<()> {
        self.conn
            .execute(
                "UPDATE embedding_models SET active_since = ?2 WHERE fingerprint = ?1",
                params![fingerprint.0.as_slice(), now_ms],
            )
            .map(drop)
            .map_err(sql_error("activate the embedding model"))
    }

    /// The generation at which `model`'s vectors last covered every chunk, if they did.
    pub(crate) fn model_complete_at(&self, model: &Fingerprint) -> Result<Option<Generation>> {
        if !self.has_vector_tables()? {
            return Ok(None);
        }
        self.conn
            .query_row(
                "SELECT complete_at FROM embedding_models WHERE fingerprint = ?1",
                [model.0.as_slice()],
                |row| row.get::<_, Option<i64>>(0),
            )
            .optional()
            .map(|found| found.flatten().map(|g| Generation(g as u64)))
            .map_err(sql_error("read embedding models"))
    }

    /// Records that `model`'s vectors cover every chunk of generation `generation`.
    pub(crate) fn mark_model_complete(
        &mut self,
        model: &Fingerprint,
        generation: Generation,
    ) -> Result<()> {
        self.conn
            .execute(
                "UPDATE embedding_models SET complete_at = ?2 WHERE fingerprint = ?1",
                params![model.0.as_slice(), generation.0 as i64],
            )
            .map(drop)
            .map_err(sql_error("record a complete embedding"))
    }

    /// The number of committed batches of vectors so far.
    pub fn vector_seq(&self) -> Result<u64> {
        if !self.has_vector_tables()? {
            return Ok(0);
        }
        self.meta("vector_seq").map(|v| v as u64)
    }

    /// How many of the ledger's chunks have a vector under `model`.
    pub(crate) fn vector_coverage(&self, model: &Fingerprint) -> Result<VectorCoverage> {
        let chunks: i64 = self
            .conn
            .query_row("SELECT count(*) FROM chunks", [], |row| row.get(0))
            .map_err(sql_error("count chunks"))?;
        if !self.has_vector_tables()? {
            return Ok(VectorCoverage {
                vectors: 0,
                chunks: chunks as u64,
            });
        }
        let vectors: i64 = self
            .conn
            .query_row(
                "SELECT count(*) FROM chunks c
                 WHERE EXISTS (SELECT 1 FROM vectors v WHERE v.model = ?1 AND v.chunk_id = c.chunk_id)",
                [model.0.as_slice()],
                |row| row.get(0),
            )
            .map_err(sql_error("count vectors"))?;
        Ok(VectorCoverage {
            vectors: vectors as u64,
            chunks: chunks as u64,
        })
    }

    /// Up to `limit` chunks without a vector under `model`, in chunk ID order after `after`:
    /// the next page of an embedding run.
    pub(crate) fn chunks_without_vector(
        &self,
        model: &Fingerprint,
        after: Option<&ChunkId>,
        limit: usize,
    ) -> Result<Vec<StoredChunk>> {
        let after: &[u8] = after.map_or(&[], |id| id.as_bytes().as_slice());
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT c.chunk_id, c.heading, c.text FROM chunks c
                 WHERE c.chunk_id > ?2
                   AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.model = ?1 AND v.chunk_id = c.chunk_id)
                 ORDER BY c.chunk_id LIMIT ?3",
            )
            .map_err(sql_error("read chunks without a vector"))?;
        let rows = stmt
            .query_map(params![model.0.as_slice(), after, limit as i64], |row| {
                Ok(StoredChunk {
                    id: chunk_id_column(row, 0)?,
                    heading_path: decode_heading(&self.texts.column(&self.conn, row, 1)?),
                    text: self.texts.column(&self.conn, row, 2)?,
                })
            })
            .map_err(sql_error("read chunks without a vector"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read chunks without a vector"))
    }

    /// Stores one batch of vectors in one transaction and bumps `vector_seq`. A vector already
    /// stored is kept as it was (the same model gives the same vector for the same chunk).
    /// Returns how many were new.
    pub(crate) fn insert_vectors(
        &mut self,
        model: &Fingerprint,
        vectors: &[(ChunkId, Vec<f32>)],
    ) -> Result<u64> {
        self.insert_vectors_at(model, vectors, None)
    }

    /// `insert_vectors`, setting `vector_seq` to `seq` when given (a replica takes the shared
    /// ledger's position of the page) instead of bumping it.
    pub(crate) fn insert_vectors_at(
        &mut self,
        model: &Fingerprint,
        vectors: &[(ChunkId, Vec<f32>)],
        seq: Option<u64>,
    ) -> Result<u64> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("begin vectors"))?;
        let mut added = 0;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO vectors (model, chunk_id, vector) VALUES (?1, ?2, ?3)
                     ON CONFLICT (model, chunk_id) DO NOTHING",
                )
                .map_err(sql_error("write vectors"))?;
            for (id, vector) in vectors {
                added += stmt
                    .execute(params![
                        model.0.as_slice(),
                        id.as_bytes().as_slice(),
                        encode_vector(vector)
                    ])
                    .map_err(sql_error("write vectors"))? as u64;
            }
        }
        match seq {
            None => tx.execute(
                "UPDATE meta SET value = value + 1 WHERE name = 'vector_seq'",
                [],
            ),
            Some(seq) => tx.execute(
                "UPDATE meta SET value = ?1 WHERE name = 'vector_seq'",
                [seq as i64],
            ),
        }
        .map_err(sql_error("bump vector_seq"))?;
        crash_point("embed.before_commit");
        tx.commit().map_err(sql_error("commit vectors"))?;
        Ok(added)
    }

    /// Calls `f` for every chunk the ledger holds that has a vector under `model`, in chunk ID
    /// order (for the vector index and `verify`).
    pub(crate) fn for_each_vector(
        &self,
        model: &Fingerprint,
        mut f: impl FnMut(ChunkId, &[u8]) -> Result<()>,
    ) -> Result<()> {
        if !self.has_vector_tables()? {
            return Ok(());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT v.chunk_id, v.vector FROM vectors v JOIN chunks c ON c.chunk_id = v.chunk_id
                 WHERE v.model = ?1 ORDER BY v.chunk_id",
            )
            .map_err(sql_error("read vectors"))?;
        let mut rows = stmt
            .query([model.0.as_slice()])
            .map_err(sql_error("read vectors"))?;
        while let Some(row) = rows.next().map_err(sql_error("read vectors"))? {
            let id = chunk_id_column(row, 0).map_err(sql_error("read vectors"))?;
            let bytes = row
                .get_ref(1)
                .and_then(|value| value.as_blob().map_err(Into::into))
                .map_err(sql_error("read vectors"))?;
            f(id, bytes)?;
        }
        Ok(())
    }

    /// Chunks whose vector under `model` is not `dims` f32s: a blob damaged in the ledger.
    pub(crate) fn damaged_vectors(&self, model: &Fingerprint, dims: usize) -> Result<Vec<ChunkId>> {
        if !self.has_vector_tables()? {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT chunk_id FROM vectors WHERE model = ?1 AND length(vector) != ?2
                 ORDER BY chunk_id",
            )
            .map_err(sql_error("read damaged vectors"))?;
        let ids = stmt
            .query_map(params![model.0.as_slice(), (dims * 4) as i64], |row| {
                chunk_id_column(row, 0)
            })
            .map_err(sql_error("read damaged vectors"))?
            .collect::<rusqlite::Result<Vec<ChunkId>>>()
            .map_err(sql_error("read damaged vectors"))?;
        Ok(ids)
    }

    /// Removes the vectors of `model` that are not `dims` f32s, so that the next embedding run
    /// makes them again (the model no longer counts as complete, and `vector_seq` moves on).
    pub(crate) fn remove_damaged_vectors(
        &mut self,
        model: &Fingerprint,
        dims: usize,
    ) -> Result<u64> {
        if !self.has_vector_tables()? {
            return Ok(0);
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("begin removing damaged vectors"))?;
        let removed = tx
            .execute(
                "DELETE FROM vectors WHERE model = ?1 AND length(vector) != ?2",
                params![model.0.as_slice(), (dims * 4) as i64],
            )
            .map_err(sql_error("remove damaged vectors"))? as u64;
        if removed > 0 {
            tx.execute(
                "UPDATE embedding_models SET complete_at = NULL WHERE fingerprint = ?1",
                [model.0.as_slice()],
            )
            .map_err(sql_error("record an incomplete embedding"))?;
            tx.execute(
                "UPDATE meta SET value = value + 1 WHERE name = 'vector_seq'",
                [],
            )
            .map_err(sql_error("bump vector_seq"))?;
        }
        tx.commit()
            .map_err(sql_error("commit removing damaged vectors"))?;
        Ok(removed)
    }

    /// Removes the vectors of the models that search used before the active one (a model
    /// still being embedded, never active yet, is kept), and every vector whose chunk the
    /// ledger no longer holds.
    pub fn gc_vectors(&mut self) -> Result<VectorGc> {
        if !self.has_vector_tables()? {
            return Ok(VectorGc::default());
        }
        let active = self.active_model()?.map(|model| model.fingerprint);
        let active: &[u8] = active.as_ref().map_or(&[], |fp| fp.0.as_slice());
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("begin vector gc"))?;
        let replaced = "SELECT fingerprint FROM embedding_models
                        WHERE active_since IS NOT NULL AND fingerprint != ?1";
        let other_models =
            tx.execute(
                &format!("DELETE FROM vectors WHERE model IN ({replaced})"),
                [active],
            )
            .map_err(sql_error("remove the vectors of replaced models"))? as u64;
        tx.execute(
            &format!("DELETE FROM embedding_models WHERE fingerprint IN ({replaced})"),
            [active],
        )
        .map_err(sql_error("remove replaced models"))?;
        let orphans =
            tx.execute(
                "DELETE FROM vectors
                 WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = vectors.chunk_id)",
                [],
            )
            .map_err(sql_error("remove the vectors of removed chunks"))? as u64;
        // The vector index holds neither (only the active model's vectors of chunks the ledger
        // holds), so its marker stays right.
        tx.commit().map_err(sql_error("commit vector gc"))?;
        Ok(VectorGc {
            other_models,
            orphans,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Ledger;
    use crate::embed::Fingerprint;
    use crate::error::Error;
    use crate::ledger::Access;

    #[test]
    fn a_model_recorded_with_other_dimensions_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut ledger =
            Ledger::open(&dir.path().join("ledger.sqlite"), Access::ReadWrite).expect("create");
        let model = Fingerprint([7; 32]);
        let description = serde_json::json!({"kind": "remote", "name": "words"});
        ledger
            .register_model(&model, &description, 384, 1)
            .expect("first record");
        // The same model again, as it was: nothing to say.
        ledger
            .register_model(&model, &description, 384, 2)
            .expect("the same record");
        let refused = ledger.register_model(&model, &description, 256, 3);
        match refused {
            Err(Error::Model {
                model: name,
                message,
            }) => {
                assert!(name.contains(&model.to_hex()[..12]), "{name}");
                assert!(
                    message.contains("256") && message.contains("384"),
                    "{message}"
                );
            }
            other => panic!("a model of other dimensions was accepted: {other:?}"),
        }
        assert_eq!(ledger.models().expect("models")[0].dims, 384);
    }
}
