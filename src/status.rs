//! Status: what the store holds and how fresh it is, read without the writer lock.

use serde::Serialize;

use std::path::Path;

use crate::clock;
use crate::error::Result;
use crate::store;

/// The `status --json` contract.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusReport {
    pub documents: u64,
    pub sources: u64,
    pub chunks: u64,
    /// The ledger's generation.
    pub generation: u64,
    /// The generation of the index's last commit; below `generation` while the index lags,
    /// `null` when the index is missing or damaged.
    pub index_generation: Option<u64>,
    /// Why the index cannot be used, when it cannot (`groundidx rebuild` makes it again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_problem: Option<String>,
    pub last_ingest: Option<String>,
    /// Milliseconds since the epoch of the last finished ingest (for `--max-age` checks).
    #[serde(skip)]
    pub last_ingest_ms: Option<i64>,
    pub audit_events: u64,
    pub usage_units: u64,
    pub idempotency_keys: u64,
    /// Every embedding model the store has vectors of, the one search uses first.
    pub models: Vec<ModelStatus>,
    /// The mode a search that names none would run in from here.
    pub mode: crate::search::Mode,
    /// Whether the store's model is found from here (by its fingerprint) and how many chunks
    /// have its vector; when semantic search would be off or partial, why.
    pub semantic: crate::search::SemanticStatus,
}

/// The shared ledger a replica's store copies (`status --ledger`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SharedStatus {
    /// The URL without its password, and the schema.
    pub ledger: String,
    pub generation: u64,
    pub log_seq: u64,
    pub log_floor_seq: u64,
    /// This store's position in the shared log (`null`: not a replica yet).
    pub replica_log_seq: Option<u64>,
    pub counts: crate::ledger::postgres::SharedCounts,
    pub writer: crate::ledger::postgres::LeaseInfo,
    pub consumers: Vec<crate::ledger::postgres::ConsumerRow>,
}

/// The shared ledger's side of `status`, with this store's position in it.
pub fn shared_status(
    dir: &Path,
    shared: &crate::ledger::postgres::PgLedger,
) -> Result<SharedStatus> {
    let replica_log_seq = match store::open_ledger(dir) {
        Ok(ledger) => ledger.replica_state()?.map(|state| state.log_seq),
        Err(crate::error::Error::NoStore { .. }) => None,
        Err(err) => return Err(err),
    };
    let meta = shared.meta()?;
    Ok(SharedStatus {
        ledger: shared.describe(),
        generation: meta.generation,
        log_seq: meta.log_seq,
        log_floor_seq: meta.log_floor_seq,
        replica_log_seq,
        counts: shared.counts()?,
        writer: shared.lease()?,
        consumers: shared.consumers()?,
    })
}

/// One embedding model of the store.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelStatus {
    pub model: String,
    /// Search uses this model's vectors.
    pub active: bool,
    pub dims: usize,
    /// Chunks with a vector under this model, of all chunks.
    pub vectors: u64,
    pub chunks: u64,
    /// What the model is (kind, folder or address, pooling, prefixes).
    pub description: serde_json::Value,
}

/// Reads the store's counts and generations from the ledger, and the index's generation from
/// its `meta.json` alone, so it reports a store whose index is missing or damaged too.
pub fn status(dir: &Path) -> Result<StatusReport> {
    let ledger = store::open_ledger(dir)?;
    let (index_generation, index_problem) = match store::index_generation(dir) {
        Ok(generation) => (Some(generation.0), None),
        Err(err) => (None, Some(err.to_string())),
    };
    let counts = ledger.counts()?;
    let mut models = Vec::new();
    let active = ledger.active_model()?.map(|m| m.fingerprint);
    for mut model in ledger.models()? {
        // A remote model's answer to the probe is how it is known again, not what it is: it is
        // hundreds of numbers nobody reads.
        if let Some(description) = model.description.as_object_mut() {
            description.remove("probe");
        }
        let coverage = ledger.vector_coverage(&model.fingerprint)?;
        models.push(ModelStatus {
            model: model.fingerprint.to_hex(),
            active: Some(model.fingerprint) == active,
            dims: model.dims,
            vectors: coverage.vectors,
            chunks: coverage.chunks,
            description: model.description,
        });
    }
    let last_ingest_ms = ledger.last_ingest_ms()?;
    let (mode, semantic) = crate::search::store_semantic_status(&ledger)?;
    Ok(StatusReport {
        documents: counts.documents,
        sources: counts.sources,
        chunks: counts.chunks,
        generation: ledger.generation()?.0,
        index_generation,
        index_problem,
        last_ingest: last_ingest_ms.map(clock::rfc3339),
        last_ingest_ms,
        audit_events: counts.audit_events,
        usage_units: counts.usage_units,
        idempotency_keys: counts.idempotency_keys,
        models,
        mode,
        semantic,
    })
}
