//! Embedding: give the model every chunk that has no vector under it yet, a page at a time,
//! each page's vectors committed in one ledger transaction.
//!
//! It runs after the lexical part of an ingest has committed (lexical search never waits for
//! it), and alone as `groundidx embed`. Chunk IDs are content addresses, so a chunk is embedded
//! once per model, ever: a rename, a move, a passage shared by two files, a file that comes back
//! all find their vector already there. A run killed during embedding loses at most the page it
//! was computing; the next run asks the ledger again what is missing and embeds only that.
//!
//! A no-op run never loads the model: the fingerprint comes from the ledger's cache when the
//! model's files have not changed (`embed::stat_key`), and the missing count is a query. A
//! remote model is asked what it is (one probe), since its server may have changed the model
//! behind its name: then the fingerprint is new, and every chunk is embedded under it.
//!
//! The first model a store embeds with is active at once (search uses its vectors as they come,
//! and answers say the coverage); a later model becomes active only once its vectors cover every
//! chunk, and until then search keeps the old one.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock;
use crate::crash::crash_point;
use crate::embed::{self, Embedder, Fingerprint, ModelConfig};
use crate::error::{Error, Result};
use crate::ingest::{Interrupt, Progress};
use crate::ledger::StoredChunk;
use crate::store::Store;

/// Chunks embedded and committed per ledger transaction.
pub const EMBED_PAGE: usize = 128;
/// How often a long embedding run makes the vector index again, so search sees its progress.
const SYNC_EVERY: Duration = Duration::from_secs(60);

/// What an embedding run did: the `embedding` part of `ingest --json`, and `embed --json`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct EmbedReport {
    /// The model's fingerprint (hex).
    pub model: String,
    /// Passages given to the model in this run.
    pub embedded: u64,
    /// Chunks with a vector under this model, after the run.
    pub vectors: u64,
    /// Chunks in the store.
    pub chunks: u64,
    /// Whether the model was loaded (a run with nothing to embed does not load it).
    pub model_loaded: bool,
    /// Whether search now uses this model's vectors.
    pub active: bool,
    pub duration_ms: u64,
}

/// The text a chunk is embedded as: its heading path, then its text.
pub(crate) fn passage_text(chunk: &StoredChunk) -> String {
    if chunk.heading_path.is_empty() {
        chunk.text.clone()
    } else {
        format!("{}\n\n{}", chunk.heading_path.join(" > "), chunk.text)
    }
}

/// The model's fingerprint (`store::model_fingerprint`), kept in the ledger's cache for the
/// next run when it had to be computed for a local model's files.
fn cached_model_fingerprint(store: &mut Store, config: &ModelConfig) -> Result<Fingerprint> {
    let (fingerprint, uncached) = crate::store::looked_up_fingerprint(store.ledger(), config)?;
    if let Some(stat_key) = uncached {
        store.cache_fingerprint(&stat_key, &fingerprint)?;
    }
    Ok(fingerprint)
}

/// Embeds every chunk of the store that has no vector under `config`'s model.
pub fn embed_missing(
    store: &mut Store,
    config: &ModelConfig,
    interrupt: &Interrupt,
    progress: &dyn Progress,
) -> Result<EmbedReport> {
    let dir = store.paths().dir.clone();
    embed_store(store, config, None, interrupt, progress).map_err(|err| err.in_store(&dir))
}

/// `embed_missing` with a model already loaded (by a server that embeds queries with it too).
pub fn embed_missing_with(
    store: &mut Store,
    config: &ModelConfig,
    model: &dyn Embedder,
    interrupt: &Interrupt,
    progress: &dyn Progress,
) -> Result<EmbedReport> {
    let dir = store.paths().dir.clone();
    embed_store(store, config, Some(model), interrupt, progress).map_err(|err| err.in_store(&dir))
}

fn embed_store(
    store: &mut Store,
    config: &ModelConfig,
    loaded: Option<&dyn Embedder>,
    interrupt: &Interrupt,
    progress: &dyn Progress,
) -> Result<EmbedReport> {
    let started = Instant::now();
    let fingerprint = match loaded {
        Some(model) => model.fingerprint(),
        None => cached_model_fingerprint(store, config)?,
    };
    let generation = store.ledger().generation()?;
    if let Some(mut report) = already_complete(store, &fingerprint, generation)? {
        report.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(report);
    }
    let before = store.ledger().vector_coverage(&fingerprint)?;
    let mut report = EmbedReport {
        model: fingerprint.to_hex(),
        vectors: before.vectors,
        chunks: before.chunks,
        ..EmbedReport::default()
    };
    let missing = before.chunks - before.vectors;
    embed_chunks(
        store,
        config,
        loaded,
        &fingerprint,
        missing,
        interrupt,
        progress,
        &mut report,
    )?;
    settle_model(store, &fingerprint, generation, &mut report)?;
    store.sync_vectors()?;
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// The report of a model whose vectors covered every chunk at `generation`, the store's
/// generation now: nothing changed since, so nothing is counted or embedded.
fn already_complete(
    store: &mut Store,
    fingerprint: &Fingerprint,
    generation: crate::ids::Generation,
) -> Result<Option<EmbedReport>> {
    let fingerprint = *fingerprint;
    if store.ledger().model_complete_at(&fingerprint)? == Some(generation)
        && store
            .ledger()
            .active_model()?
            .is_some_and(|m| m.fingerprint == fingerprint)
    {
        // Nothing changed since this model's vectors covered every chunk: no count needed.
        let chunks = store.ledger().chunk_count()?;
        store.sync_vectors()?;
        return Ok(Some(EmbedReport {
            model: fingerprint.to_hex(),
            vectors: chunks,
            chunks,
            active: true,
            ..EmbedReport::default()
        }));
    }
    Ok(None)
}

/// Embeds the `missing` chunks with the model (`loaded`, or loaded from `config` when there
/// are any), recording and activating it first as needed. On a failure the vector index
/// follows what was committed before it.
#[allow(
    clippy::too_many_arguments,
    reason = "the embedding run's parts, each as the caller holds it"
)]
fn embed_chunks(
    store: &mut Store,
    config: &ModelConfig,
    loaded: Option<&dyn Embedder>,
    fingerprint: &Fingerprint,
    missing: u64,
    interrupt: &Interrupt,
    progress: &dyn Progress,
    report: &mut EmbedReport,
) -> Result<()> {
    let fingerprint = *fingerprint;
    let owned;
    let model: Option<&dyn Embedder> = match (missing, loaded) {
        (0, _) => None,
        (_, Some(model)) => Some(model),
        (_, None) => {
            tracing::info!(missing, "loading the embedding model");
            owned = embed::load(config, &crate::store::recorded_models(store.ledger())?)?;
            report.model_loaded = true;
            Some(owned.as_ref())
        }
    };
    if let Some(model) = model {
        if model.fingerprint() != fingerprint {
            return Err(Error::Model {
                model: fingerprint.to_hex(),
                message: "it changed while it was being loaded (its files, or its server's answer to the probe)\nhint: run again".into(),
            });
        }
        store.register_model(
            &fingerprint,
            &model.describe(),
            model.dims(),
            clock::now_ms(),
        )?;
        if store.ledger().active_model()?.is_none() {
            store.activate_model(&fingerprint, clock::now_ms())?;
        }
        progress.phase("embed", missing);
        let paged = embed_pages(
            store,
            model,
            &fingerprint,
            missing,
            interrupt,
            progress,
            report,
        );
        if let Err(err) = paged {
            // What was committed before the failure is searchable: the vector index follows it.
            if let Err(sync) = store.sync_vectors() {
                tracing::warn!(error = %sync, "the vector index could not be made again");
            }
            return Err(err);
        }
    }
    Ok(())
}

/// Records the model's coverage in the report; makes the model active once its vectors cover
/// every chunk, and records it complete at `generation`.
fn settle_model(
    store: &mut Store,
    fingerprint: &Fingerprint,
    generation: crate::ids::Generation,
    report: &mut EmbedReport,
) -> Result<()> {
    let fingerprint = *fingerprint;
    let after = store.ledger().vector_coverage(&fingerprint)?;
    report.vectors = after.vectors;
    report.chunks = after.chunks;
    let active = store.ledger().active_model()?;
    let is_active = active
        .as_ref()
        .is_some_and(|m| m.fingerprint == fingerprint);
    if !is_active && after.vectors == after.chunks && after.chunks > 0 {
        tracing::info!(model = %fingerprint, "the new model's vectors cover every chunk; search uses them now");
        store.activate_model(&fingerprint, clock::now_ms())?;
    }
    report.active = store
        .ledger()
        .active_model()?
        .is_some_and(|m| m.fingerprint == fingerprint);
    if after.vectors == after.chunks {
        store.mark_model_complete(&fingerprint, generation)?;
    }
    Ok(())
}

/// Gives the model every chunk without a vector, a page at a time, each page one transaction.
fn embed_pages(
    store: &mut Store,
    model: &dyn Embedder,
    fingerprint: &Fingerprint,
    missing: u64,
    interrupt: &Interrupt,
    progress: &dyn Progress,
    report: &mut EmbedReport,
) -> Result<()> {
    let mut last_sync = Instant::now();
    let mut after = None;
    loop {
        interrupt.check_embedding(report.embedded, missing)?;
        let page = store
            .ledger()
            .chunks_without_vector(fingerprint, after.as_ref(), EMBED_PAGE)?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = Some(last.id);
        let texts: Vec<String> = page.iter().map(passage_text).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = model.embed_passages(&refs)?;
        let bad = |message: String| Error::Model {
            model: fingerprint.to_hex(),
            message,
        };
        if vectors.len() != page.len() {
            return Err(bad(format!(
                "it returned {} vectors for {} passages",
                vectors.len(),
                page.len()
            )));
        }
        for (chunk, vector) in page.iter().zip(&vectors) {
            if vector.len() != model.dims() {
                return Err(bad(format!(
                    "it returned a vector of {} dimensions for chunk {}, not {}",
                    vector.len(),
                    chunk.id,
                    model.dims()
                )));
            }
            if vector.iter().any(|x| !x.is_finite()) {
                return Err(bad(format!(
                    "it returned a vector with a value that is not a number for chunk {}",
                    chunk.id
                )));
            }
        }
        report.embedded += page.len() as u64;
        let rows: Vec<_> = page.iter().map(|chunk| chunk.id).zip(vectors).collect();
        store.insert_vectors(fingerprint, &rows)?;
        crash_point("embed.after_commit");
        progress.advance(page.len() as u64);
        if last_sync.elapsed() >= SYNC_EVERY {
            store.sync_vectors()?;
            last_sync = Instant::now();
        }
    }
}
