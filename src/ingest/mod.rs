//! Ingest: bring the store in line with one or more folders.
//!
//! Every root is planned first (`plan`, which writes nothing, and where the mass-delete guard
//! refuses a run before any write). Then, root by root, the files to read are read, hashed and
//! chunked in parallel a batch at a time, and each batch is committed through `Store::commit`:
//! a crash late in a long run keeps every batch committed before it. Deletions come last, in
//! their own batch, so a file moved within the root is added under its new name before its old
//! name is released, and its chunks never leave the index.

pub mod embed;
mod plan;
mod read;
mod to_read;
mod walks;
pub mod watch;

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use crate::chunk::{self, ChunkConfig};
use crate::clock;
use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::extract;
use crate::format::FormatSet;
use crate::ids::{DocHash, Generation};
use crate::ledger::{Batch, Dictionary, NewDocument, PackedTexts, Packer, Samples, SourceUpsert};
use crate::store::{Store, StoreConfig};
use crate::walk::{Warning, WarningKind};

pub(crate) use plan::{KnownSources, PlanConfig, RootPlan, plan_root};
pub(crate) use read::{ReadOutcome, read_file};
pub(crate) use to_read::FileToRead;
pub use walks::{Walks, open_walking};

/// Files larger than this are skipped with a warning unless `--max-file-size` says otherwise.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 * 1024 * 1024;
/// Files read, hashed and chunked per committed batch. Two batches are in memory at once
/// (one read while the one before commits): 2,000 files a batch held about 30 MB more at
/// the peak of a cold ingest of 100k files, for no time saved.
pub const DEFAULT_BATCH_FILES: usize = 1_000;
/// How often a long run commits the index, so that searches meanwhile see its progress. Each
/// batch is a ledger transaction; the index commits at most this often and at the end of the
/// run, since every commit writes segments that merges then write again.
const INDEX_COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// Settings of an ingest run.
#[derive(Clone, Debug)]
pub struct IngestConfig {
    pub chunk: ChunkConfig,
    pub excludes: Vec<String>,
    /// The formats read (`--formats`); files of others are counted by extension.
    pub formats: FormatSet,
    /// How files are extracted: the bounds, and whether a third-party parser runs in a child
    /// process.
    pub extraction: extract::Options,
    /// Ignore the stat cache and read every file.
    pub rehash: bool,
    /// Let a run remove more than half of a root's documents.
    pub allow_mass_delete: bool,
    pub max_file_size: u64,
    pub batch_files: usize,
    /// Set from outside (a signal handler) to end the run at its next safe point.
    pub interrupt: Interrupt,
    /// The model that embeds, after the lexical part, every chunk without a vector under it.
    pub embed: Option<crate::embed::ModelConfig>,
    /// How the store the run opens builds the index's documents.
    pub store: StoreConfig,
}

/// A request to end a run at its next safe point: before a batch is committed, never inside a
/// commit, so the store stays consistent and the next run continues the job. It holds the
/// number of the signal that asked (0: not asked), which a signal handler stores in `flag`.
#[derive(Clone, Debug, Default)]
pub struct Interrupt(Arc<AtomicUsize>);

impl Interrupt {
    /// The cell a signal handler sets to the signal's number.
    pub fn flag(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.0)
    }

    /// Asks the run to end, as signal `signal` would.
    pub fn raise(&self, signal: i32) {
        self.0.store(signal.max(1) as usize, Ordering::SeqCst);
    }

    /// The signal that asked the run to end, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal as i32),
        }
    }

    /// `Err(Error::Interrupted)` once asked, with how far the run got.
    pub(crate) fn check_embedding(&self, done: u64, total: u64) -> Result<()> {
        match self.signal() {
            Some(signal) => Err(Error::Interrupted {
                signal,
                done,
                total,
                what: "passages embedded",
            }),
            None => Ok(()),
        }
    }

    /// `Err(Error::Interrupted)` once asked, with how far the run got.
    fn check(&self, files_done: u64, files_total: u64) -> Result<()> {
        match self.signal() {
            Some(signal) => Err(Error::Interrupted {
                signal,
                done: files_done,
                total: files_total,
                what: "files ingested",
            }),
            None => Ok(()),
        }
    }
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            chunk: ChunkConfig::default(),
            excludes: Vec::new(),
            formats: FormatSet::default(),
            extraction: extract::Options::default(),
            rehash: false,
            allow_mass_delete: false,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            batch_files: DEFAULT_BATCH_FILES,
            interrupt: Interrupt::default(),
            embed: None,
            store: StoreConfig::default(),
        }
    }
}

/// Where a long run reports how far it is. The library never draws anything itself.
pub trait Progress: Sync {
    /// A new phase begins with `total` steps (0 when unknown).
    fn phase(&self, name: &str, total: u64);
    /// `n` more steps are done.
    fn advance(&self, n: u64);
}

/// Progress that goes nowhere.
pub struct NoProgress;

impl Progress for NoProgress {
    fn phase(&self, _name: &str, _total: u64) {}
    fn advance(&self, _n: u64) {}
}

/// Documents by what happened to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DocumentCounts {
    pub added: u64,
    pub changed: u64,
    pub removed: u64,
    pub renamed: u64,
    pub unchanged: u64,
    pub skipped: u64,
    /// Unchanged files (counted in `unchanged` too) whose chunks an older groundidx made, chunked
    /// again: by an older recipe (`chunk::recipe_version`), or with chunk IDs of the normalised
    /// text. Once per document and recipe.
    pub rechunked: u64,
}

/// Chunks added to and removed from the store, and chunks the index wrote again because the
/// names or fields of their documents changed (a rename, fields read for the first time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChunkCounts {
    pub added: u64,
    pub removed: u64,
    pub reindexed: u64,
}

/// What a run did: the `ingest --json` contract.
#[derive(Clone, Debug, Serialize)]
pub struct IngestReport {
    pub run_id: String,
    pub generation: u64,
    pub documents: DocumentCounts,
    pub chunks: ChunkCounts,
    /// The files not indexed for their format, counted by extension.
    pub skipped_by_extension: crate::walk::PassedOver,
    pub warnings: Vec<Warning>,
    /// What embedding did, when a model was configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<embed::EmbedReport>,
    pub duration_ms: u64,
}

impl IngestReport {
    /// True when some path could not be read, so deletions under it were held back.
    pub fn held_back(&self) -> bool {
        self.warnings
            .iter()
            .any(|warning| warning.kind == WarningKind::Unreadable)
    }
}

/// Ingests `roots` into an open store.
pub fn ingest(
    store: &mut Store,
    roots: &[PathBuf],
    config: &IngestConfig,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    let dir = store.paths().dir.clone();
    Walks::start(&dir, roots, config)
        .and_then(|walks| ingest_roots(store, walks, config, progress))
        .map_err(|err| err.in_store(&dir))
}

/// Ingests the roots of `walks` into the store they were started for, as it opened
/// (`open_walking`, with the same `config`).
pub fn ingest_walked(
    store: &mut Store,
    walks: Walks,
    config: &IngestConfig,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    let dir = store.paths().dir.clone();
    walks
        .check_store(&dir)
        .and_then(|()| ingest_roots(store, walks, config, progress))
        .map_err(|err| err.in_store(&dir))
}

fn ingest_roots(
    store: &mut Store,
    mut walks: Walks,
    config: &IngestConfig,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    let started = Instant::now();
    progress.phase("walk", 0);
    let plan_config = PlanConfig {
        rehash: config.rehash,
        allow_mass_delete: config.allow_mass_delete,
        max_file_size: config.max_file_size,
    };
    let roots = walks.roots().to_vec();
    let mut plans = Vec::with_capacity(roots.len());
    for root in &roots {
        plans.push(plan_root(
            store.ledger(),
            root,
            || walks.next(),
            &plan_config,
        )?);
    }
    // Every walk is taken: the thread is done.
    drop(walks);
    crash_point("ingest.after_plan");
    let total: u64 = plans.iter().map(|plan| plan.to_read.len() as u64).sum();
    config.interrupt.check(0, total)?;
    tracing::info!(
        roots = ?plans.iter().map(|plan| &plan.root_key).collect::<Vec<_>>(),
        to_read = plans.iter().map(|plan| plan.to_read.len()).sum::<usize>(),
        "ingest planned"
    );

    store.expect_to_read(plans.iter().map(|plan| plan.to_read.bytes()).sum())?;
    let run_id = uuid::Uuid::new_v4().to_string();
    let root_keys: Vec<String> = plans.iter().map(|plan| plan.root_key.clone()).collect();
    store.start_run(&run_id, &root_keys, clock::now_ms())?;
    let mut report = IngestReport {
        run_id,
        generation: 0,
        documents: DocumentCounts::default(),
        chunks: ChunkCounts::default(),
        skipped_by_extension: Default::default(),
        warnings: Vec::new(),
        embedding: None,
        duration_ms: 0,
    };
    progress.phase("read", total);
    let mut files_done = Files {
        done: 0,
        total,
        flushed: Instant::now(),
    };
    for plan in plans {
        let ran = run_root(store, plan, config, progress, &mut report, &mut files_done);
        if let Err(err) = ran {
            // Ended by a signal at a safe point: what the ledger has committed reaches the
            // index now rather than at the next run's catch-up.
            if matches!(err, Error::Interrupted { .. })
                && let Err(flush) = store.flush()
            {
                tracing::warn!(error = %flush, "could not commit the index after the interruption; the next run does");
            }
            return Err(err);
        }
    }
    // The index's commit and its merges are this run's work, in its duration: a merge left
    // running would land in the next run's.
    store.settle()?;
    // A run given no model embeds with the one the store's vectors came from, so a plain
    // `ingest` (cron, `--watch`, `serve --reindex`) never leaves new chunks without a vector.
    // The lexical part is committed by now: when that model cannot be found, the run fails
    // naming it, and nothing of the documents is lost.
    let model = match &config.embed {
        Some(model) => Some(model.clone()),
        None => match crate::store::recorded_model(store.ledger()) {
            Ok(recorded) => recorded.map(|(model, _)| model),
            Err(err) => {
                store.sync_vectors()?;
                return Err(err);
            }
        },
    };
    if let Some(model) = &model {
        report.embedding = Some(embed::embed_missing(
            store,
            model,
            &config.interrupt,
            progress,
        )?);
    } else {
        // Chunks this run added or removed change what the vector index must hold.
        store.sync_vectors()?;
    }
    crash_point("ingest.before_finish_run");
    let generation = store.ledger().generation()?;
    report.generation = generation.0;
    report.duration_ms = started.elapsed().as_millis() as u64;
    let report_json = serde_json::to_string(&report).unwrap_or_default();
    store.finish_run(
        &report.run_id,
        Generation(report.generation),
        &report_json,
        clock::now_ms(),
    )?;
    tracing::info!(
        generation = report.generation,
        chunks_added = report.chunks.added,
        chunks_removed = report.chunks.removed,
        chunks_reindexed = report.chunks.reindexed,
        warnings = report.warnings.len(),
        ms = report.duration_ms,
        "ingest finished"
    );
    Ok(report)
}

/// A batch's files read, each with its chunks when it is text (in the order of the files).
type Prepared = Vec<(ReadOutcome, Option<chunk::ChunkedDocument>)>;

/// A batch ready to commit: its files read and chunked, each document's text compressed as
/// the ledger stores it, and the dictionary it was compressed with.
struct PreparedBatch {
    files: Prepared,
    packed: Vec<Option<PackedTexts>>,
    dictionary: Option<Arc<Dictionary>>,
    /// While there is no dictionary: the text gathered to train one.
    samples: Samples,
}

/// Reads, hashes and chunks a batch's files in parallel. A file whose content is what the
/// ledger recorded for its path (touched, or read again by `--rehash`) is not chunked; any other
/// text is, even one whose document the ledger may already have (a copy): asking the ledger
/// would wait for the commit of the batch before.
///
/// The chunks' text is then compressed for the ledger here, on every core, rather than in the
/// batch's transaction on the one thread that commits: with the ledger's `dictionary`, or when
/// it has none yet, with one trained from `samples` (of the ledger and the batches before)
/// and this batch once together they are enough (the batch's transaction writes it to the
/// ledger).
fn prepare_batch(
    files: &[FileToRead],
    known: &KnownSources,
    root_dir: Option<std::os::fd::BorrowedFd<'_>>,
    config: &IngestConfig,
    progress: &dyn Progress,
    dictionary: Option<Arc<Dictionary>>,
    mut samples: Samples,
) -> PreparedBatch {
    let files = read_and_chunk(files, known, root_dir, config, progress);
    let dictionary = dictionary.or_else(|| {
        let texts: Vec<&str> = files
            .iter()
            .filter_map(|(_, chunked)| chunked.as_ref())
            .flat_map(|document| document.chunks.iter())
            .map(|chunk| chunk.text.as_str())
            .collect();
        // Trained from values spread over all of it; kept for the next batch while it is not
        // enough yet.
        let trained = Dictionary::train(samples.iter().chain(texts.iter().copied())).map(Arc::new);
        if trained.is_none() {
            samples.add(texts.iter().copied());
        }
        trained
    });
    if dictionary.is_some() {
        samples = Samples::default();
    }
    // A document that cannot be packed here (it never happens but for a compressor that
    // cannot start) is packed in the transaction, which reports the error.
    let packed = files
        .par_iter()
        .map_init(
            || Packer::new(dictionary.as_deref()).ok(),
            |packer, (_, chunked)| match (packer, chunked) {
                (Some(packer), Some(document)) => {
                    PackedTexts::of(&document.chunks, packer, dictionary.as_ref()).ok()
                }
                _ => None,
            },
        )
        .collect();
    PreparedBatch {
        files,
        packed,
        dictionary,
        samples,
    }
}

/// Reads, hashes and chunks a batch's files in parallel (`prepare_batch`).
fn read_and_chunk(
    files: &[FileToRead],
    known: &KnownSources,
    root_dir: Option<std::os::fd::BorrowedFd<'_>>,
    config: &IngestConfig,
    progress: &dyn Progress,
) -> Prepared {
    files
        .par_iter()
        .map(|file| {
            // The walk finds no file under a root it could not open; this only keeps the two
            // in step without a panic.
            let outcome = match root_dir {
                Some(dir) => read_file(dir, file, config.max_file_size),
                None => ReadOutcome::NotIndexed(Warning::unreadable(
                    &file.rel_path,
                    "the folder it is under could not be opened",
                )),
            };
            let chunked = match &outcome {
                ReadOutcome::Text { doc_hash, .. }
                    if known
                        .get(&file.rel_path)
                        .is_some_and(|record| record.doc_hash == *doc_hash) =>
                {
                    Ok(None)
                }
                ReadOutcome::Text { content, .. } => chunk_file(file, content, config).map(Some),
                ReadOutcome::NotIndexed(_) => Ok(None),
            };
            let (outcome, chunked) = match chunked {
                Ok(chunked) => (outcome, chunked),
                Err(warning) => (ReadOutcome::NotIndexed(warning), None),
            };
            progress.advance(1);
            (outcome, chunked)
        })
        .collect()
}

/// Extracts and chunks a file's content; a file that cannot be read as its format is a
/// warning naming it, and so is one that makes the chunker panic (a defect, but one file's
/// defect: the run goes on).
fn chunk_file(
    file: &FileToRead,
    content: &[u8],
    config: &IngestConfig,
) -> std::result::Result<chunk::ChunkedDocument, Warning> {
    let extracted = extract::extract(file.format, content, &config.extraction)
        .map_err(|why| Warning::skipped(&file.rel_path, why))?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        chunk::chunk_extracted(file.format, &extracted, &config.chunk)
    }))
    .map_err(|_| {
        Warning::skipped(
            &file.rel_path,
            "the chunker failed on it (a defect in groundidx: please report it); skipped",
        )
    })
}

/// Compares a prepared batch with the ledger and stages it (`Store::stage`); commits the index
/// when `INDEX_COMMIT_INTERVAL` has passed since it last did.
#[allow(
    clippy::too_many_arguments,
    reason = "the run's state a batch commits into, each part used as it is"
)]
fn commit_batch(
    store: &mut Store,
    known: &KnownSources,
    root_id: crate::ledger::RootId,
    batch_files: &[FileToRead],
    prepared: PreparedBatch,
    config: &IngestConfig,
    report: &mut IngestReport,
    files: &mut Files,
    renames: &mut Renames,
) -> Result<()> {
    config.interrupt.check(files.done, files.total)?;
    let mut batch = Batch::new(root_id);
    // Documents the ledger does not have yet, each once.
    let mut chunking: HashSet<DocHash> = HashSet::new();
    let PreparedBatch {
        files: read,
        packed,
        ..
    } = prepared;
    for ((file, (outcome, chunked)), packed) in batch_files.iter().zip(read).zip(packed) {
        let (doc_hash, stat, recorded_ns, content) = match outcome {
            ReadOutcome::Text {
                doc_hash,
                stat,
                recorded_ns,
                content,
            } => (doc_hash, stat, recorded_ns, content),
            ReadOutcome::NotIndexed(warning) => {
                report.documents.skipped += 1;
                report.warnings.push(warning);
                continue;
            }
        };
        // A document recorded by schema version 2 has no fields yet: it is chunked again
        // (the same chunks) for its front matter, and its source is written as an upsert.
        // One whose chunks an older groundidx made (an older recipe, or chunk IDs of normalised
        // text, whose stored text may be another whitespace variant) is chunked again and its
        // chunks replaced.
        let outdated = store
            .ledger()
            .chunks_outdated(&doc_hash, chunk::recipe_version(file.format))?;
        let chunk_again = outdated || store.ledger().lacks_fields(&doc_hash)?;
        match known.get(&file.rel_path) {
            Some(record) if record.doc_hash == doc_hash => {
                report.documents.unchanged += 1;
                if outdated {
                    report.documents.rechunked += 1;
                }
                if !chunk_again {
                    batch
                        .stat_updates
                        .push((file.rel_path.clone(), stat, recorded_ns));
                    continue;
                }
            }
            Some(_) => report.documents.changed += 1,
            None => {
                report.documents.added += 1;
                renames.added(&doc_hash);
            }
        }
        // Unchanged content was not chunked while it was read; a document without its fields
        // (a store of schema version 2) or with outdated chunks is chunked here, once.
        let (chunked, packed) = match chunked {
            None if chunk_again => match chunk_file(file, &content, config) {
                Ok(document) => (Some(document), None),
                Err(warning) => {
                    // Its source and chunks stay as they were recorded.
                    report.warnings.push(warning);
                    continue;
                }
            },
            chunked => (chunked, packed),
        };
        let document = match chunked {
            Some(document)
                if (chunk_again || !store.ledger().has_document(&doc_hash)?)
                    && chunking.insert(doc_hash) =>
            {
                report.warnings.extend(
                    document
                        .warnings
                        .iter()
                        .map(|message| Warning::skipped(&file.rel_path, message.clone())),
                );
                Some(NewDocument {
                    title: document.title,
                    tags: document.tags,
                    fields: document.fields,
                    chunks: document.chunks,
                    recipe_version: document.recipe_version,
                    packed,
                })
            }
            _ => None,
        };
        batch.upserts.push(SourceUpsert {
            path: file.rel_path.clone(),
            doc_hash,
            stat,
            recorded_ns,
            document,
        });
    }
    // The last safe point before this batch's commit: a signal during the reading and
    // chunking costs this batch, never a half-written one.
    config.interrupt.check(files.done, files.total)?;
    let outcome = store.stage(&batch)?;
    report.chunks.added += outcome.chunks_added;
    report.chunks.removed += outcome.chunks_removed;
    report.chunks.reindexed += outcome.chunks_reindexed;
    files.done += batch_files.len() as u64;
    if files.flushed.elapsed() >= INDEX_COMMIT_INTERVAL {
        store.flush()?;
        files.flushed = Instant::now();
    }
    crash_point("ingest.between_batches");
    Ok(())
}

/// The canonical form of a root folder, with an error that says what is wrong.
pub fn canonical_root(root: &Path) -> Result<PathBuf> {
    let canonical = root.canonicalize().map_err(|err| {
        Error::Usage(format!(
            "cannot ingest {}: {err}\nhint: pass a folder of documents (Markdown, text, MDX, reStructuredText, AsciiDoc, HTML, PDF or notebooks)",
            root.display()
        ))
    })?;
    if !canonical.is_dir() {
        return Err(Error::Usage(format!(
            "cannot ingest {}: not a folder\nhint: pass the folder that holds it",
            root.display()
        )));
    }
    Ok(canonical)
}

/// Files of a run read and committed so far, of all it plans to read, and when the index
/// last committed.
struct Files {
    done: u64,
    total: u64,
    flushed: Instant,
}

fn run_root(
    store: &mut Store,
    mut plan: RootPlan,
    config: &IngestConfig,
    progress: &dyn Progress,
    report: &mut IngestReport,
    files: &mut Files,
) -> Result<()> {
    let root_id = match plan.root_id {
        Some(id) => id,
        None => store.ensure_root(&plan.root_key)?,
    };
    report.documents.unchanged += plan.unchanged as u64;
    report.documents.skipped += plan.warnings.len() as u64;
    report.warnings.extend(plan.warnings.iter().cloned());
    report.skipped_by_extension.add(&plan.passed_over);
    let mut renames = Renames::new(&plan.to_delete, &plan.known);

    let root_dir = plan.root_dir.as_ref().map(|dir| dir.as_fd());
    // Each batch is taken off the plan (held compactly for the run) when it is read, and
    // dropped once committed.
    let mut to_read = std::mem::take(&mut plan.to_read);
    let mut batches = std::iter::from_fn(|| to_read.next_batch(config.batch_files));
    // A pipeline of two stages: while one batch is committed (the ledger transaction on this
    // thread, the indexing in Tantivy's threads), the next is read and chunked (rayon).
    let known = &plan.known;
    let prepare = |files: Vec<FileToRead>, dictionary, samples| {
        let prepared = prepare_batch(
            &files, known, root_dir, config, progress, dictionary, samples,
        );
        (files, prepared)
    };
    let first = batches.next();
    // The ledger's dictionary, or the one trained once the ledger's text and the run's is
    // enough.
    let (dictionary, samples) = match first.is_none() {
        true => (None, Samples::default()),
        false => match store.ledger().text_dictionary()? {
            Some(dictionary) => (Some(dictionary), Samples::default()),
            None => (None, store.ledger().text_samples()?),
        },
    };
    std::thread::scope(|scope| -> Result<()> {
        let mut ready = first.map(|files| prepare(files, dictionary, samples));
        while let Some((batch_files, prepared)) = ready.take() {
            // The next batch packs with the ledger's dictionary when it has one (another run
            // may have written it first), else with the one this batch trained, if any.
            let dictionary = match (store.ledger().text_dictionary()?, &prepared.dictionary) {
                (Some(held), Some(ours)) if held.as_ref() == ours.as_ref() => {
                    Some(Arc::clone(ours))
                }
                (Some(held), _) => Some(held),
                (None, ours) => ours.clone(),
            };
            let samples = match dictionary {
                Some(_) => Samples::default(),
                None => prepared.samples.clone(),
            };
            let next = batches
                .next()
                .map(|files| scope.spawn(move || prepare(files, dictionary, samples)));
            commit_batch(
                store,
                known,
                root_id,
                &batch_files,
                prepared,
                config,
                report,
                files,
                &mut renames,
            )?;
            drop(batch_files);
            ready = next.map(|handle| handle.join().expect("a batch's reading panicked"));
        }
        Ok(())
    })?;

    config.interrupt.check(files.done, files.total)?;

    progress.phase("delete", plan.to_delete.len() as u64);
    if !plan.to_delete.is_empty() {
        let mut batch = Batch::new(root_id);
        for path in &plan.to_delete {
            let Some(doc_hash) = plan.known.get(path).map(|record| record.doc_hash) else {
                continue;
            };
            if renames.moved(&doc_hash) {
                report.documents.renamed += 1;
                report.documents.added -= 1;
            } else {
                report.documents.removed += 1;
            }
            batch.deletes.push(path.clone());
        }
        let outcome = store.stage(&batch)?;
        report.chunks.added += outcome.chunks_added;
        report.chunks.removed += outcome.chunks_removed;
        report.chunks.reindexed += outcome.chunks_reindexed;
        progress.advance(plan.to_delete.len() as u64);
    }
    Ok(())
}

/// Tells renames from removals: a path deleted by a run whose content a new path of the same
/// run holds was moved. Only the contents of the paths to delete are followed, so a cold
/// ingest keeps nothing here for each file it adds.
struct Renames {
    /// For the content of each path to delete, how many new paths of the run hold it and are
    /// not yet matched with a deleted one.
    added: HashMap<DocHash, u64>,
}

impl Renames {
    /// For a run that deletes `to_delete`, paths `known` holds.
    fn new(to_delete: &[String], known: &KnownSources) -> Renames {
        let added = to_delete
            .iter()
            .filter_map(|path| known.get(path))
            .map(|record| (record.doc_hash, 0))
            .collect();
        Renames { added }
    }

    /// A document added under a path the ledger did not know.
    fn added(&mut self, doc_hash: &DocHash) {
        if let Some(count) = self.added.get_mut(doc_hash) {
            *count += 1;
        }
    }

    /// A path deleted whose content was `doc_hash`: true when a new path of the run took that
    /// content, once for each such path.
    fn moved(&mut self, doc_hash: &DocHash) -> bool {
        match self.added.get_mut(doc_hash) {
            Some(count) if *count > 0 => {
                *count -= 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{KnownSources, Renames};
    use crate::ids::DocHash;
    use crate::ledger::SourceRecord;
    use crate::stat::FileStat;

    const STAT: FileStat = FileStat {
        size: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        inode: 0,
    };

    fn hash(byte: u8) -> DocHash {
        DocHash::from_slice(&[byte; 32]).expect("32 bytes")
    }

    #[test]
    fn each_deleted_path_is_a_rename_at_most_once_per_new_path() {
        let record = |byte| SourceRecord {
            doc_hash: hash(byte),
            stat: STAT,
            recorded_ns: 0,
            recipe_version: 1,
        };
        // Two paths held content 1 and one held content 2; all three are gone.
        let known = KnownSources::new(vec![
            ("a.md".into(), record(1)),
            ("b.md".into(), record(1)),
            ("c.md".into(), record(2)),
            ("kept.md".into(), record(3)),
        ]);
        let to_delete = ["a.md", "b.md", "c.md"].map(String::from);
        let mut renames = Renames::new(&to_delete, &known);
        // One new path holds content 1, and others hold contents no deleted path held.
        renames.added(&hash(1));
        renames.added(&hash(3));
        renames.added(&hash(4));
        assert!(renames.moved(&hash(1)));
        assert!(!renames.moved(&hash(1)), "one new path, one rename");
        assert!(!renames.moved(&hash(2)));
        // Only the contents of deleted paths are followed.
        assert_eq!(renames.added.len(), 2);
    }
}
