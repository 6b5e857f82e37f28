//! The store: the ledger and the index together, and the crash-safety protocol between them.
//!
//! A store is a folder: `ledger.sqlite` (the source of truth), `index/` (the Tantivy projection)
//! and `lock` (the writer lock). They cannot share a transaction, so they are kept consistent by
//! the ledger's `chunk_log` (the outbox pattern):
//!
//! 1. `commit` writes a batch to the ledger in one transaction, with one log row per chunk added
//!    or removed, under a new generation;
//! 2. then applies that generation to Tantivy (delete every logged ID, add back those the ledger
//!    holds) and commits Tantivy with the generation as its payload;
//! 3. `catch_up`, run by every writer when it opens the store, replays whatever generations the
//!    index lacks, and `rebuild` makes the index again from the ledger alone.
//!
//! A rebuild never writes into the live index: it builds a new one in `index.new/` and swaps
//! it in (`swap`), so it heals an index that is missing, damaged or of another schema, and a
//! kill during it leaves the old index or the new one. A writer that cannot open the index
//! rebuilds it so.
//!
//! `commit`, `catch_up` and `rebuild` are the only Tantivy writers. Readers (`StoreReader`)
//! never take the lock, never replay and never write; the commands that read the ledger alone
//! (`open_ledger`) never open the index. So a store on a read-only mount is read as it is (the
//! ledger and the index each open without the files they would otherwise create there), and an
//! index behind the ledger stays behind until a writer can run: readers say so.

mod lock;
mod publisher;
mod replica;
mod swap;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::crash::crash_point;
use crate::embed::{Embedder, Fingerprint};
use crate::error::{Error, Result};
use crate::ids::{ChunkId, Generation};
use crate::index::{ChunkLabels, IdFields, Index, IndexedChunk, Indexing, Writer};
use crate::ledger::{
    Access, Batch, BatchOutcome, ChunkDocuments, Ledger, LedgerPool, PooledLedger,
    READ_CONNECTIONS, StoredChunk, decode_vector,
};
use crate::vectors::{self, Marker, VectorSet};

pub use lock::{LockWait, WriterLock};
pub(crate) use publisher::{Lease, hostname};
pub use replica::SyncReport;
pub use replica::{OtherLedger, ReplicaSync, SharedWriting, gc_shared_vectors, sync_replica};

use publisher::Publisher;

/// How many chunks are read from the ledger at a time while applying to the index.
const APPLY_READ_BATCH: usize = 2_000;

/// The files of a store folder.
#[derive(Clone, Debug)]
pub struct StorePaths {
    pub dir: PathBuf,
}

impl StorePaths {
    pub fn new(dir: &Path) -> StorePaths {
        StorePaths {
            dir: dir.to_path_buf(),
        }
    }

    pub fn ledger(&self) -> PathBuf {
        self.dir.join("ledger.sqlite")
    }

    /// The ledger's path, when there is one: a reader never creates a store, so without a
    /// ledger it fails with `Error::NoStore`.
    pub fn existing_ledger(&self) -> Result<PathBuf> {
        let path = self.ledger();
        if !path.exists() {
            return Err(Error::NoStore {
                path: self.dir.clone(),
            });
        }
        Ok(path)
    }

    pub fn index(&self) -> PathBuf {
        self.dir.join("index")
    }

    /// Where a rebuild builds the new index before swapping it in.
    pub(crate) fn index_new(&self) -> PathBuf {
        self.dir.join("index.new")
    }

    /// Where the replaced index waits for removal during a swap.
    pub(crate) fn index_old(&self) -> PathBuf {
        self.dir.join("index.old")
    }
}

/// What `catch_up` found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUp {
    /// The index was at the ledger's generation.
    InStep,
    /// The index was behind and the missing generations were replayed.
    Replayed { from: Generation, to: Generation },
    /// The index could not be brought up to date by a replay and was rebuilt.
    Rebuilt { from: Generation, to: Generation },
    /// The index was missing, damaged or of another schema, and was rebuilt from the ledger.
    Replaced { to: Generation },
}

/// How a writer builds the index's documents from the ledger.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreConfig {
    /// The front-matter fields indexed as identifiers. Every chunk the index writes takes
    /// them from the ledger's fields with this list, so a changed list reaches every chunk at
    /// the next `rebuild` (and each chunk written before that).
    pub id_fields: IdFields,
}

/// What `Store::open_at` does once the index is open.
enum Then {
    CatchUp,
    Rebuild,
    /// Neither: a replica is brought to the shared ledger first.
    Nothing,
}

/// A store opened for writing: it holds the writer lock until dropped.
pub struct Store {
    paths: StorePaths,
    ledger: Ledger,
    index: Index,
    writer: Option<Writer>,
    /// How the next writer opened indexes (`expect_to_read`).
    indexing: Indexing,
    /// The generation of the index's last commit.
    index_generation: Generation,
    /// The generation the writer holds, committed or not: `stage` moves it, `flush` commits it.
    staged_generation: Generation,
    config: StoreConfig,
    /// Where its ledger writes go: its own ledger, or the shared ledger first.
    publisher: Publisher,
    _lock: WriterLock,
}

impl Store {
    /// Opens the store at `dir` for writing; `locked` is called once, as soon as the writer
    /// lock is held.
    fn open_at(
        dir: &Path,
        wait: LockWait,
        then: Then,
        config: StoreConfig,
        locked: &mut dyn FnMut(),
    ) -> Result<(Store, CatchUp)> {
        std::fs::create_dir_all(dir)
            .map_err(|err| Error::io(format!("create store {}", dir.display()), err))?;
        let lock = WriterLock::acquire(dir, wait)?;
        locked();
        let paths = StorePaths::new(dir);
        let ledger = Ledger::open(&paths.ledger(), Access::ReadWrite)?;
        let publisher = match ledger.replica_state()? {
            Some(_) => Publisher::Detached,
            None => Publisher::Own,
        };
        swap::recover(&paths)?;
        let (index, replaced) = match Index::open(&paths.index()) {
            Ok(index) => (index, None),
            Err(Error::IndexUnusable { reason, .. }) => {
                let generation = ledger.generation()?;
                if generation.0 > 0 || paths.index().exists() {
                    tracing::warn!(
                        reason = %reason,
                        "the index cannot be used; rebuilding it from the ledger"
                    );
                }
                (
                    build_index(&paths, &ledger, generation, &config)?,
                    Some(generation),
                )
            }
            Err(err) => return Err(err),
        };
        // Failing to tidy up is no reason to refuse the run (a rebuild must go on over a
        // damaged folder); what is left is tried again by the next writer.
        if let Err(err) = index.remove_leftovers() {
            tracing::warn!(error = %err, "could not remove the files of killed writers");
        }
        let index_generation = index.generation()?;
        let mut store = Store {
            paths,
            ledger,
            index,
            writer: None,
            indexing: Indexing::default(),
            index_generation,
            staged_generation: index_generation,
            config,
            publisher,
            _lock: lock,
        };
        if let Some(to) = replaced {
            store.ledger.prune_log(to)?;
            store.rebuild_vectors()?;
            return Ok((store, CatchUp::Replaced { to }));
        }
        match then {
            Then::CatchUp => {
                let caught_up = store.catch_up()?;
                store.sync_vectors()?;
                Ok((store, caught_up))
            }
            Then::Rebuild | Then::Nothing => Ok((store, CatchUp::InStep)),
        }
    }

    pub fn paths(&self) -> &StorePaths {
        &self.paths
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The row ID of a root folder, added when new (a row of this store's ledger alone: a
    /// replica's roots are matched by path).
    pub fn ensure_root(&mut self, root: &str) -> Result<crate::ledger::RootId> {
        self.ledger.ensure_root(root)
    }

    /// Remembers a local model folder's fingerprint by its files' stat (a cache of this
    /// store's ledger alone).
    pub(crate) fn cache_fingerprint(
        &mut self,
        stat_key: &str,
        fingerprint: &Fingerprint,
    ) -> Result<()> {
        self.ledger.cache_fingerprint(stat_key, fingerprint)
    }

    /// Says how many bytes of files the run will read, so that its writer indexes as that run
    /// is best indexed (`Indexing::of_run`). A writer open already (a catch-up's) that indexes
    /// otherwise is settled first, and the run's opens anew.
    pub(crate) fn expect_to_read(&mut self, bytes: u64) -> Result<()> {
        self.indexing = Indexing::of_run(bytes);
        if self
            .writer
            .as_ref()
            .is_some_and(|writer| writer.indexing() != self.indexing)
        {
            self.settle()?;
        }
        Ok(())
    }

    /// Commits one batch: the ledger transaction first, then the Tantivy commit of the new
    /// generation (`stage`, then `flush`).
    ///
    /// If it fails or the process dies before the ledger commit, nothing of the batch is
    /// written. After it, the ledger holds the batch and its log rows; the next writer's
    /// `catch_up` applies whatever the index missed.
    pub fn commit(&mut self, batch: &Batch) -> Result<BatchOutcome> {
        let outcome = self.stage(batch)?;
        self.flush()?;
        Ok(outcome)
    }

    /// Commits one batch to the ledger and gives its chunk changes to the index writer, which
    /// indexes them in its own threads meanwhile; the index commits them at the next `flush`.
    /// Until then searches see the index's last commit, and a crash costs nothing the ledger
    /// has: its log keeps every generation the index has not committed, and the next writer
    /// replays them (`catch_up`).
    pub(crate) fn stage(&mut self, batch: &Batch) -> Result<BatchOutcome> {
        self.stage_batch(batch)
            .map_err(|err| err.in_store(&self.paths.dir))
    }

    fn stage_batch(&mut self, batch: &Batch) -> Result<BatchOutcome> {
        if batch.is_empty() {
            return Ok(BatchOutcome::default());
        }
        let outcome = self
            .publisher
            .apply_batch(&mut self.ledger, batch, &self.paths.dir)?;
        crash_point("store.after_ledger_commit");
        if let Some(generation) = outcome.generation {
            let from = self.staged_generation;
            if let Err(err) = self.apply_log(from) {
                // The writer may hold part of this generation: discard everything it holds, so
                // that no later flush commits a generation half applied. The ledger's log keeps
                // every generation since the index's last commit for the next apply.
                self.writer = None;
                self.staged_generation = self.index_generation;
                return Err(err);
            }
            self.staged_generation = generation;
            crash_point("store.after_index_apply");
        }
        Ok(outcome)
    }

    /// Commits what `stage` gave the index (with the generation it reached as the payload),
    /// then prunes the log rows the index now has. Nothing to do when all is committed.
    pub fn flush(&mut self) -> Result<()> {
        if self.staged_generation == self.index_generation {
            return Ok(());
        }
        let generation = self.staged_generation;
        let flushed = self.commit_index(generation).and_then(|()| {
            crash_point("store.after_index_commit");
            self.ledger.prune_log(generation)?;
            crash_point("store.after_log_prune");
            Ok(())
        });
        flushed.map_err(|err| err.in_store(&self.paths.dir))
    }

    /// Commits what is staged and waits for the index's merges, so that the run's work ends
    /// here rather than in the background of the next one. The next write opens a writer again.
    pub fn settle(&mut self) -> Result<()> {
        self.flush()?;
        if let Some(writer) = self.writer.take() {
            writer
                .finish()
                .map_err(|err| err.in_store(&self.paths.dir))?;
        }
        Ok(())
    }

    /// Brings the index to the ledger's generation.
    ///
    /// Replays the logged generations the index lacks: for every chunk ID they touch, delete it
    /// from the index and add it back if the ledger still holds it. Deleting before adding makes
    /// a replay safe to repeat, so a crash inside a replay heals at the next one. When the log
    /// no longer reaches back to the index's generation, or the index is *ahead* of the ledger
    /// (a ledger restored from a backup), the index is rebuilt from the ledger instead.
    pub fn catch_up(&mut self) -> Result<CatchUp> {
        let ledger_generation = self.ledger.generation()?;
        let from = self.index_generation;
        if from == ledger_generation {
            return Ok(CatchUp::InStep);
        }
        if from > ledger_generation || from < self.ledger.log_floor()? {
            tracing::warn!(
                index = from.0,
                ledger = ledger_generation.0,
                "the index is out of step with the ledger beyond its log; rebuilding it from the ledger"
            );
            self.rebuild_index()?;
            return Ok(CatchUp::Rebuilt {
                from,
                to: ledger_generation,
            });
        }
        tracing::info!(
            from = from.0,
            to = ledger_generation.0,
            "catching the index up with the ledger (an earlier run stopped between the two)"
        );
        crash_point("catch_up.before_apply");
        self.apply_log(from)?;
        self.staged_generation = ledger_generation;
        crash_point("catch_up.before_commit");
        self.commit_index(ledger_generation)?;
        crash_point("catch_up.after_commit");
        self.ledger.prune_log(ledger_generation)?;
        Ok(CatchUp::Replayed {
            from,
            to: ledger_generation,
        })
    }

    /// Makes the index again from the ledger alone, in a new folder swapped in for the old one
    /// once committed: until the swap, readers (and a crash) see the previous index whole, and
    /// the old index need not be readable at all.
    pub fn rebuild(&mut self) -> Result<Generation> {
        self.rebuild_index()
            .map_err(|err| err.in_store(&self.paths.dir))
    }

    fn rebuild_index(&mut self) -> Result<Generation> {
        // The old index's writer must be gone before its folder is: a merge it still ran would
        // write into a removed folder. What it staged is discarded; the ledger has it.
        if let Some(writer) = self.writer.take()
            && let Err(err) = writer.finish()
        {
            tracing::warn!(error = %err, "the writer of the replaced index failed to finish");
        }
        let generation = self.ledger.generation()?;
        self.index = build_index(&self.paths, &self.ledger, generation, &self.config)?;
        self.index_generation = generation;
        self.staged_generation = generation;
        self.ledger.prune_log(generation)?;
        self.rebuild_vectors()?;
        Ok(generation)
    }

    /// The marker the vector index must carry to be in step with the ledger: `None` when no
    /// model is active (then there is no vector index).
    fn wanted_vectors(&self) -> Result<Option<(Marker, usize)>> {
        let Some(model) = self.ledger.active_model()? else {
            return Ok(None);
        };
        Ok(Some((
            Marker {
                fingerprint: model.fingerprint,
                generation: self.ledger.generation()?,
                vector_seq: self.ledger.vector_seq()?,
            },
            model.dims,
        )))
    }

    /// Makes the vector index again from the ledger's vectors when its marker is not the
    /// ledger's (a commit of chunks or of vectors since, or a crash before it was written), and
    /// removes the graph file of older versions. Returns whether it wrote or removed a file.
    pub(crate) fn sync_vectors(&mut self) -> Result<bool> {
        let path = vectors::path(&self.paths.dir);
        let wanted = self.wanted_vectors()?;
        let current = VectorSet::read_marker(&path)?;
        let mut wrote = false;
        if wanted.map(|(marker, _)| marker) != current {
            self.write_vectors(wanted)
                .map_err(|err| err.in_store(&self.paths.dir))?;
            wrote = true;
        }
        wrote |= vectors::remove_old_graph(&path).map_err(|err| err.in_store(&self.paths.dir))?;
        Ok(wrote)
    }

    /// Makes the vector index again from the ledger's vectors, whatever its marker says (for
    /// `rebuild`, which must heal a damaged file whose header still reads).
    pub(crate) fn rebuild_vectors(&mut self) -> Result<()> {
        // A vector damaged in the ledger is removed, so the next embedding run makes it again
        // (in a store of its own: a replica's is left, and reported).
        if let Some(model) = self.ledger.active_model()? {
            self.publisher.remove_damaged_vectors(
                &mut self.ledger,
                &model.fingerprint,
                model.dims,
                &self.paths.dir,
            )?;
        }
        let wanted = self.wanted_vectors()?;
        let path = vectors::path(&self.paths.dir);
        vectors::remove_old_graph(&path).map_err(|err| err.in_store(&self.paths.dir))?;
        self.write_vectors(wanted)
            .map_err(|err| err.in_store(&self.paths.dir))
    }

    fn write_vectors(&self, wanted: Option<(Marker, usize)>) -> Result<()> {
        let path = vectors::path(&self.paths.dir);
        let Some((marker, dims)) = wanted else {
            return vectors::remove(&path);
        };
        let ledger = &self.ledger;
        let count = ledger.read_snapshot(|ledger| {
            vectors::write(&path, &marker, dims, |sink| {
                ledger.for_each_vector(&marker.fingerprint, |id, bytes| {
                    // A damaged vector is left out (`verify` names it, `rebuild` removes it),
                    // so that one bad blob does not stop every writer.
                    match decode_vector(bytes).filter(|vector| vector.len() == dims) {
                        Some(vector) => sink(&id, &vector),
                        None => {
                            tracing::warn!(chunk = %id, bytes = bytes.len(), "the ledger's vector of this chunk is damaged; leaving it out of the vector index");
                            Ok(())
                        }
                    }
                })
            })
        })?;
        tracing::debug!(vectors = count, "vector index written");
        Ok(())
    }

    /// Commits what is staged, waits for Tantivy's background merges and releases its writer.
    /// A writer of a shared ledger then records its replica's position, prunes the shared log
    /// below the slowest replica and gives its lease back.
    pub fn close(mut self) -> Result<()> {
        self.settle()?;
        if let Err(err) = self
            .publisher
            .report_progress(&self.ledger, &self.paths.dir)
        {
            tracing::warn!(error = %err, "could not record this replica's position in the shared ledger");
        }
        std::mem::replace(&mut self.publisher, Publisher::Own).close();
        Ok(())
    }

    /// Records the start of an ingest run (in the shared ledger too, when there is one).
    pub(crate) fn start_run(&mut self, run_id: &str, roots: &[String], now_ms: i64) -> Result<()> {
        self.publisher
            .run(&mut self.ledger, run_id, &self.paths.dir, |ledger| {
                ledger.start_run(run_id, roots, now_ms)
            })
    }

    /// Records the end of an ingest run with its report (in the shared ledger too).
    pub(crate) fn finish_run(
        &mut self,
        run_id: &str,
        generation: Generation,
        report_json: &str,
        now_ms: i64,
    ) -> Result<()> {
        self.publisher
            .run(&mut self.ledger, run_id, &self.paths.dir, |ledger| {
                ledger.finish_run(run_id, generation, report_json, now_ms)
            })
    }

    /// Records a model the first time a run uses it (in the shared ledger too).
    pub(crate) fn register_model(
        &mut self,
        fingerprint: &Fingerprint,
        description: &serde_json::Value,
        dims: usize,
        now_ms: i64,
    ) -> Result<()> {
        self.publisher
            .model(&mut self.ledger, fingerprint, &self.paths.dir, |ledger| {
                ledger.register_model(fingerprint, description, dims, now_ms)
            })
    }

    /// Makes `fingerprint` the model search uses (on every host).
    pub(crate) fn activate_model(&mut self, fingerprint: &Fingerprint, now_ms: i64) -> Result<()> {
        self.publisher
            .model(&mut self.ledger, fingerprint, &self.paths.dir, |ledger| {
                ledger.activate_model(fingerprint, now_ms)
            })
    }

    /// Records that `model`'s vectors cover every chunk of `generation` (on every host).
    pub(crate) fn mark_model_complete(
        &mut self,
        fingerprint: &Fingerprint,
        generation: Generation,
    ) -> Result<()> {
        self.publisher
            .model(&mut self.ledger, fingerprint, &self.paths.dir, |ledger| {
                ledger.mark_model_complete(fingerprint, generation)
            })
    }

    /// Stores one page of vectors (in the shared ledger first, when there is one).
    pub(crate) fn insert_vectors(
        &mut self,
        fingerprint: &Fingerprint,
        vectors: &[(ChunkId, Vec<f32>)],
    ) -> Result<u64> {
        self.publisher
            .insert_vectors(&mut self.ledger, fingerprint, vectors, &self.paths.dir)
    }

    /// The lease this store writes under, when it writes a shared ledger.
    pub fn lease(&self) -> Option<&Lease> {
        self.publisher.lease()
    }

    /// Stages in the Tantivy writer every chunk change logged after generation `after`. The
    /// index deletes by a chunk's 64-bit key, so every chunk the ledger holds under a deleted
    /// key is added back, not only the logged one (`Ledger::chunks_sharing_keys`).
    fn apply_log(&mut self, after: Generation) -> Result<()> {
        let changed: Vec<ChunkId> = self.ledger.changed_since(after)?;
        let writer = writer_of(&mut self.writer, &self.index, self.indexing)?;
        for ids in changed.chunks(APPLY_READ_BATCH) {
            writer.delete(ids)?;
            for chunk in self.ledger.chunks_sharing_keys(ids)? {
                add_chunk(writer, &self.ledger, &chunk, &self.config)?;
            }
        }
        Ok(())
    }

    fn commit_index(&mut self, generation: Generation) -> Result<()> {
        let writer = writer_of(&mut self.writer, &self.index, self.indexing)?;
        writer.commit(generation)?;
        self.index_generation = generation;
        Ok(())
    }
}

/// Builds the index of the ledger at `generation` in `index.new/`, commits it there, swaps it
/// in for `index/` and opens it.
///
/// A failure or a kill before the swap leaves `index/` as it was (and `index.new/`, which the
/// next writer removes); after the swap the new index is whole.
fn build_index(
    paths: &StorePaths,
    ledger: &Ledger,
    generation: Generation,
    config: &StoreConfig,
) -> Result<Index> {
    let new = paths.index_new();
    swap::remove_folder(&new)?;
    let index = Index::create(&new)?;
    let mut writer = index.writer(Indexing::Short)?;
    crash_point("rebuild.before_add");
    ledger.for_each_chunk(|chunk| add_chunk(&mut writer, ledger, &chunk, config))?;
    crash_point("rebuild.before_commit");
    writer.commit(generation)?;
    // Nothing may write into the folder once it moves: wait for the merges the commit began.
    writer.finish()?;
    drop(index);
    crash_point("rebuild.after_commit");
    swap::swap_in(paths)?;
    crash_point("rebuild.after_swap");
    Index::open(&paths.index())
}

/// Stages one chunk in the writer, labelled with what its documents are called in the ledger
/// now: replaying a log, catching up and rebuilding all label a chunk alike.
fn add_chunk(
    writer: &mut Writer,
    ledger: &Ledger,
    chunk: &StoredChunk,
    config: &StoreConfig,
) -> Result<()> {
    let labels = labels(ledger.chunk_documents(&chunk.id)?, &config.id_fields);
    writer.add(&IndexedChunk {
        id: chunk.id,
        heading_path: &chunk.heading_path,
        text: &chunk.text,
        labels: &labels,
    })
}

/// The index's labels of a chunk: its documents' file name stems, their front-matter titles
/// (the `title` field, never a first heading, which the heading path already scores), the
/// values of the fields `id_fields` names, and their titles as the ledger records them (the
/// front-matter title, else the first level-1 heading: named exactly, they rank first).
fn labels(documents: ChunkDocuments, id_fields: &IdFields) -> ChunkLabels {
    let values = |keep: &dyn Fn(&str) -> bool| -> Vec<String> {
        documents
            .fields
            .iter()
            .filter(|(key, _)| keep(key))
            .map(|(_, value)| value.clone())
            .collect()
    };
    ChunkLabels {
        titles: values(&|key| key == "title"),
        ids: values(&|key| id_fields.contains(key)),
        names: documents.names,
        document_titles: documents.titles,
    }
}

/// The Tantivy writer, opened on first use: a run with nothing to write never opens it, so it
/// leaves the index folder untouched.
fn writer_of<'a>(
    slot: &'a mut Option<Writer>,
    index: &Index,
    indexing: Indexing,
) -> Result<&'a mut Writer> {
    if slot.is_none() {
        *slot = Some(index.writer(indexing)?);
    }
    Ok(slot.as_mut().expect("the writer was just opened"))
}

/// The fingerprint of a configured model, from the ledger's cache when its files have not
/// changed since it was computed (then nothing of the model is read), else computed (a remote
/// model is always asked, and named after the recorded model that answered its probe alike:
/// see `embed::stat_key` and `embed::fingerprint`).
pub(crate) fn model_fingerprint(
    ledger: &Ledger,
    config: &crate::embed::ModelConfig,
) -> Result<crate::embed::Fingerprint> {
    Ok(looked_up_fingerprint(ledger, config)?.0)
}

/// `model_fingerprint`, with the stat key to cache it under when it was computed for a local
/// model: taken before the files were read, so files changed meanwhile leave an entry that never
/// matches again, never a new stat mapped to an old fingerprint.
pub(crate) fn looked_up_fingerprint(
    ledger: &Ledger,
    config: &crate::embed::ModelConfig,
) -> Result<(crate::embed::Fingerprint, Option<String>)> {
    let stat_key = crate::embed::stat_key(config)?;
    if let Some(key) = &stat_key
        && let Some(fingerprint) = ledger.cached_fingerprint(key)?
    {
        return Ok((fingerprint, None));
    }
    let fingerprint = crate::embed::fingerprint(config, &recorded_models(ledger)?)?;
    Ok((fingerprint, stat_key))
}

/// The models the ledger records, as the embedding models need them to know a remote model
/// again by its answer to the probe (`embed::fingerprint`, `embed::load`).
pub(crate) fn recorded_models(ledger: &Ledger) -> Result<Vec<crate::embed::RecordedModel>> {
    Ok(ledger
        .models()?
        .into_iter()
        .map(|model| crate::embed::RecordedModel {
            fingerprint: model.fingerprint,
            description: model.description,
        })
        .collect())
}

/// The model the store's active vectors came from, found again through the ledger's record of
/// it and checked by its fingerprint: `search` embeds queries with it, and every writer given
/// no model (`ingest`, `ingest --watch`, `serve --reindex`, `embed`) embeds new chunks with it,
/// so a store that has a model keeps every chunk embedded. `None` when the store has no vectors.
///
/// Fails with `Error::Model`, naming the folder (or server) and the fix, when the model cannot
/// be found (see `find_recorded_model`): a writer must never leave chunks without a vector in
/// silence.
pub fn recorded_model(
    ledger: &Ledger,
) -> Result<Option<(crate::embed::ModelConfig, crate::embed::Fingerprint)>> {
    match find_recorded_model(ledger)? {
        RecordedModelLookup::NoVectors => Ok(None),
        RecordedModelLookup::Found {
            config,
            fingerprint,
        } => Ok(Some((config, fingerprint))),
        RecordedModelLookup::Unusable { error, .. } => Err(error),
    }
}

/// What looking for the store's recorded model found.
pub(crate) enum RecordedModelLookup {
    /// The store has no vectors, so no model.
    NoVectors,
    /// The recorded model, where it is now, with its fingerprint (the store's).
    Found {
        config: crate::embed::ModelConfig,
        fingerprint: crate::embed::Fingerprint,
    },
    /// The recorded model cannot be used from here: why, as a code a program can act on, the
    /// model's folder (or server), what was found there, and the error that names the fix.
    Unusable {
        absence: ModelAbsence,
        model: String,
        detail: String,
        error: Error,
    },
}

/// Why the model a store records cannot be used from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModelAbsence {
    /// Its folder is gone (or the ledger's record of it does not say where it is).
    Missing,
    /// A model is there, but its fingerprint is not the store's: another model, or other settings.
    Changed,
    /// Its folder is there but cannot be read or loaded (permissions, a truncated or damaged file).
    Unreadable,
    /// Its server cannot be reached or fails.
    Unreachable,
}

impl ModelAbsence {
    /// Why a model folder that failed to fingerprint or load cannot be used: missing when the
    /// folder is not there at all, else unreadable.
    pub(crate) fn of_local_failure(dir: &Path) -> ModelAbsence {
        if dir.is_dir() {
            ModelAbsence::Unreadable
        } else {
            ModelAbsence::Missing
        }
    }
}

/// Looks for the model the store's active vectors came from (see [`recorded_model`]).
///
/// A local folder is recorded by its canonical path. An older store recorded it as given on the
/// command line; such a relative path is tried from the current folder, the store's parent
/// folder and the store's folder, and the first that holds the recorded fingerprint is used.
/// When none does, the most telling finding among the places tried says why: a folder that
/// cannot be read, then one that holds another model, then none there at all.
pub(crate) fn find_recorded_model(ledger: &Ledger) -> Result<RecordedModelLookup> {
    use crate::embed::ModelConfig;
    let Some(active) = ledger.active_model()? else {
        return Ok(RecordedModelLookup::NoVectors);
    };
    let short = active.fingerprint.to_hex()[..12].to_string();
    let Some(recorded) = crate::embed::config_from_description(&active.description) else {
        return Ok(RecordedModelLookup::Unusable {
            absence: ModelAbsence::Missing,
            model: short.clone(),
            detail: "its record does not say where it is".to_string(),
            error: Error::Model {
                model: short,
                message: format!(
                    "the store's vectors are from a model it cannot load again from its record ({})\nhint: pass that model with --embed-model DIR or --embed-url URL, or embed the store under another model with groundidx embed --embed-model DIR",
                    active.description
                ),
            },
        });
    };
    let candidates = candidate_configs(ledger, &recorded);
    let mut found = Vec::new();
    let mut unreadable = Vec::new();
    let mut absence = ModelAbsence::Missing;
    for candidate in candidates {
        match model_fingerprint(ledger, &candidate) {
            Ok(fingerprint) if fingerprint == active.fingerprint => {
                return Ok(RecordedModelLookup::Found {
                    config: candidate,
                    fingerprint,
                });
            }
            Ok(fingerprint) => {
                if absence == ModelAbsence::Missing {
                    absence = ModelAbsence::Changed;
                }
                found.push(format!("model {}", &fingerprint.to_hex()[..12]));
            }
            // A server that cannot be reached says so, with its own address and hint.
            Err(error) if matches!(recorded, ModelConfig::Remote(_)) => {
                let (model, detail) = match &error {
                    Error::Model { model, message } => (model.clone(), message.clone()),
                    other => (short.clone(), other.to_string()),
                };
                return Ok(RecordedModelLookup::Unusable {
                    absence: ModelAbsence::Unreachable,
                    model,
                    detail,
                    error,
                });
            }
            Err(error) => {
                if let ModelConfig::Local(local) = &candidate
                    && ModelAbsence::of_local_failure(&local.dir) == ModelAbsence::Unreadable
                {
                    absence = ModelAbsence::Unreadable;
                    // What could not be read, not the folder's name again.
                    if let Error::Model { message, .. } = &error {
                        unreadable.push(message.clone());
                    }
                }
                found.push(error.to_string());
            }
        }
    }
    Ok(unusable(recorded, absence, &short, &found, &unreadable))
}

/// Where a recorded model may be now: the recorded config, or for a local folder recorded by a
/// relative path, that path from the current folder, the store's parent folder and the store's
/// folder.
fn candidate_configs(
    ledger: &Ledger,
    recorded: &crate::embed::ModelConfig,
) -> Vec<crate::embed::ModelConfig> {
    use crate::embed::ModelConfig;
    match recorded {
        ModelConfig::Local(local) if local.dir.is_relative() => {
            let store_dir = ledger.path().parent().unwrap_or(Path::new("."));
            let mut dirs = vec![local.dir.clone()];
            if let Some(store_parent) = store_dir.parent() {
                dirs.push(store_parent.join(&local.dir));
            }
            dirs.push(store_dir.join(&local.dir));
            let mut absolute: Vec<PathBuf> = dirs
                .iter()
                .filter_map(|dir| std::path::absolute(dir).ok())
                .collect();
            absolute.dedup();
            absolute
                .into_iter()
                .map(|dir| {
                    ModelConfig::Local(crate::embed::LocalConfig {
                        dir,
                        ..local.clone()
                    })
                })
                .collect()
        }
        _ => vec![recorded.clone()],
    }
}

/// Why the recorded model cannot embed for the store, as a lookup's answer: the model and
/// detail `status` shows, and the error a writer fails with.
fn unusable(
    recorded: crate::embed::ModelConfig,
    absence: ModelAbsence,
    short: &str,
    found: &[String],
    unreadable: &[String],
) -> RecordedModelLookup {
    use crate::embed::ModelConfig;
    let (model, detail) = match (&recorded, absence) {
        (ModelConfig::Local(local), ModelAbsence::Unreadable) => {
            (local.dir.display().to_string(), unreadable.join("; "))
        }
        (ModelConfig::Local(local), ModelAbsence::Changed) => (
            local.dir.display().to_string(),
            format!(
                "{}, the store's vectors are from model {short}",
                found
                    .iter()
                    .filter(|f| f.starts_with("model "))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        (ModelConfig::Local(local), _) => (local.dir.display().to_string(), String::new()),
        (ModelConfig::Remote(remote), _) => (
            format!("{} at {}", remote.model, remote.url),
            format!(
                "it answers as {}, the store's vectors are from model {short}",
                found.join(", ")
            ),
        ),
    };
    let error = match recorded {
        ModelConfig::Local(local) => Error::Model {
            model: local.dir.display().to_string(),
            message: format!(
                "the store's vectors are from model {short}, recorded at this folder, which {} ({}); new chunks cannot be embedded\nhint: pass the folder that holds it with --embed-model DIR, or embed the store under another model with groundidx embed --embed-model DIR",
                match absence {
                    ModelAbsence::Missing => "is gone",
                    ModelAbsence::Changed => "holds another model now",
                    ModelAbsence::Unreadable | ModelAbsence::Unreachable => "cannot be read",
                },
                found.join("; ")
            ),
        },
        ModelConfig::Remote(remote) => Error::Model {
            model: format!("{} at {}", remote.model, remote.url),
            message: format!(
                "the store's vectors are from model {short}, and that server now answers as another model ({}); new chunks cannot be embedded\nhint: pass a server of that model with --embed-url URL --embed-remote-model NAME, or embed the store under the model it serves now with groundidx embed --embed-url URL --embed-remote-model NAME",
                found.join("; ")
            ),
        },
    };
    RecordedModelLookup::Unusable {
        absence,
        model,
        detail,
        error,
    }
}

/// Opens an existing store's ledger for reading, without the index: for the commands that read
/// the ledger alone (`export`, `status`, `audit`, `usage`), which must work while the index is
/// missing or damaged. Fails with `Error::NoStore` when there is no ledger.
pub fn open_ledger(dir: &Path) -> Result<Ledger> {
    let path = StorePaths::new(dir).existing_ledger()?;
    Ledger::open(&path, Access::ReadOnly).map_err(|err| err.in_store(dir))
}

/// The generation of the index's last commit, read from its `meta.json` without opening it.
pub fn index_generation(dir: &Path) -> Result<Generation> {
    crate::index::committed_generation(&StorePaths::new(dir).index())
}

/// A store opened for reading: no lock, no replay, no writes. It can be shared by threads:
/// each search takes the index's current snapshot and a ledger connection of its own.
pub struct StoreReader {
    paths: StorePaths,
    ledger: LedgerPool,
    index: Index,
    /// The vector index as last read, if the store has one.
    vectors: std::sync::RwLock<Option<Arc<VectorSet>>>,
    /// The vector indexes it replaced, each with when, for the page cursors cut from them.
    replaced_vectors:
        std::sync::Mutex<std::collections::VecDeque<(std::time::Instant, Arc<VectorSet>)>>,
    /// The model that embeds queries, when one is loaded (the active model's); a server
    /// replaces it when another model becomes active.
    embedder: std::sync::RwLock<Option<Arc<dyn Embedder>>>,
    /// Why no model that makes the store's vectors could be loaded, when none could: every
    /// answer says so (`semantic.reason`).
    model_problem: std::sync::RwLock<Option<crate::search::ModelProblem>>,
}

/// How many replaced vector indexes a reader keeps for page cursors, and for how long.
const KEPT_REPLACED_VECTORS: usize = 4;
const KEEP_REPLACED_VECTORS_FOR: std::time::Duration = std::time::Duration::from_secs(10 * 60);

impl StoreReader {
    /// Opens an existing store. Fails with `Error::NoStore` when there is no ledger, and with
    /// `Error::IndexUnusable` when the ledger is there but the index is missing or damaged.
    pub fn open(dir: &Path) -> Result<StoreReader> {
        StoreReader::open_at(dir, true).map_err(|err| err.in_store(dir))
    }

    /// `open` for a server, whose every call commits (its audit and usage rows): the ledger is
    /// read by `pread` rather than through a memory map. A mapped connection unmaps the whole
    /// file at its first read after any commit (a TLB shootdown on every core) and faults every
    /// page in again; under calls that commit, that cost more than the map saves (8 callers of
    /// keyed searches: 3,606 against 3,912 calls/s on `sample_docs`, 1,067 against 1,217 on a
    /// store of 520k chunks). A search with no commit between it and the last is faster
    /// mapped, which is what `open` gives one-off searches.
    pub fn open_for_serving(dir: &Path) -> Result<StoreReader> {
        StoreReader::open_at(dir, false).map_err(|err| err.in_store(dir))
    }

    fn open_at(dir: &Path, mapped: bool) -> Result<StoreReader> {
        let paths = StorePaths::new(dir);
        let ledger = if mapped {
            LedgerPool::open(&paths.existing_ledger()?, READ_CONNECTIONS)?
        } else {
            LedgerPool::open_unmapped(&paths.existing_ledger()?, READ_CONNECTIONS)?
        };
        let index = Index::open_for_reading(&paths.index())?;
        // A vector index that cannot be read leaves lexical search working; `verify` reports
        // it and the next writer makes it again.
        let vectors = match VectorSet::read(&vectors::path(&paths.dir)) {
            Ok(set) => set.map(Arc::new),
            Err(err) => {
                tracing::warn!(error = %err, "the vector index cannot be used; searching without it");
                None
            }
        };
        Ok(StoreReader {
            paths,
            ledger,
            index,
            vectors: std::sync::RwLock::new(vectors),
            replaced_vectors: std::sync::Mutex::new(std::collections::VecDeque::new()),
            embedder: std::sync::RwLock::new(None),
            model_problem: std::sync::RwLock::new(None),
        })
    }

    /// The vector index as last read.
    pub fn vectors(&self) -> Option<Arc<VectorSet>> {
        self.vectors
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the vector index again when a writer replaced it. A file that cannot be read now
    /// (a writer is replacing it, or it is damaged) leaves the last one in use.
    pub(crate) fn reload_vectors(&self) -> Result<()> {
        let path = vectors::path(&self.paths.dir);
        let marker = VectorSet::read_marker(&path)?;
        let current = self.vectors().map(|set| set.marker);
        if marker == current {
            return Ok(());
        }
        let fresh = match marker {
            None => None,
            Some(_) => match VectorSet::read(&path) {
                Ok(set) => set.map(Arc::new),
                Err(err) => {
                    tracing::warn!(error = %err, "the vector index could not be read again; keeping the last one");
                    return Ok(());
                }
            },
        };
        let old = std::mem::replace(
            &mut *self
                .vectors
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            fresh,
        );
        if let Some(old) = old {
            let mut replaced = self
                .replaced_vectors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            replaced.retain(|(when, _)| when.elapsed() < KEEP_REPLACED_VECTORS_FOR);
            replaced.push_back((std::time::Instant::now(), old));
            while replaced.len() > KEPT_REPLACED_VECTORS {
                replaced.pop_front();
            }
        }
        Ok(())
    }

    /// The vector index whose marker key is `key`: the current one, or one replaced in the last
    /// ten minutes (for a page cursor cut from it).
    pub(crate) fn vectors_at(&self, key: u64) -> Option<Arc<VectorSet>> {
        if let Some(current) = self.vectors()
            && current.marker.key() == key
        {
            return Some(current);
        }
        self.replaced_vectors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|(when, set)| {
                when.elapsed() < KEEP_REPLACED_VECTORS_FOR && set.marker.key() == key
            })
            .map(|(_, set)| Arc::clone(set))
    }

    /// Sets the model that embeds queries (loaded by `serve`, `mcp` or `search`), or removes
    /// it (`None`: a server whose model is no longer the one that made the store's vectors).
    /// A search running meanwhile finishes with the model it started with.
    pub fn set_embedder(&self, embedder: Option<Arc<dyn Embedder>>) {
        *self
            .embedder
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = embedder;
    }

    /// Records why no model embeds queries (`None`: nothing is wrong).
    pub fn set_model_problem(&self, problem: Option<crate::search::ModelProblem>) {
        *self
            .model_problem
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = problem;
    }

    /// Why no model embeds queries, when none could be loaded.
    pub(crate) fn model_problem(&self) -> Option<crate::search::ModelProblem> {
        self.model_problem
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The model that embeds queries now.
    pub fn embedder(&self) -> Option<Arc<dyn Embedder>> {
        self.embedder
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn paths(&self) -> &StorePaths {
        &self.paths
    }

    /// Brings the index snapshot up to the ledger's commit when the ledger is ahead of it (an
    /// ingest commits the ledger, then the index; a server's reload follows within a second),
    /// so that a search resolving its hits against the ledger names the generation they are
    /// of. Best effort: a failed read, or an index commit that has not landed yet, leaves the
    /// snapshot as it is.
    pub(crate) fn follow_ledger(&self) {
        let ahead = self
            .ledger()
            .and_then(|ledger| ledger.generation())
            .is_ok_and(|generation| generation > self.index.snapshot().generation());
        if ahead {
            let _ = self.index.reload();
            let _ = self.reload_vectors();
        }
    }

    /// A read-only ledger connection of this caller's own until it is dropped.
    pub fn ledger(&self) -> Result<PooledLedger<'_>> {
        self.ledger
            .get()
            .map_err(|err| err.in_store(&self.paths.dir))
    }

    pub fn index(&self) -> &Index {
        &self.index
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{LockWait, Store, WriterLock};
    use crate::chunk::Chunk;
    use crate::error::Error;
    use crate::ids::{ChunkId, DocHash};
    use crate::index::Indexing;
    use crate::ledger::{Batch, NewDocument, SourceUpsert};
    use crate::stat::FileStat;

    fn upsert(seed: u8) -> SourceUpsert {
        SourceUpsert {
            path: format!("{seed}.md"),
            doc_hash: DocHash::from_bytes([seed; 32]),
            stat: FileStat {
                size: 5,
                mtime_ns: 1,
                ctime_ns: 1,
                inode: u64::from(seed),
            },
            recorded_ns: 10_000_000_000,
            document: Some(NewDocument {
                title: None,
                tags: Vec::new(),
                fields: BTreeMap::new(),
                chunks: vec![Chunk {
                    id: ChunkId::from_bytes([seed; 32]),
                    heading_path: Vec::new(),
                    text: format!("passage {seed}"),
                    lines: (1, 1),
                    ordinal: 0,
                    pages: None,
                }],
                recipe_version: crate::chunk::CHUNKER_VERSION,
                packed: None,
            }),
        }
    }

    /// A store opened for writing in `dir`, with the root of its batches.
    fn store_with_root(dir: &std::path::Path) -> (Store, crate::ledger::RootId) {
        let (mut store, _) = Store::open_writer(dir, LockWait::NoWait, Default::default(), None)
            .expect("open store");
        let root = store.ensure_root("/corpus").expect("root");
        (store, root)
    }

    /// The work `open_writer_then` starts (a run's walk) starts only once the store is this
    /// writer's alone, and what it made is handed back.
    #[test]
    fn open_writer_then_calls_once_the_lock_is_held() {
        let dir = tempfile::tempdir().expect("temp store");
        let mut calls = 0;
        let (_store, _, made) = Store::open_writer_then(
            dir.path(),
            LockWait::NoWait,
            Default::default(),
            None,
            || {
                calls += 1;
                WriterLock::acquire(dir.path(), LockWait::NoWait)
            },
        )
        .expect("open store");
        assert_eq!(calls, 1);
        assert!(
            matches!(made, Err(Error::LockBusy { .. })),
            "called before the lock was held: {made:?}"
        );
        // A writer that cannot have the store calls nothing.
        let refused = Store::open_writer_then(
            dir.path(),
            LockWait::NoWait,
            Default::default(),
            None,
            || panic!("called without the lock"),
        );
        assert!(matches!(refused, Err(Error::LockBusy { .. })));
    }

    /// A writer opened before the run says how much it reads (a catch-up's) is settled and
    /// opened again as the run is best indexed; one that already indexes so is kept.
    #[test]
    fn a_run_is_indexed_as_its_size_says_even_after_a_writer_opened() {
        let dir = tempfile::tempdir().expect("temp store");
        let (mut store, root) = store_with_root(dir.path());
        let mut batch = Batch::new(root);
        batch.upserts.push(upsert(1));
        store.stage(&batch).expect("stage");
        let indexing = |store: &Store| store.writer.as_ref().map(crate::index::Writer::indexing);
        assert_eq!(indexing(&store), Some(Indexing::Short));

        store
            .expect_to_read(Indexing::LONG_RUN_BYTES)
            .expect("expect a long run");
        assert_eq!(indexing(&store), None, "the short run's writer is settled");
        assert_eq!(store.index_generation, store.staged_generation);
        let mut batch = Batch::new(root);
        batch.upserts.push(upsert(2));
        store.stage(&batch).expect("stage");
        assert_eq!(indexing(&store), Some(Indexing::Long));
        store
            .expect_to_read(Indexing::LONG_RUN_BYTES * 4)
            .expect("expect another long run");
        assert_eq!(indexing(&store), Some(Indexing::Long), "kept");
        store.settle().expect("settle");
        store.index.reload().expect("reload");
        assert_eq!(store.index.num_chunks(), 2);
    }

    /// The look-up a search makes of the passage past its page finds a chunk exactly when the
    /// read of a kept passage would: held by the ledger and named by a source.
    #[test]
    fn a_chunk_is_held_with_a_source_exactly_when_its_text_and_sources_read() {
        let dir = tempfile::tempdir().expect("temp store");
        let (mut store, root) = store_with_root(dir.path());
        let mut batch = Batch::new(root);
        batch.upserts.push(upsert(1));
        batch.upserts.push(upsert(2));
        store.commit(&batch).expect("commit");
        let mut batch = Batch::new(root);
        batch.deletes.push("1.md".to_string());
        store.commit(&batch).expect("commit");
        let ledger = store.ledger();
        for (seed, held) in [(1, false), (2, true), (3, false)] {
            let id = ChunkId::from_bytes([seed; 32]);
            assert_eq!(
                ledger.holds_chunk_with_source(&id).expect("look up"),
                held,
                "chunk {seed}"
            );
            assert_eq!(
                ledger.chunk_with_sources(&id).expect("read").is_some(),
                held,
                "chunk {seed}"
            );
        }
    }
}
