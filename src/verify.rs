//! Verify: does the index hold exactly the ledger's chunks, each once, and does each chunk's
//! text still hash to its ID?
//!
//! It compares the two sets of chunk IDs and reports every difference. When the index is behind
//! the ledger it also says whether a replay of the logged generations would explain (and heal)
//! every difference, so a lag is not mistaken for corruption. It recomputes every ledger
//! chunk's ID from its stored heading path and text (`ids::check_chunk_id`): the ID names the
//! exact text, so a chunk whose text was altered, or one made by an older groundidx (whose text
//! may be another whitespace variant of what the files hold), is reported. The index stores no
//! text (hits are read from the ledger), so this covers every byte served. It reads no document
//! file and writes nothing.

use std::collections::HashSet;

use serde::Serialize;

use crate::error::Result;
use crate::ids::{self, ChunkId, ChunkIdCheck, Generation};
use crate::store::StoreReader;

/// What `verify` compared and found: the `verify --json` contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub ledger_generation: u64,
    pub index_generation: u64,
    pub ledger_chunks: u64,
    pub index_chunks: u64,
    /// In the ledger, not in the index.
    pub missing_from_index: Vec<String>,
    /// In the index, not in the ledger.
    pub extra_in_index: Vec<String>,
    /// In the index more than once.
    pub duplicated_in_index: Vec<String>,
    /// Ledger chunks whose stored heading path and text do not hash to their ID, or cannot be
    /// read at all (a damaged compressed value): what would be served is not the passage the
    /// ID names.
    pub altered_in_ledger: Vec<String>,
    /// Entries of documents' chunk lists that name a document or chunk the ledger lacks, or
    /// that are missing (a list shorter than its document's chunk count): damage no writer
    /// leaves (a row deleted by hand), which `rebuild` cannot mend.
    pub broken_links_in_ledger: u64,
    /// Ledger chunks no document references: damage too (a writer removes a chunk with the
    /// last document that holds it).
    pub unreferenced_in_ledger: Vec<String>,
    /// Ledger chunks an older groundidx made (IDs of whitespace-folded text, so the text served
    /// may be another whitespace variant than the files hold): the next ingest of their folders
    /// chunks their documents again.
    pub outdated_in_ledger: u64,
    /// The index or the vector index is behind and every difference is one the next writer
    /// heals (a replay of the log, the vector index made again).
    pub lag_only: bool,
    /// Ledger and index hold exactly the same chunk IDs, each once, every chunk's text hashes to
    /// its ID (and the vector index, when the store has one, holds exactly the ledger's vectors
    /// of the active model).
    pub identical: bool,
    /// The vector index against the ledger's vectors; absent when no model is active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vectors: Option<VectorCheck>,
}

/// A replica compared with the shared ledger it copies (`verify --ledger`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicaCheck {
    /// The shared ledger's generation and log position, read after the replica's.
    pub ledger_generation: u64,
    pub ledger_log_seq: u64,
    /// The replica's position in the shared log.
    pub replica_log_seq: u64,
    /// In the shared ledger, not in the replica.
    pub missing_from_replica: Vec<String>,
    /// In the replica, not in the shared ledger.
    pub extra_in_replica: Vec<String>,
    /// The replica is behind and the shared log since its position names every difference: the
    /// next sync heals it.
    pub lag_only: bool,
    pub identical: bool,
}

/// Compares the replica of `reader`'s store with the shared ledger: the replica's chunk IDs
/// first (one read transaction), then the shared ledger's (one snapshot, read second so it can
/// only be ahead), so a concurrent publish reads as a lag.
pub fn verify_replica(
    reader: &StoreReader,
    shared: &crate::ledger::postgres::PgLedger,
) -> Result<ReplicaCheck> {
    let ledger = reader.ledger()?;
    let (replica_ids, state) =
        ledger.read_snapshot(|ledger| Ok((ledger.chunk_ids()?, ledger.replica_state()?)))?;
    let Some(state) = state else {
        return Err(crate::error::Error::Usage(format!(
            "the store at {} is not a replica of a shared ledger\nhint: leave --ledger out to verify it alone, or `groundidx --ledger … sync` into a new --store",
            reader.paths().dir.display()
        )));
    };
    let (shared_ids, changed, meta) = shared.chunk_ids_since(state.log_seq)?;
    if meta.ledger_id != state.ledger_id {
        return Err(crate::error::Error::Usage(format!(
            "the store at {} copies another shared ledger ({}), not {}\nhint: its next sync makes it again from this one",
            reader.paths().dir.display(),
            state.ledger_id,
            shared.describe()
        )));
    }
    let replica: HashSet<ChunkId> = replica_ids.into_iter().collect();
    let theirs: HashSet<ChunkId> = shared_ids.into_iter().collect();
    let changed: HashSet<ChunkId> = changed.into_iter().collect();
    let mut missing: Vec<ChunkId> = theirs.difference(&replica).copied().collect();
    let mut extra: Vec<ChunkId> = replica.difference(&theirs).copied().collect();
    missing.sort();
    extra.sort();
    let identical = missing.is_empty() && extra.is_empty();
    let floor_ok = state.log_seq >= meta.log_floor_seq;
    let lag_only = !identical
        && floor_ok
        && missing
            .iter()
            .chain(extra.iter())
            .all(|id| changed.contains(id));
    Ok(ReplicaCheck {
        ledger_generation: meta.generation,
        ledger_log_seq: meta.log_seq,
        replica_log_seq: state.log_seq,
        missing_from_replica: missing.iter().map(ToString::to_string).collect(),
        extra_in_replica: extra.iter().map(ToString::to_string).collect(),
        lag_only,
        identical,
    })
}

/// The vector index compared with the ledger's vectors of the active model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VectorCheck {
    /// The active model's fingerprint.
    pub model: String,
    /// Chunks the ledger holds with a vector under the active model.
    pub ledger_vectors: u64,
    /// Rows of the vector index.
    pub index_vectors: u64,
    /// Why the vector index cannot be read or belongs to another model, when so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    pub missing_from_index: Vec<String>,
    pub extra_in_index: Vec<String>,
    pub duplicated_in_index: Vec<String>,
    /// The vector index was made at an earlier state of the ledger (the next writer makes it
    /// again), and nothing else is wrong.
    pub lag_only: bool,
    pub identical: bool,
}

/// What the ledger held in one snapshot: its generation, its chunks, and how far its log
/// reaches back and what it names since the index's generation.
struct LedgerSnapshot {
    generation: Generation,
    ids: Vec<String>,
    log_floor: Generation,
    logged_since_index: HashSet<String>,
    altered: Vec<String>,
    outdated: u64,
    broken_links: u64,
    unreferenced: Vec<String>,
}

/// Every chunk's ID recomputed from its stored heading path and text (in the caller's read
/// transaction, with its chunk IDs): the sorted hex IDs, the altered ones and how many are
/// outdated.
fn recompute_ids(ledger: &crate::ledger::Ledger) -> Result<(Vec<String>, Vec<String>, u64)> {
    let mut ids = Vec::new();
    let mut altered = Vec::new();
    let mut outdated = 0;
    ledger.for_each_stored_chunk(|id, chunk| {
        let hex = id.to_hex();
        // Stored text that cannot be read (damaged, or its dictionary gone) is altered too.
        let check = match chunk {
            Some(chunk) => ids::check_chunk_id(&chunk.id, &chunk.heading_path, &chunk.text),
            None => ChunkIdCheck::Mismatch,
        };
        match check {
            ChunkIdCheck::Current => {}
            ChunkIdCheck::Outdated => outdated += 1,
            ChunkIdCheck::Mismatch => altered.push(hex.clone()),
        }
        ids.push(hex);
        Ok(())
    })?;
    Ok((ids, altered, outdated))
}

/// Compares ledger and index.
///
/// The index is read first (its generation and chunk IDs from one commit), then the ledger in
/// one read transaction, again until the index has not moved meanwhile. A commit landing in
/// between can only put the ledger *ahead*, which the log explains (`lag_only`); reading the
/// ledger's generation and chunks apart, or the ledger before the index, could report a
/// difference that is not there.
pub fn verify(reader: &StoreReader) -> Result<VerifyReport> {
    // A writer prunes the log of a generation once the index has it: had the index moved on
    // while the ledger was read, the log that explains the lag could be gone. Read again until
    // the index stood still across the ledger's snapshot (a writer commits a few times a
    // second at most, so this ends).
    let (index_generation, index_ids, ledger) = loop {
        // One snapshot for the IDs and their generation, so the two describe the same commit.
        reader.index().reload()?;
        let snapshot = reader.index().snapshot();
        let (index_generation, index_ids) = (snapshot.generation(), snapshot.chunk_ids()?);
        let ledger = reader.ledger()?.read_snapshot(|ledger| {
            let (ids, altered, outdated) = recompute_ids(ledger)?;
            let (broken_links, unreferenced) = ledger.link_damage()?;
            Ok(LedgerSnapshot {
                broken_links,
                unreferenced: unreferenced.iter().map(ChunkId::to_hex).collect(),
                generation: ledger.generation()?,
                ids,
                altered,
                outdated,
                log_floor: ledger.log_floor()?,
                logged_since_index: ledger
                    .changed_since(index_generation)?
                    .iter()
                    .map(ChunkId::to_hex)
                    .collect(),
            })
        })?;
        if reader.index().generation()? == index_generation {
            break (index_generation, index_ids, ledger);
        }
    };
    let ledger_generation = ledger.generation;
    let ledger_ids = ledger.ids;

    let mut duplicated: Vec<String> = index_ids
        .windows(2)
        .filter(|pair| pair[0] == pair[1])
        .map(|pair| pair[0].clone())
        .collect();
    duplicated.dedup();
    let ledger_set: HashSet<&str> = ledger_ids.iter().map(String::as_str).collect();
    let index_set: HashSet<&str> = index_ids.iter().map(String::as_str).collect();
    let missing: Vec<String> = ledger_ids
        .iter()
        .filter(|id| !index_set.contains(id.as_str()))
        .cloned()
        .collect();
    let mut extra: Vec<String> = index_ids
        .iter()
        .filter(|id| !ledger_set.contains(id.as_str()))
        .cloned()
        .collect();
    extra.dedup();

    // The ledger as its own writer leaves it: every text hashes to its ID, every link holds.
    let ledger_sound = ledger.altered.is_empty()
        && ledger.outdated == 0
        && ledger.broken_links == 0
        && ledger.unreferenced.is_empty();
    let index_identical = missing.is_empty() && extra.is_empty() && duplicated.is_empty();
    let index_lags = !index_identical
        && index_generation < ledger_generation
        && index_generation >= ledger.log_floor
        && duplicated.is_empty()
        && missing
            .iter()
            .chain(&extra)
            .all(|id| ledger.logged_since_index.contains(id));
    let vectors = verify_vectors(reader)?;
    let vectors_identical = vectors.as_ref().is_none_or(|v| v.identical);
    let vectors_lag = vectors.as_ref().is_some_and(|v| v.lag_only);
    let identical = index_identical && vectors_identical && ledger_sound;
    // A chunk whose text does not hash to its ID is no lag: no writer's replay changes it.
    let lag_only = !identical
        && ledger_sound
        && (index_identical || index_lags)
        && (vectors_identical || vectors_lag);
    Ok(VerifyReport {
        vectors,
        ledger_generation: ledger_generation.0,
        index_generation: index_generation.0,
        ledger_chunks: ledger_ids.len() as u64,
        index_chunks: index_ids.len() as u64,
        missing_from_index: missing,
        extra_in_index: extra,
        duplicated_in_index: duplicated,
        altered_in_ledger: ledger.altered,
        broken_links_in_ledger: ledger.broken_links,
        unreferenced_in_ledger: ledger.unreferenced,
        outdated_in_ledger: ledger.outdated,
        lag_only,
        identical,
    })
}

/// Compares the vector index file with the ledger's vectors of the active model. The file is
/// read first, then the ledger in one read transaction: a writer in between can only leave the
/// file's marker behind the ledger's, which reads as a lag.
fn verify_vectors(reader: &StoreReader) -> Result<Option<VectorCheck>> {
    let path = crate::vectors::path(&reader.paths().dir);
    let file = crate::vectors::VectorSet::read_rows(&path);
    let found = ledger_vectors(reader)?;
    let Some((wanted, dims, ledger_ids, damaged)) = found else {
        return Ok(None);
    };
    let mut check = VectorCheck {
        model: wanted.fingerprint.to_hex(),
        ledger_vectors: ledger_ids.len() as u64,
        index_vectors: 0,
        problem: None,
        missing_from_index: Vec::new(),
        extra_in_index: Vec::new(),
        duplicated_in_index: Vec::new(),
        lag_only: false,
        identical: false,
    };
    if !damaged.is_empty() {
        check.problem = Some(damaged_problem(&damaged, dims));
        return Ok(Some(check));
    }
    let set = match file {
        Ok(Some(set)) => set,
        Ok(None) => {
            check.problem = Some(format!(
                "{} is missing\nhint: the next ingest makes it again, or run `groundidx rebuild`",
                path.display()
            ));
            // A writer that failed before making it (a full disk during the first embedding)
            // leaves this; the next writer makes it from the ledger's vectors.
            check.lag_only = true;
            return Ok(Some(check));
        }
        Err(err) => {
            check.problem = Some(format!("{err}"));
            return Ok(Some(check));
        }
    };
    check.index_vectors = set.len() as u64;
    if set.marker.fingerprint != wanted.fingerprint {
        check.problem = Some(format!(
            "{} holds the vectors of model {}, not of the active model\nhint: run `groundidx rebuild`",
            path.display(),
            &set.marker.fingerprint.to_hex()[..12]
        ));
        check.lag_only = true;
        return Ok(Some(check));
    }
    compare_ids(&mut check, &ledger_ids, set.ids());
    check.lag_only =
        !check.identical && set.marker != wanted && check.duplicated_in_index.is_empty();
    Ok(Some(check))
}

/// The ledger's side of the vector check, in one snapshot: the marker the vector index must
/// carry, the dimensions, the chunks with a vector of the active model, and those damaged.
/// `None` when no model is active.
#[allow(
    clippy::type_complexity,
    reason = "one snapshot's four readings, unpacked at once"
)]
fn ledger_vectors(
    reader: &StoreReader,
) -> Result<Option<(crate::vectors::Marker, usize, Vec<ChunkId>, Vec<ChunkId>)>> {
    let ledger = reader.ledger()?;
    ledger.read_snapshot(|ledger| {
        let Some(model) = ledger.active_model()? else {
            return Ok(None);
        };
        let mut ids = Vec::new();
        ledger.for_each_vector(&model.fingerprint, |id, _| {
            ids.push(id);
            Ok(())
        })?;
        let damaged = ledger.damaged_vectors(&model.fingerprint, model.dims)?;
        let marker = crate::vectors::Marker {
            fingerprint: model.fingerprint,
            generation: ledger.generation()?,
            vector_seq: ledger.vector_seq()?,
        };
        Ok(Some((marker, model.dims, ids, damaged)))
    })
}

/// What `verify` says of the ledger's damaged vectors: up to ten of them by chunk, and the fix.
fn damaged_problem(damaged: &[ChunkId], dims: usize) -> String {
    let named: Vec<String> = damaged.iter().take(10).map(ChunkId::to_hex).collect();
    format!(
        "the ledger's vectors of {} chunk(s) are not {dims} numbers (damaged): {}{}\nhint: run `groundidx rebuild` (in a store of its own it removes them and the next ingest with the model embeds them again; a replica's are the shared ledger's copy: remove its store folder and run `groundidx sync`)",
        damaged.len(),
        named.join(", "),
        if damaged.len() > named.len() {
            ", …"
        } else {
            ""
        }
    )
}

/// Compares the chunks with a vector in the ledger and in the vector index: missing, extra and
/// duplicated ones, and whether they are identical.
fn compare_ids(check: &mut VectorCheck, ledger_ids: &[ChunkId], index_ids: &[ChunkId]) {
    let mut duplicated: Vec<String> = index_ids
        .windows(2)
        .filter(|pair| pair[0] == pair[1])
        .map(|pair| pair[0].to_hex())
        .collect();
    duplicated.dedup();
    let ledger_set: HashSet<&ChunkId> = ledger_ids.iter().collect();
    let index_set: HashSet<&ChunkId> = index_ids.iter().collect();
    check.missing_from_index = ledger_ids
        .iter()
        .filter(|id| !index_set.contains(id))
        .map(ChunkId::to_hex)
        .collect();
    check.extra_in_index = index_ids
        .iter()
        .filter(|id| !ledger_set.contains(id))
        .map(ChunkId::to_hex)
        .collect();
    check.extra_in_index.dedup();
    check.duplicated_in_index = duplicated;
    check.identical = check.missing_from_index.is_empty()
        && check.extra_in_index.is_empty()
        && check.duplicated_in_index.is_empty();
}
