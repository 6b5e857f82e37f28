//! The shared ledger's content and change log: a writer publishes a batch's change set under
//! its lease (`publish`), a replica pulls the change sets after its position (`pull`) or a whole
//! snapshot (`snapshot`), and reports how far it got (`report_progress`); the log is pruned
//! below the slowest active replica (`prune_log`).
//!
//! A publish is one transaction, set-based (a dozen statements whatever the batch's size), that
//! first checks the writer's epoch under the counter row's lock. Log positions are taken under
//! that lock, so they commit in order and without gaps, and a reader that sees position S in its
//! snapshot sees every row at or below it.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio_postgres::types::ToSql;

use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::ids::{ChunkId, Generation};
use crate::ledger::postgres::meta::{
    META_COLUMNS, SharedMeta, chunk_id, doc_hash, fence, meta_of, read_meta,
};
use crate::ledger::postgres::{Budget, PgError, PgLedger};
use crate::ledger::{
    ChangeSet, ChunkRow, DocChunkRow, DocumentRow, LogRow, ReplicaState, RunRow, SourceRow,
    VectorChanges,
};

/// What a replica at some position gets from `pull`.
#[derive(Clone, Debug)]
pub enum Pulled {
    /// Nothing after that position.
    UpToDate(SharedMeta),
    /// The rows changed after it, up to the state's position.
    Changes {
        changes: Box<ChangeSet>,
        vectors: Box<VectorChanges>,
        state: ReplicaState,
        last_run: Option<RunRow>,
    },
    /// The log no longer reaches back to it (pruned), or it is another ledger's: take a
    /// snapshot.
    Behind(SharedMeta),
}

/// One replica as the shared ledger knows it, for `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConsumerRow {
    pub consumer_id: String,
    pub host: String,
    pub store_dir: String,
    /// `active`, or `stale` (silent past the log's retention: it bootstraps when back).
    pub state: String,
    pub applied_seq: u64,
    pub applied_generation: u64,
    /// Seconds since it last reported.
    pub seen_seconds_ago: u64,
}

/// Counts for `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SharedCounts {
    pub documents: u64,
    pub sources: u64,
    pub chunks: u64,
    pub audit_events: u64,
    pub usage_units: u64,
    pub idempotency_keys: u64,
    pub log_rows: u64,
    pub consumers: u64,
}

type Tx<'a> = deadpool_postgres::Transaction<'a>;

impl PgLedger {
    /// The counter row.
    pub fn meta(&self) -> Result<SharedMeta> {
        self.run(
            "read the ledger's counters",
            Budget::Command,
            async |conn| {
                let row = conn
                    .query_one(
                        &format!("SELECT {META_COLUMNS} FROM ledger_meta WHERE id = 1"),
                        &[],
                    )
                    .await?;
                Ok(meta_of(&row))
            },
        )
    }

    /// Commits a writer's change set at the next log position, if the writer still holds the
    /// lease at `epoch` and its replica is at `expected_seq`. Returns the replica's new state.
    pub fn publish(
        &self,
        epoch: i64,
        expected_seq: u64,
        changes: &ChangeSet,
    ) -> Result<ReplicaState> {
        let args = PublishArgs::of(changes);
        self.run("publish a batch", Budget::Writer, async |conn| {
            let tx = conn.transaction().await?;
            let meta = fence(&tx, epoch).await?;
            if meta.log_seq != expected_seq {
                // Only this writer writes while it holds the lease: a position other than its
                // own is a commit of its own whose answer was lost. Its replica no longer knows
                // where it stands, so the run stops; the next one starts from the shared ledger.
                return Err(PgError::App(Error::LeaseLost {
                    context: format!(
                        "the shared log is at {} where this writer's replica expected {expected_seq}",
                        meta.log_seq
                    ),
                }));
            }
            let seq = (meta.log_seq + 1) as i64;
            let old = write_sources(&tx, &args).await?;
            write_documents(&tx, &args).await?;
            release_documents(&tx, &old).await?;
            write_chunks(&tx, &args).await?;
            let token = append_log(&tx, seq, changes.generation.0 as i64, &args).await?;
            crash_point("shared.before_commit");
            tx.commit().await?;
            Ok(ReplicaState {
                ledger_id: meta.ledger_id,
                log_seq: seq as u64,
                vector_seq: meta.vector_seq,
                log_token: token,
            })
        })
    }

    /// Records a run of a writer holding the lease at `epoch` (started or finished).
    pub fn publish_run(&self, epoch: i64, holder: &str, run: &RunRow) -> Result<()> {
        self.run("record a run", Budget::Writer, async |conn| {
            let tx = conn.transaction().await?;
            fence(&tx, epoch).await?;
            tx.execute(
                "INSERT INTO runs (run_id, roots, started_at, finished_at, generation, report,
                                   holder, epoch)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (run_id) DO UPDATE SET finished_at = excluded.finished_at,
                   generation = excluded.generation, report = excluded.report",
                &[
                    &run.run_id,
                    &run.roots,
                    &run.started_at,
                    &run.finished_at,
                    &run.generation,
                    &run.report,
                    &holder,
                    &epoch,
                ],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// The changes after a replica's position, in one snapshot of the shared ledger.
    pub fn pull(&self, replica: Option<&ReplicaState>) -> Result<Pulled> {
        self.run("read the shared log", Budget::Command, async |conn| {
            let tx = super::read_snapshot(conn).await?;
            let meta = read_meta(&tx).await?;
            let Some(replica) = replica.filter(|m| m.ledger_id == meta.ledger_id) else {
                return Ok(Pulled::Behind(meta));
            };
            if replica.log_seq == meta.log_seq
                && replica.log_token == meta.log_token
                && replica.vector_seq == meta.vector_seq
            {
                return Ok(Pulled::UpToDate(meta));
            }
            if replica.log_seq < meta.log_floor_seq || replica.log_seq > meta.log_seq {
                return Ok(Pulled::Behind(meta));
            }
            // The position the replica holds must be the one this ledger has: a ledger restored
            // from a backup reuses positions for other batches.
            if replica.log_seq > 0 {
                let token: Option<String> = tx
                    .query_opt(
                        "SELECT token FROM log_tokens WHERE seq = $1",
                        &[&(replica.log_seq as i64)],
                    )
                    .await?
                    .map(|row| row.get(0));
                if token.as_deref() != Some(replica.log_token.as_str()) {
                    return Ok(Pulled::Behind(meta));
                }
            }
            let (from, to) = (replica.log_seq as i64, meta.log_seq as i64);
            let sources: Vec<SourceRow> = tx
                .query(
                    "SELECT t.root, t.path, s.doc_hash
                       FROM (SELECT DISTINCT root, path FROM source_log
                              WHERE seq > $1 AND seq <= $2) t
                       LEFT JOIN sources s ON s.root = t.root AND s.path = t.path
                      ORDER BY t.root, t.path",
                    &[&from, &to],
                )
                .await?
                .iter()
                .map(source_of)
                .collect::<Result<_>>()?;
            let hashes: Vec<Vec<u8>> = sources
                .iter()
                .filter_map(|s| s.doc_hash.map(|h| h.as_bytes().to_vec()))
                .collect();
            let documents = documents(&tx, Some(&hashes)).await?;
            let log: Vec<LogRow> = tx
                .query(
                    "SELECT generation, op, chunk_id FROM chunk_log
                      WHERE seq > $1 AND seq <= $2 ORDER BY seq",
                    &[&from, &to],
                )
                .await?
                .iter()
                .map(|row| {
                    Ok(LogRow {
                        generation: Generation(row.get::<_, i64>(0) as u64),
                        op: row.get(1),
                        chunk_id: chunk_id(row.get(2))?,
                    })
                })
                .collect::<Result<_>>()?;
            let ids: Vec<Vec<u8>> = log.iter().map(|r| r.chunk_id.as_bytes().to_vec()).collect();
            let chunks = chunks(&tx, Some(&ids)).await?;
            let last_run = last_run(&tx).await?;
            let vectors = super::vectors::since(&tx, Some(replica.vector_seq)).await?;
            Ok(Pulled::Changes {
                changes: Box::new(ChangeSet {
                    generation: Generation(meta.generation),
                    sources,
                    documents,
                    log,
                    chunks,
                }),
                vectors: Box::new(vectors),
                state: ReplicaState {
                    ledger_id: meta.ledger_id,
                    log_seq: meta.log_seq,
                    vector_seq: meta.vector_seq,
                    log_token: meta.log_token.clone(),
                },
                last_run,
            })
        })
    }

    /// Every source, document, chunk, model and vector, in one snapshot, with its position.
    pub fn snapshot(&self) -> Result<(ChangeSet, VectorChanges, ReplicaState, Option<RunRow>)> {
        self.run(
            "read a snapshot of the shared ledger",
            Budget::Command,
            async |conn| {
                let tx = super::read_snapshot(conn).await?;
                let meta = read_meta(&tx).await?;
                let sources: Vec<SourceRow> = tx
                    .query(
                        "SELECT root, path, doc_hash FROM sources ORDER BY root, path",
                        &[],
                    )
                    .await?
                    .iter()
                    .map(source_of)
                    .collect::<Result<_>>()?;
                let documents = documents(&tx, None).await?;
                let chunks = chunks(&tx, None).await?;
                let last_run = last_run(&tx).await?;
                let vectors = super::vectors::since(&tx, None).await?;
                Ok((
                    ChangeSet {
                        generation: Generation(meta.generation),
                        sources,
                        documents,
                        log: Vec::new(),
                        chunks,
                    },
                    vectors,
                    ReplicaState {
                        ledger_id: meta.ledger_id,
                        log_seq: meta.log_seq,
                        vector_seq: meta.vector_seq,
                        log_token: meta.log_token.clone(),
                    },
                    last_run,
                ))
            },
        )
    }

    /// Records how far a replica is (registering it on first use), so the log is kept for it.
    pub(crate) fn report_progress(
        &self,
        consumer_id: &str,
        host: &str,
        store_dir: &str,
        state: &ReplicaState,
        generation: Generation,
    ) -> Result<()> {
        self.run(
            "record a replica's progress",
            Budget::Command,
            async |conn| {
                conn.execute(
                    "INSERT INTO consumers (consumer_id, host, store_dir, state, applied_seq,
                                        applied_generation)
                 VALUES ($1, $2, $3, 'active', $4, $5)
                 ON CONFLICT (consumer_id) DO UPDATE SET host = excluded.host,
                   store_dir = excluded.store_dir, applied_seq = excluded.applied_seq,
                   applied_generation = excluded.applied_generation,
                   last_seen = clock_timestamp(),
                   state = CASE WHEN excluded.applied_seq >=
                                     (SELECT log_floor_seq FROM ledger_meta WHERE id = 1)
                                THEN 'active' ELSE 'stale' END",
                    &[
                        &consumer_id,
                        &host,
                        &store_dir,
                        &(state.log_seq as i64),
                        &(generation.0 as i64),
                    ],
                )
                .await?;
                Ok(())
            },
        )
    }

    /// Marks replicas silent for `retention_secs` stale, then drops the log rows every active
    /// replica has applied. Returns the new floor.
    pub fn prune_log(&self, retention_secs: u64) -> Result<u64> {
        let retention = retention_secs as f64;
        self.run("prune the shared log", Budget::Command, async |conn| {
            let tx = conn.transaction().await?;
            tx.execute(
                "UPDATE consumers SET state = 'stale'
                  WHERE state = 'active'
                    AND last_seen < clock_timestamp() - make_interval(secs => $1)",
                &[&retention],
            )
            .await?;
            let upto: i64 = tx
                .query_one(
                    "SELECT coalesce((SELECT min(applied_seq) FROM consumers WHERE state = 'active'),
                                     (SELECT log_seq FROM ledger_meta WHERE id = 1))",
                    &[],
                )
                .await?
                .get(0);
            tx.execute("DELETE FROM chunk_log WHERE seq <= $1", &[&upto])
                .await?;
            tx.execute("DELETE FROM source_log WHERE seq <= $1", &[&upto])
                .await?;
            // The floor's own token stays: a replica at the floor still checks it.
            tx.execute("DELETE FROM log_tokens WHERE seq < $1", &[&upto])
                .await?;
            let floor: i64 = tx
                .query_one(
                    "UPDATE ledger_meta SET log_floor_seq = greatest(log_floor_seq, $1)
                      WHERE id = 1 RETURNING log_floor_seq",
                    &[&upto],
                )
                .await?
                .get(0);
            tx.commit().await?;
            Ok(floor as u64)
        })
    }

    /// Every chunk ID the shared ledger holds, the IDs its log names after `after_seq`, and its
    /// counters, from one snapshot: for `verify` of a replica.
    pub(crate) fn chunk_ids_since(
        &self,
        after_seq: u64,
    ) -> Result<(Vec<ChunkId>, Vec<ChunkId>, SharedMeta)> {
        self.run("read the shared chunk IDs", Budget::Command, async |conn| {
            let tx = super::read_snapshot(conn).await?;
            let meta = read_meta(&tx).await?;
            let ids = |rows: Vec<tokio_postgres::Row>| -> Result<Vec<ChunkId>> {
                rows.into_iter().map(|row| chunk_id(row.get(0))).collect()
            };
            let all = ids(tx
                .query("SELECT chunk_id FROM chunks ORDER BY chunk_id", &[])
                .await?)?;
            let changed = ids(tx
                .query(
                    "SELECT DISTINCT chunk_id FROM chunk_log WHERE seq > $1",
                    &[&(after_seq as i64)],
                )
                .await?)?;
            Ok((all, changed, meta))
        })
    }

    /// Every registered replica.
    pub fn consumers(&self) -> Result<Vec<ConsumerRow>> {
        self.run("read the consumers", Budget::Command, async |conn| {
            Ok(conn
                .query(
                    "SELECT consumer_id, host, store_dir, state, applied_seq, applied_generation,
                            greatest(0, extract(epoch FROM clock_timestamp() - last_seen))::bigint
                       FROM consumers ORDER BY host, store_dir",
                    &[],
                )
                .await?
                .iter()
                .map(|row| ConsumerRow {
                    consumer_id: row.get(0),
                    host: row.get(1),
                    store_dir: row.get(2),
                    state: row.get(3),
                    applied_seq: row.get::<_, i64>(4) as u64,
                    applied_generation: row.get::<_, i64>(5) as u64,
                    seen_seconds_ago: row.get::<_, i64>(6) as u64,
                })
                .collect())
        })
    }

    /// Row counts, for `status`.
    pub fn counts(&self) -> Result<SharedCounts> {
        self.run("count the shared ledger", Budget::Command, async |conn| {
            let row = conn
                .query_one(
                    "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM sources),
                            (SELECT count(*) FROM chunks), (SELECT count(*) FROM audit_events),
                            (SELECT coalesce(sum(units), 0)::bigint FROM usage_events),
                            (SELECT count(*) FROM idempotency_keys),
                            (SELECT count(*) FROM chunk_log),
                            (SELECT count(*) FROM consumers)",
                    &[],
                )
                .await?;
            let n = |i: usize| row.get::<_, i64>(i) as u64;
            Ok(SharedCounts {
                documents: n(0),
                sources: n(1),
                chunks: n(2),
                audit_events: n(3),
                usage_units: n(4),
                idempotency_keys: n(5),
                log_rows: n(6),
                consumers: n(7),
            })
        })
    }
}

/// Sets every source the batch names to what it holds now (deleted, then the kept ones
/// inserted); returns the documents they held before.
async fn write_sources(
    tx: &Tx<'_>,
    args: &PublishArgs,
) -> std::result::Result<Vec<Vec<u8>>, PgError> {
    let old: Vec<Vec<u8>> = tx
        .query(
            "SELECT s.doc_hash FROM sources s
               JOIN unnest($1::text[], $2::text[]) AS t(root, path)
                 ON s.root = t.root AND s.path = t.path",
            &[&args.roots, &args.paths],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    tx.execute(
        "DELETE FROM sources s USING unnest($1::text[], $2::text[]) AS t(root, path)
          WHERE s.root = t.root AND s.path = t.path",
        &[&args.roots, &args.paths],
    )
    .await?;
    tx.execute(
        "INSERT INTO sources (root, path, doc_hash)
         SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[])",
        &[&args.kept_roots, &args.kept_paths, &args.kept_docs],
    )
    .await?;
    Ok(old)
}

/// Releases each of `old` that no source holds any more (its row, tags and chunk list).
async fn release_documents(tx: &Tx<'_>, old: &[Vec<u8>]) -> std::result::Result<(), PgError> {
    tx.execute(
        "WITH gone AS (
             DELETE FROM documents d WHERE d.doc_hash = ANY($1)
                AND NOT EXISTS (SELECT 1 FROM sources s WHERE s.doc_hash = d.doc_hash)
             RETURNING doc_hash),
           tags AS (DELETE FROM doc_tags WHERE doc_hash IN (SELECT doc_hash FROM gone))
         DELETE FROM doc_chunks WHERE doc_hash IN (SELECT doc_hash FROM gone)",
        &[&old],
    )
    .await?;
    Ok(())
}

/// Writes the batch's new chunks, and deletes each logged one no document references.
async fn write_chunks(tx: &Tx<'_>, args: &PublishArgs) -> std::result::Result<(), PgError> {
    tx.execute(
        "INSERT INTO chunks (chunk_id, heading, text)
         SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[])
         ON CONFLICT (chunk_id) DO NOTHING",
        &[&args.chunk_ids, &args.chunk_headings, &args.chunk_texts],
    )
    .await?;
    tx.execute(
        "DELETE FROM chunks c WHERE c.chunk_id = ANY($1)
            AND NOT EXISTS (SELECT 1 FROM doc_chunks d WHERE d.chunk_id = c.chunk_id)",
        &[&args.gone_chunks],
    )
    .await?;
    Ok(())
}

/// Appends the batch to the log at `seq` (its chunk and source rows, a new token) and moves
/// the counter row there; returns the token.
async fn append_log(
    tx: &Tx<'_>,
    seq: i64,
    generation: i64,
    args: &PublishArgs,
) -> std::result::Result<String, PgError> {
    tx.execute(
        "INSERT INTO chunk_log (seq, generation, op, chunk_id)
         SELECT $1, g, op, id FROM unnest($2::int8[], $3::text[], $4::bytea[]) AS t(g, op, id)",
        &[&seq, &args.log_generations, &args.log_ops, &args.log_ids],
    )
    .await?;
    tx.execute(
        "INSERT INTO source_log (seq, root, path)
         SELECT $1, r, p FROM unnest($2::text[], $3::text[]) AS t(r, p)",
        &[&seq, &args.roots, &args.paths],
    )
    .await?;
    let token = uuid::Uuid::new_v4().to_string();
    tx.execute(
        "INSERT INTO log_tokens (seq, token) VALUES ($1, $2)",
        &[&seq, &token],
    )
    .await?;
    tx.execute(
        "UPDATE ledger_meta SET log_seq = $1, generation = $2, log_token = $3 WHERE id = 1",
        &[&seq, &generation, &token],
    )
    .await?;
    Ok(token)
}

fn source_of(row: &tokio_postgres::Row) -> Result<SourceRow> {
    Ok(SourceRow {
        root: row.get(0),
        path: row.get(1),
        doc_hash: row.get::<_, Option<Vec<u8>>>(2).map(doc_hash).transpose()?,
    })
}

/// The documents named (every document when `None`), whole.
async fn documents(
    tx: &Tx<'_>,
    hashes: Option<&Vec<Vec<u8>>>,
) -> std::result::Result<Vec<DocumentRow>, PgError> {
    let all = hashes.is_none();
    let empty = Vec::new();
    let hashes = hashes.unwrap_or(&empty);
    let filter = "($1 OR doc_hash = ANY($2))";
    let mut documents: BTreeMap<Vec<u8>, DocumentRow> = BTreeMap::new();
    for row in tx
        .query(
            &format!(
                "SELECT doc_hash, title, n_chunks, fields, recipe_version FROM documents
                  WHERE {filter}"
            ),
            &[&all, hashes],
        )
        .await?
    {
        let hash: Vec<u8> = row.get(0);
        documents.insert(
            hash.clone(),
            DocumentRow {
                doc_hash: doc_hash(hash)?,
                title: row.get(1),
                n_chunks: row.get(2),
                fields: row.get(3),
                recipe_version: row.get(4),
                tags: Vec::new(),
                chunks: Vec::new(),
            },
        );
    }
    for row in tx
        .query(
            &format!("SELECT doc_hash, tag FROM doc_tags WHERE {filter} ORDER BY doc_hash, tag"),
            &[&all, hashes],
        )
        .await?
    {
        if let Some(document) = documents.get_mut(&row.get::<_, Vec<u8>>(0)) {
            document.tags.push(row.get(1));
        }
    }
    for row in tx
        .query(
            &format!(
                "SELECT doc_hash, ordinal, chunk_id, line_start, line_end, page_start, page_end
                   FROM doc_chunks WHERE {filter} ORDER BY doc_hash, ordinal"
            ),
            &[&all, hashes],
        )
        .await?
    {
        if let Some(document) = documents.get_mut(&row.get::<_, Vec<u8>>(0)) {
            document.chunks.push(DocChunkRow {
                ordinal: row.get(1),
                chunk_id: chunk_id(row.get(2))?,
                line_start: row.get(3),
                line_end: row.get(4),
                page_start: row.get(5),
                page_end: row.get(6),
            });
        }
    }
    Ok(documents.into_values().collect())
}

/// The chunks named (every chunk when `None`) that the ledger holds.
async fn chunks(
    tx: &Tx<'_>,
    ids: Option<&Vec<Vec<u8>>>,
) -> std::result::Result<Vec<ChunkRow>, PgError> {
    let all = ids.is_none();
    let empty = Vec::new();
    let ids = ids.unwrap_or(&empty);
    tx.query(
        "SELECT chunk_id, heading, text FROM chunks WHERE ($1 OR chunk_id = ANY($2))
          ORDER BY chunk_id",
        &[&all, ids],
    )
    .await?
    .into_iter()
    .map(|row| {
        Ok(ChunkRow {
            chunk_id: chunk_id(row.get(0))?,
            heading: row.get(1),
            text: row.get(2),
        })
    })
    .collect::<Result<_>>()
    .map_err(PgError::App)
}

async fn last_run(tx: &Tx<'_>) -> std::result::Result<Option<RunRow>, PgError> {
    Ok(tx
        .query_opt(
            "SELECT run_id, roots, started_at, finished_at, generation, report FROM runs
              WHERE finished_at IS NOT NULL ORDER BY finished_at DESC LIMIT 1",
            &[],
        )
        .await?
        .map(|row| RunRow {
            run_id: row.get(0),
            roots: row.get(1),
            started_at: row.get(2),
            finished_at: row.get(3),
            generation: row.get(4),
            report: row.get(5),
        }))
}

/// A change set as the arrays a publish binds.
struct PublishArgs {
    roots: Vec<String>,
    paths: Vec<String>,
    kept_roots: Vec<String>,
    kept_paths: Vec<String>,
    kept_docs: Vec<Vec<u8>>,
    doc_hashes: Vec<Vec<u8>>,
    doc_titles: Vec<Option<String>>,
    doc_n_chunks: Vec<i64>,
    doc_fields: Vec<Option<String>>,
    doc_recipe_versions: Vec<i64>,
    tag_docs: Vec<Vec<u8>>,
    tags: Vec<String>,
    link_docs: Vec<Vec<u8>>,
    link_ordinals: Vec<i64>,
    link_chunks: Vec<Vec<u8>>,
    link_starts: Vec<i64>,
    link_ends: Vec<i64>,
    link_page_starts: Vec<Option<i64>>,
    link_page_ends: Vec<Option<i64>>,
    chunk_ids: Vec<Vec<u8>>,
    chunk_headings: Vec<String>,
    chunk_texts: Vec<String>,
    gone_chunks: Vec<Vec<u8>>,
    log_generations: Vec<i64>,
    log_ops: Vec<String>,
    log_ids: Vec<Vec<u8>>,
}

impl PublishArgs {
    fn of(changes: &ChangeSet) -> PublishArgs {
        let mut args = PublishArgs {
            roots: Vec::new(),
            paths: Vec::new(),
            kept_roots: Vec::new(),
            kept_paths: Vec::new(),
            kept_docs: Vec::new(),
            doc_hashes: Vec::new(),
            doc_titles: Vec::new(),
            doc_n_chunks: Vec::new(),
            doc_fields: Vec::new(),
            doc_recipe_versions: Vec::new(),
            tag_docs: Vec::new(),
            tags: Vec::new(),
            link_docs: Vec::new(),
            link_ordinals: Vec::new(),
            link_chunks: Vec::new(),
            link_starts: Vec::new(),
            link_ends: Vec::new(),
            link_page_starts: Vec::new(),
            link_page_ends: Vec::new(),
            chunk_ids: Vec::new(),
            chunk_headings: Vec::new(),
            chunk_texts: Vec::new(),
            gone_chunks: Vec::new(),
            log_generations: Vec::new(),
            log_ops: Vec::new(),
            log_ids: Vec::new(),
        };
        for source in &changes.sources {
            args.roots.push(source.root.clone());
            args.paths.push(source.path.clone());
            if let Some(doc) = source.doc_hash {
                args.kept_roots.push(source.root.clone());
                args.kept_paths.push(source.path.clone());
                args.kept_docs.push(doc.as_bytes().to_vec());
            }
        }
        for document in &changes.documents {
            let hash = document.doc_hash.as_bytes().to_vec();
            args.doc_hashes.push(hash.clone());
            args.doc_titles.push(document.title.as_deref().map(pg_text));
            args.doc_n_chunks.push(document.n_chunks);
            args.doc_recipe_versions.push(document.recipe_version);
            args.doc_fields
                .push(document.fields.as_deref().map(pg_text));
            for tag in &document.tags {
                args.tag_docs.push(hash.clone());
                args.tags.push(pg_text(tag));
            }
            for chunk in &document.chunks {
                args.link_docs.push(hash.clone());
                args.link_ordinals.push(chunk.ordinal);
                args.link_chunks.push(chunk.chunk_id.as_bytes().to_vec());
                args.link_starts.push(chunk.line_start);
                args.link_ends.push(chunk.line_end);
                args.link_page_starts.push(chunk.page_start);
                args.link_page_ends.push(chunk.page_end);
            }
        }
        let kept: std::collections::BTreeSet<ChunkId> =
            changes.chunks.iter().map(|c| c.chunk_id).collect();
        for chunk in &changes.chunks {
            args.chunk_ids.push(chunk.chunk_id.as_bytes().to_vec());
            args.chunk_headings.push(pg_text(&chunk.heading));
            args.chunk_texts.push(pg_text(&chunk.text));
        }
        for row in &changes.log {
            args.log_generations.push(row.generation.0 as i64);
            args.log_ops.push(row.op.clone());
            args.log_ids.push(row.chunk_id.as_bytes().to_vec());
            if !kept.contains(&row.chunk_id) {
                args.gone_chunks.push(row.chunk_id.as_bytes().to_vec());
            }
        }
        args
    }
}

/// Text as a PostgreSQL text column takes it: a NUL (which the chunker and front matter
/// already replace) becomes U+FFFD rather than failing the whole batch.
fn pg_text(text: &str) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text.to_string()
    }
}

async fn write_documents(tx: &Tx<'_>, args: &PublishArgs) -> std::result::Result<(), PgError> {
    let hashes: &(dyn ToSql + Sync) = &args.doc_hashes;
    tx.execute("DELETE FROM doc_chunks WHERE doc_hash = ANY($1)", &[hashes])
        .await?;
    tx.execute("DELETE FROM doc_tags WHERE doc_hash = ANY($1)", &[hashes])
        .await?;
    tx.execute(
        "INSERT INTO documents (doc_hash, title, n_chunks, fields, recipe_version)
         SELECT * FROM unnest($1::bytea[], $2::text[], $3::int8[], $4::text[], $5::int8[])
         ON CONFLICT (doc_hash) DO UPDATE SET title = excluded.title,
           n_chunks = excluded.n_chunks, fields = excluded.fields,
           recipe_version = excluded.recipe_version",
        &[
            hashes,
            &args.doc_titles,
            &args.doc_n_chunks,
            &args.doc_fields,
            &args.doc_recipe_versions,
        ],
    )
    .await?;
    tx.execute(
        "INSERT INTO doc_tags (doc_hash, tag) SELECT * FROM unnest($1::bytea[], $2::text[])
         ON CONFLICT DO NOTHING",
        &[&args.tag_docs, &args.tags],
    )
    .await?;
    tx.execute(
        "INSERT INTO doc_chunks
            (doc_hash, ordinal, chunk_id, line_start, line_end, page_start, page_end)
         SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[], $4::int8[], $5::int8[],
                              $6::int8[], $7::int8[])",
        &[
            &args.link_docs,
            &args.link_ordinals,
            &args.link_chunks,
            &args.link_starts,
            &args.link_ends,
            &args.link_page_starts,
            &args.link_page_ends,
        ],
    )
    .await?;
    Ok(())
}
