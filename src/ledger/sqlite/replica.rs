//! The SQLite side of change sets (`ledger::changes`): collecting the rows a batch changed, and
//! applying a change set, a range of the shared log or a whole snapshot, to a replica.
//!
//! With a shared ledger every host's store is a replica of it. A writer applies a batch to its
//! replica as on a store of its own (`apply_batch`), collects the rows the batch changed into a
//! `ChangeSet` inside the same transaction, and publishes it to the shared ledger before that
//! transaction commits; a host that did not write pulls the same kind of change set from the
//! shared ledger's log (`apply_changes`). Both sides apply a change set by the same rules:
//!
//! - each logged chunk the change set holds is written, where the ledger lacks it (first, so
//!   that a document's chunk list can name the chunks' rows);
//! - each named source is set to the document it names, or deleted;
//! - each named document is written whole (row, tags, chunk list);
//! - a document no source holds any more after that is released;
//! - each other logged chunk is deleted when no document references it;
//! - the log rows are appended and the generation set.
//!
//! Rows are copied, never derived, so applying a change set twice leaves the same ledger.

use std::collections::{BTreeSet, HashMap};

use rusqlite::{OptionalExtension, Transaction, params};

use super::texts::{TextWriter, Texts};
use super::{Ledger, chunk_id_column, doc_hash_column, sql_error};
use crate::error::{Error, Result};
use crate::ids::{ChunkId, DocHash, Generation};
use crate::ledger::{
    ChangeSet, ChunkRow, DocChunkRow, DocumentRow, LogRow, ModelRecord, ReplicaBinding,
    ReplicaState, RunRow, SourceRow, VectorChanges,
};

impl Ledger {
    /// The shared ledger this ledger copies, if it is a replica.
    pub(crate) fn replica_state(&self) -> Result<Option<ReplicaState>> {
        self.conn
            .query_row(
                "SELECT ledger_id, log_seq,
                        coalesce((SELECT value FROM meta WHERE name = 'vector_seq'), 0), log_token
                 FROM replica WHERE id = 1",
                [],
                |row| {
                    Ok(ReplicaState {
                        ledger_id: row.get(0)?,
                        log_seq: row.get::<_, i64>(1)? as u64,
                        vector_seq: row.get::<_, i64>(2)? as u64,
                        log_token: row.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(sql_error("read replica state"))
    }

    /// Where this replica last found its shared ledger; `None` when it is no replica or has not
    /// recorded it (a replica made before schema version 6, until its next sync).
    pub(crate) fn replica_binding(&self) -> Result<Option<ReplicaBinding>> {
        let binding = self
            .conn
            .query_row(
                "SELECT ledger_url, ledger_schema FROM replica WHERE id = 1",
                [],
                |row| {
                    Ok(ReplicaBinding {
                        url: row.get(0)?,
                        schema: row.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(sql_error("read the replica's shared ledger"))?;
        Ok(binding.filter(|binding| !binding.schema.is_empty()))
    }

    /// Records where this replica found its shared ledger.
    pub(crate) fn set_replica_binding(&mut self, binding: &ReplicaBinding) -> Result<()> {
        self.conn
            .execute(
                "UPDATE replica SET ledger_url = ?1, ledger_schema = ?2 WHERE id = 1",
                params![binding.url, binding.schema],
            )
            .map(drop)
            .map_err(sql_error("record the replica's shared ledger"))
    }

    /// True when the ledger holds no source, document or chunk (a new store).
    pub fn is_empty(&self) -> Result<bool> {
        self.conn
            .query_row(
                "SELECT NOT EXISTS (SELECT 1 FROM sources) AND NOT EXISTS (SELECT 1 FROM chunks)
                   AND NOT EXISTS (SELECT 1 FROM runs)",
                [],
                |row| row.get(0),
            )
            .map_err(sql_error("read ledger"))
    }

    /// Applies a change set pulled from the shared ledger in one transaction, and records the
    /// shared ledger's position it reaches. Applying it twice changes nothing more.
    pub(crate) fn apply_changes(
        &mut self,
        changes: &ChangeSet,
        vectors: &VectorChanges,
        state: &ReplicaState,
        last_run: Option<&RunRow>,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql_error("begin applying shared changes"))?;
        apply(&tx, changes)?;
        write_vectors(&tx, vectors)?;
        drop_unlisted_models(&tx, &vectors.models)?;
        for row in &changes.log {
            tx.prepare_cached(
                "INSERT INTO chunk_log (generation, op, chunk_id) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    row.generation.0 as i64,
                    row.op,
                    row.chunk_id.as_bytes()
                ])
            })
            .map_err(sql_error("write chunk log"))?;
        }
        if let Some(run) = last_run {
            write_run(&tx, run)?;
        }
        set_position(&tx, changes.generation, state)?;
        crate::crash::crash_point("replica.before_commit");
        tx.commit()
            .map_err(sql_error("commit shared changes to the replica"))
    }

    /// Replaces the whole content of the ledger by a snapshot of the shared ledger (a new
    /// replica, or one that fell behind the shared log), keeping the stat cache of every path
    /// whose document is unchanged. The log is emptied and its floor set to the snapshot's
    /// generation, so the index is made again from the ledger.
    pub(crate) fn replace_with(
        &mut self,
        snapshot: &ChangeSet,
        vectors: &VectorChanges,
        state: &ReplicaState,
        last_run: Option<&RunRow>,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql_error("begin replacing the replica"))?;
        for sql in [
            "DELETE FROM doc_chunk_links",
            "DELETE FROM doc_tags",
            "DELETE FROM documents",
            "DELETE FROM chunks",
            "DELETE FROM chunk_log",
            "DELETE FROM vectors",
            "DELETE FROM embedding_models",
        ] {
            tx.execute(sql, [])
                .map_err(sql_error("empty the replica"))?;
        }
        // Sources stay (with their stats) while the snapshot's are written: a path whose
        // document is unchanged keeps its stat; the rest are removed below.
        let wanted: BTreeSet<(String, String)> = snapshot
            .sources
            .iter()
            .map(|s| (s.root.clone(), s.path.clone()))
            .collect();
        let existing: Vec<(String, String)> = {
            let mut stmt = tx
                .prepare("SELECT r.path, s.path FROM sources s JOIN roots r USING (root_id)")
                .map_err(sql_error("read sources"))?;
            stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
                .and_then(|rows| rows.collect())
                .map_err(sql_error("read sources"))?
        };
        for (root, path) in existing {
            if !wanted.contains(&(root.clone(), path.clone())) {
                let root_id = root_id(&tx, &root)?;
                tx.execute(
                    "DELETE FROM sources WHERE root_id = ?1 AND path = ?2",
                    params![root_id, path],
                )
                .map_err(sql_error("delete source"))?;
            }
        }
        apply(&tx, snapshot)?;
        write_vectors(&tx, vectors)?;
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE name = 'log_floor'",
            [snapshot.generation.0 as i64],
        )
        .map_err(sql_error("set the log floor"))?;
        if let Some(run) = last_run {
            write_run(&tx, run)?;
        }
        set_position(&tx, snapshot.generation, state)?;
        crate::crash::crash_point("bootstrap.before_commit");
        tx.commit().map_err(sql_error("commit the replica"))
    }

    /// An embedding model's row, whole, for a writer to publish.
    pub(crate) fn model_record(&self, fingerprint: &[u8]) -> Result<Option<ModelRecord>> {
        self.conn
            .query_row(
                "SELECT fingerprint, description, dims, first_seen, active_since, complete_at
                 FROM embedding_models WHERE fingerprint = ?1",
                [fingerprint],
                |row| {
                    Ok(ModelRecord {
                        fingerprint: row.get(0)?,
                        description: row.get(1)?,
                        dims: row.get(2)?,
                        first_seen: row.get(3)?,
                        active_since: row.get(4)?,
                        complete_at: row.get(5)?,
                    })
                },
            )
            .optional()
            .map_err(sql_error("read embedding models"))
    }
}

/// The change set of the batch just applied in `tx`: the rows of `paths` under `root`, of the
/// documents they hold now, and of the chunks `tx` logged at `generation`.
pub(crate) fn collect_batch(
    tx: &Transaction<'_>,
    texts: &Texts,
    root: &str,
    paths: &BTreeSet<String>,
    generation: Generation,
    logged: bool,
) -> Result<ChangeSet> {
    let root_id = root_id(tx, root)?;
    let mut changes = ChangeSet {
        generation,
        ..ChangeSet::default()
    };
    let mut docs = BTreeSet::new();
    for path in paths {
        let doc_hash: Option<DocHash> = tx
            .prepare_cached("SELECT doc_hash FROM sources WHERE root_id = ?1 AND path = ?2")
            .and_then(|mut stmt| {
                stmt.query_row(params![root_id, path], |row| doc_hash_column(row, 0))
                    .optional()
            })
            .map_err(sql_error("read source"))?;
        docs.extend(doc_hash);
        changes.sources.push(SourceRow {
            root: root.to_string(),
            path: path.clone(),
            doc_hash,
        });
    }
    for doc_hash in docs {
        if let Some(document) = read_document(tx, &doc_hash)? {
            changes.documents.push(document);
        }
    }
    if logged {
        let mut stmt = tx
            .prepare_cached("SELECT op, chunk_id FROM chunk_log WHERE generation = ?1")
            .map_err(sql_error("read chunk log"))?;
        changes.log = stmt
            .query_map([generation.0 as i64], |row| {
                Ok(LogRow {
                    generation,
                    op: row.get(0)?,
                    chunk_id: chunk_id_column(row, 1)?,
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(sql_error("read chunk log"))?;
        let ids: BTreeSet<ChunkId> = changes.log.iter().map(|row| row.chunk_id).collect();
        for id in ids {
            if let Some(chunk) = read_chunk(tx, texts, &id)? {
                changes.chunks.push(chunk);
            }
        }
    }
    Ok(changes)
}

fn read_document(tx: &Transaction<'_>, doc_hash: &DocHash) -> Result<Option<DocumentRow>> {
    let context = || format!("read document {doc_hash}");
    let Some((title, n_chunks, fields, recipe_version)) = tx
        .prepare_cached(
            "SELECT title, n_chunks, fields, recipe_version FROM documents WHERE doc_hash = ?1",
        )
        .and_then(|mut stmt| {
            stmt.query_row([doc_hash.as_bytes()], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()
        })
        .map_err(sql_error(context()))?
    else {
        return Ok(None);
    };
    let tags = tx
        .prepare_cached("SELECT tag FROM doc_tags WHERE doc_hash = ?1 ORDER BY tag")
        .and_then(|mut stmt| {
            stmt.query_map([doc_hash.as_bytes()], |row| row.get(0))
                .and_then(|rows| rows.collect())
        })
        .map_err(sql_error(context()))?;
    let chunks = tx
        .prepare_cached(
            "SELECT ordinal, chunk_id, line_start, line_end, page_start, page_end FROM doc_chunks
             WHERE doc_hash = ?1 ORDER BY ordinal",
        )
        .and_then(|mut stmt| {
            stmt.query_map([doc_hash.as_bytes()], |row| {
                Ok(DocChunkRow {
                    ordinal: row.get(0)?,
                    chunk_id: chunk_id_column(row, 1)?,
                    line_start: row.get(2)?,
                    line_end: row.get(3)?,
                    page_start: row.get(4)?,
                    page_end: row.get(5)?,
                })
            })
            .and_then(|rows| rows.collect())
        })
        .map_err(sql_error(context()))?;
    Ok(Some(DocumentRow {
        doc_hash: *doc_hash,
        title,
        n_chunks,
        fields,
        recipe_version,
        tags,
        chunks,
    }))
}

fn read_chunk(tx: &Transaction<'_>, texts: &Texts, id: &ChunkId) -> Result<Option<ChunkRow>> {
    tx.prepare_cached("SELECT heading, text FROM chunks WHERE chunk_id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([id.as_bytes()], |row| {
                Ok(ChunkRow {
                    chunk_id: *id,
                    heading: texts.column(tx, row, 0)?,
                    text: texts.column(tx, row, 1)?,
                })
            })
            .optional()
        })
        .map_err(sql_error(format!("read chunk {id}")))
}

fn root_id(tx: &Transaction<'_>, root: &str) -> Result<i64> {
    tx.execute("INSERT OR IGNORE INTO roots (path) VALUES (?1)", [root])
        .map_err(sql_error("add root"))?;
    tx.query_row("SELECT root_id FROM roots WHERE path = ?1", [root], |row| {
        row.get(0)
    })
    .map_err(sql_error("read roots"))
}

/// The module's rules, in SQLite (the log rows are the caller's).
/// The chunks come first, so that a document's links can name their rows, and the chunks no
/// document references any more go last.
fn apply(tx: &Transaction<'_>, changes: &ChangeSet) -> Result<()> {
    write_chunks(tx, changes)?;
    let old_docs = apply_sources(tx, changes)?;
    for document in &changes.documents {
        write_document(tx, document, changes.generation)?;
    }
    release_documents(tx, old_docs)?;
    delete_unreferenced_chunks(tx, changes)
}

/// Sets each named source to the document it names, or deletes it; returns the documents the
/// sources held before, which may now be held by none.
fn apply_sources(tx: &Transaction<'_>, changes: &ChangeSet) -> Result<BTreeSet<DocHash>> {
    let mut roots: HashMap<String, i64> = HashMap::new();
    let mut old_docs: BTreeSet<DocHash> = BTreeSet::new();
    for source in &changes.sources {
        let root_id = match roots.get(&source.root) {
            Some(id) => *id,
            None => {
                let id = root_id(tx, &source.root)?;
                roots.insert(source.root.clone(), id);
                id
            }
        };
        let old: Option<DocHash> = tx
            .prepare_cached("SELECT doc_hash FROM sources WHERE root_id = ?1 AND path = ?2")
            .and_then(|mut stmt| {
                stmt.query_row(params![root_id, source.path], |row| doc_hash_column(row, 0))
                    .optional()
            })
            .map_err(sql_error("read source"))?;
        match (old, source.doc_hash) {
            (Some(old), Some(new)) if old == new => {}
            (_, Some(new)) => {
                // A replica's stat for another document would be wrong: zero matches no file,
                // so this host reads the file once if it ever ingests it.
                tx.prepare_cached(
                    "INSERT INTO sources
                       (root_id, path, doc_hash, size, mtime_ns, ctime_ns, inode, recorded_ns,
                        since_generation)
                     VALUES (?1, ?2, ?3, 0, 0, 0, 0, 0, ?4)
                     ON CONFLICT (root_id, path) DO UPDATE SET doc_hash = excluded.doc_hash,
                       size = 0, mtime_ns = 0, ctime_ns = 0, inode = 0, recorded_ns = 0,
                       since_generation = excluded.since_generation",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        root_id,
                        source.path,
                        new.as_bytes(),
                        changes.generation.0 as i64
                    ])
                })
                .map_err(sql_error(format!("write source {}", source.path)))?;
            }
            (_, None) => {
                tx.prepare_cached("DELETE FROM sources WHERE root_id = ?1 AND path = ?2")
                    .and_then(|mut stmt| stmt.execute(params![root_id, source.path]))
                    .map_err(sql_error(format!("delete source {}", source.path)))?;
            }
        }
        old_docs.extend(old.filter(|old| Some(*old) != source.doc_hash));
    }
    Ok(old_docs)
}

/// Releases each of `old_docs` that no source holds any more (its chunk list, tags and row).
fn release_documents(tx: &Transaction<'_>, old_docs: BTreeSet<DocHash>) -> Result<()> {
    for doc_hash in old_docs {
        let held = tx
            .prepare_cached("SELECT 1 FROM sources WHERE doc_hash = ?1")
            .and_then(|mut stmt| stmt.exists([doc_hash.as_bytes()]))
            .map_err(sql_error("read sources"))?;
        if !held {
            for sql in [
                "DELETE FROM doc_chunk_links
                 WHERE doc_row = (SELECT doc_row FROM documents WHERE doc_hash = ?1)",
                "DELETE FROM doc_tags WHERE doc_hash = ?1",
                "DELETE FROM documents WHERE doc_hash = ?1",
            ] {
                tx.prepare_cached(sql)
                    .and_then(|mut stmt| stmt.execute([doc_hash.as_bytes()]))
                    .map_err(sql_error(format!("release document {doc_hash}")))?;
            }
        }
    }
    Ok(())
}

/// Writes each logged chunk the change set holds, and every chunk of a snapshot (which has no
/// log rows), where the ledger lacks it.
fn write_chunks(tx: &Transaction<'_>, changes: &ChangeSet) -> Result<()> {
    let mut text_writer = TextWriter::for_transaction(
        tx,
        None,
        changes.chunks.iter().map(|chunk| chunk.text.as_str()),
    )?;
    let logged: BTreeSet<ChunkId> = changes.log.iter().map(|row| row.chunk_id).collect();
    // A snapshot carries every chunk without log rows.
    let snapshot = changes.log.is_empty();
    for chunk in &changes.chunks {
        if !snapshot && !logged.contains(&chunk.chunk_id) {
            continue;
        }
        let exists = tx
            .prepare_cached("SELECT 1 FROM chunks WHERE chunk_id = ?1")
            .and_then(|mut stmt| stmt.exists([chunk.chunk_id.as_bytes()]))
            .map_err(sql_error("read chunks"))?;
        if !exists {
            write_chunk(tx, &mut text_writer, chunk)?;
        }
    }
    Ok(())
}

/// Deletes each logged chunk the change set does not hold, once no document references it.
fn delete_unreferenced_chunks(tx: &Transaction<'_>, changes: &ChangeSet) -> Result<()> {
    let kept: BTreeSet<ChunkId> = changes.chunks.iter().map(|chunk| chunk.chunk_id).collect();
    let logged: BTreeSet<ChunkId> = changes.log.iter().map(|row| row.chunk_id).collect();
    for id in logged.difference(&kept) {
        tx.prepare_cached(
            "DELETE FROM chunks WHERE chunk_id = ?1
               AND NOT EXISTS (SELECT 1 FROM doc_chunk_links l
                               WHERE l.chunk_row = chunks.chunk_row)",
        )
        .and_then(|mut stmt| stmt.execute([id.as_bytes()]))
        .map_err(sql_error(format!("delete chunk {id}")))?;
    }
    Ok(())
}

/// Writes one chunk row the ledger does not hold, its text compressed as the ledger keeps it.
fn write_chunk(tx: &Transaction<'_>, text_writer: &mut TextWriter, chunk: &ChunkRow) -> Result<()> {
    let heading = text_writer.value(&chunk.heading)?;
    let text = text_writer.value(&chunk.text)?;
    tx.prepare_cached("INSERT INTO chunks (chunk_id, heading, text) VALUES (?1, ?2, ?3)")
        .and_then(|mut stmt| stmt.execute(params![chunk.chunk_id.as_bytes(), heading, text]))
        .map_err(sql_error(format!("write chunk {}", chunk.chunk_id)))?;
    Ok(())
}

fn write_document(
    tx: &Transaction<'_>,
    document: &DocumentRow,
    generation: Generation,
) -> Result<()> {
    let doc_hash = document.doc_hash;
    let context = || format!("write document {doc_hash}");
    // A document chunked again (a newer recipe) is other content at every path that holds it.
    let before: Vec<ChunkId> = tx
        .prepare_cached("SELECT chunk_id FROM doc_chunks WHERE doc_hash = ?1 ORDER BY ordinal")
        .and_then(|mut stmt| {
            stmt.query_map([doc_hash.as_bytes()], |row| chunk_id_column(row, 0))
                .and_then(|rows| rows.collect())
        })
        .map_err(sql_error(context()))?;
    let after: Vec<ChunkId> = document.chunks.iter().map(|c| c.chunk_id).collect();
    if !before.is_empty() && before != after {
        tx.prepare_cached("UPDATE sources SET since_generation = ?2 WHERE doc_hash = ?1")
            .and_then(|mut stmt| stmt.execute(params![doc_hash.as_bytes(), generation.0 as i64]))
            .map_err(sql_error(context()))?;
    }
    for sql in [
        "DELETE FROM doc_chunk_links
         WHERE doc_row = (SELECT doc_row FROM documents WHERE doc_hash = ?1)",
        "DELETE FROM doc_tags WHERE doc_hash = ?1",
    ] {
        tx.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([doc_hash.as_bytes()]))
            .map_err(sql_error(context()))?;
    }
    let doc_row: i64 = tx
        .prepare_cached(
            "INSERT INTO documents (doc_hash, title, n_chunks, fields, recipe_version)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (doc_hash) DO UPDATE SET title = excluded.title,
               n_chunks = excluded.n_chunks, fields = excluded.fields,
               recipe_version = excluded.recipe_version
             RETURNING doc_row",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    doc_hash.as_bytes(),
                    document.title,
                    document.n_chunks,
                    document.fields,
                    document.recipe_version
                ],
                |row| row.get(0),
            )
        })
        .map_err(sql_error(context()))?;
    for tag in &document.tags {
        tx.prepare_cached("INSERT OR IGNORE INTO doc_tags (doc_hash, tag) VALUES (?1, ?2)")
            .and_then(|mut stmt| stmt.execute(params![doc_hash.as_bytes(), tag]))
            .map_err(sql_error(context()))?;
    }
    for chunk in &document.chunks {
        // The chunk's row is written before the documents (`apply`); a link to a chunk that
        // neither the replica nor the change set holds is an error, never a lost link.
        let linked = tx
            .prepare_cached(
                "INSERT INTO doc_chunk_links
                    (doc_row, ordinal, chunk_row, short_key, line_start, line_end, page_start,
                     page_end)
                 SELECT ?1, ?2, chunk_row, ?8, ?4, ?5, ?6, ?7 FROM chunks WHERE chunk_id = ?3",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    doc_row,
                    chunk.ordinal,
                    chunk.chunk_id.as_bytes(),
                    chunk.line_start,
                    chunk.line_end,
                    chunk.page_start,
                    chunk.page_end,
                    chunk.chunk_id.short() as i64
                ])
            })
            .map_err(sql_error(context()))?;
        if linked != 1 {
            return Err(Error::LedgerDamaged(format!(
                "document {doc_hash} of the shared ledger names chunk {}, which neither this \
                 replica nor the shared ledger's change holds (a new replica, `sync` into an \
                 empty store, copies the shared ledger whole)",
                chunk.chunk_id
            )));
        }
    }
    Ok(())
}

/// Every model row as the shared ledger has it, and the vectors given (kept if present).
fn write_vectors(tx: &Transaction<'_>, vectors: &VectorChanges) -> Result<()> {
    for model in &vectors.models {
        tx.prepare_cached(
            "INSERT INTO embedding_models
               (fingerprint, description, dims, first_seen, active_since, complete_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (fingerprint) DO UPDATE SET description = excluded.description,
               dims = excluded.dims, first_seen = excluded.first_seen,
               active_since = excluded.active_since, complete_at = excluded.complete_at",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                model.fingerprint,
                model.description,
                model.dims,
                model.first_seen,
                model.active_since,
                model.complete_at
            ])
        })
        .map_err(sql_error("write embedding models"))?;
    }
    for vector in &vectors.vectors {
        tx.prepare_cached(
            "INSERT INTO vectors (model, chunk_id, vector) VALUES (?1, ?2, ?3)
             ON CONFLICT (model, chunk_id) DO NOTHING",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                vector.model,
                vector.chunk_id.as_bytes(),
                vector.vector
            ])
        })
        .map_err(sql_error("write vectors"))?;
    }
    Ok(())
}

/// Drops every model (and its vectors) that the shared ledger's full list of `models` no
/// longer holds: `gc` removed it there.
fn drop_unlisted_models(tx: &Transaction<'_>, models: &[ModelRecord]) -> Result<()> {
    let listed: BTreeSet<&[u8]> = models.iter().map(|m| m.fingerprint.as_slice()).collect();
    let held: Vec<Vec<u8>> = {
        let mut stmt = tx
            .prepare("SELECT fingerprint FROM embedding_models")
            .map_err(sql_error("read embedding models"))?;
        stmt.query_map([], |row| row.get(0))
            .and_then(|rows| rows.collect())
            .map_err(sql_error("read embedding models"))?
    };
    for fingerprint in held {
        if listed.contains(fingerprint.as_slice()) {
            continue;
        }
        for sql in [
            "DELETE FROM vectors WHERE model = ?1",
            "DELETE FROM embedding_models WHERE fingerprint = ?1",
        ] {
            tx.execute(sql, [&fingerprint])
                .map_err(sql_error("remove a model the shared ledger removed"))?;
        }
    }
    Ok(())
}

fn write_run(tx: &Transaction<'_>, run: &RunRow) -> Result<()> {
    tx.execute(
        "INSERT INTO runs (run_id, roots, started_at, finished_at, generation, report)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (run_id) DO UPDATE SET finished_at = excluded.finished_at,
           generation = excluded.generation, report = excluded.report",
        params![
            run.run_id,
            run.roots,
            run.started_at,
            run.finished_at,
            run.generation,
            run.report
        ],
    )
    .map_err(sql_error("write run"))?;
    Ok(())
}

pub(crate) fn set_position(
    tx: &Transaction<'_>,
    generation: Generation,
    state: &ReplicaState,
) -> Result<()> {
    tx.execute(
        "UPDATE meta SET value = ?1 WHERE name = 'generation'",
        [generation.0 as i64],
    )
    .map_err(sql_error("set generation"))?;
    tx.execute(
        "INSERT INTO replica (id, ledger_id, log_seq, log_token) VALUES (1, ?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET ledger_id = excluded.ledger_id,
           log_seq = excluded.log_seq, log_token = excluded.log_token",
        params![state.ledger_id, state.log_seq as i64, state.log_token],
    )
    .map_err(sql_error("record the replica's position"))?;
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ('vector_seq', ?1)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        [state.vector_seq as i64],
    )
    .map_err(sql_error("record the replica's position"))?;
    Ok(())
}

/// The last finished run of a ledger (for a writer to publish).
pub(crate) fn last_run(conn: &rusqlite::Connection, run_id: &str) -> Result<Option<RunRow>> {
    conn.query_row(
        "SELECT run_id, roots, started_at, finished_at, generation, report FROM runs
         WHERE run_id = ?1",
        [run_id],
        |row| {
            Ok(RunRow {
                run_id: row.get(0)?,
                roots: row.get(1)?,
                started_at: row.get(2)?,
                finished_at: row.get(3)?,
                generation: row.get(4)?,
                report: row.get(5)?,
            })
        },
    )
    .optional()
    .map_err(sql_error("read run"))
}
