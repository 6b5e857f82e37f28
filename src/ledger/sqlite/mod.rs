//! The SQLite ledger: a store's own source of truth, or a host's replica of the shared ledger.
//!
//! It holds which paths exist (`sources`, with the stat cache), which content each has
//! (`documents`), which chunks each document is made of (`doc_chunk_links`, by row numbers,
//! and `doc_chunks`, a view of it with the hashes, which readers query), the chunk texts
//! (`chunks`), the outbox of chunk changes per generation (`chunk_log`), the ingest runs, the
//! embedding models and vectors (`vectors`), and the agent path's idempotency keys, audit events
//! and usage events (`keys`). A replica applies the shared ledger's change sets (`replica`).

mod documents;
mod keys;
pub mod pool;
mod replica;
pub mod schema;
mod texts;
mod vectors;

pub(crate) use keys::UnitCounts;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::{
    Access, Batch, BatchOutcome, ChangeSet, ChunkDocuments, ChunkSource, Counts, MAX_FIELD_CHARS,
    MAX_FIELDS, NewDocument, Publish, RootId, RunRow, SourceRecord, SourceUpsert, StoredChunk,
};
use crate::crash::crash_point;
use crate::error::{Error, Result};
use crate::ids::{ChunkId, DocHash, Generation};
use crate::stat::FileStat;

use schema::SCHEMA_VERSION;
pub use texts::{Dictionary, PackedTexts};
pub(crate) use texts::{Packer, Samples};
use texts::{TextWriter, Texts};

/// The SQLite ledger.
pub struct Ledger {
    conn: Connection,
    path: PathBuf,
    /// Opened as immutable (a read-only file system, no write-ahead log): SQLite takes no lock
    /// and never looks for another writer's changes, so the connection is good only while the
    /// file system stays read-only (`still_safe`).
    immutable: bool,
    /// Whether `doc_chunks` has its page columns (schema version 9): a reader may open an older
    /// ledger that a writer has not upgraded yet.
    has_pages: bool,
    /// Whether its sources record the generation they hold their content from (schema 10).
    has_since: bool,
    /// Whether a document's chunks are `doc_chunk_links` by row number, with each chunk's short
    /// key (schema 13), rather than a table of hashes.
    has_links: bool,
    /// Reads the chunk text values, compressed or not (`texts`).
    texts: Texts,
}

impl Ledger {
    /// Opens (and with `Access::ReadWrite`, creates) the ledger at `path`.
    pub fn open(path: &Path, access: Access) -> Result<Ledger> {
        let flags = match access {
            Access::ReadWrite => {
                OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_CREATE
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
            }
            Access::ReadOnly => {
                if !path.exists() {
                    return Err(Error::NoStore {
                        path: path.parent().unwrap_or(path).to_path_buf(),
                    });
                }
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
            }
        };
        // A reader of a WAL database creates the `-shm` (and `-wal`) file beside it when they
        // are missing, which a read-only mount refuses ("unable to open database file"). With
        // no `-wal` file the database file holds every commit, and nothing can change it while
        // the mount is read-only: it is opened as immutable (no lock, no `-shm`). That is safe
        // only when no one can write the file elsewhere either: the file system itself must be
        // read-only and local (a read-only bind mount of a writable one, or a network file
        // system, can change under the reader, which would then read torn pages). A `-wal` file
        // (or one that cannot be looked for) may hold commits the database file lacks: it is
        // read as SQLite reads it on read-only media, and refused with the fix when that fails.
        let read_only_mount = access == Access::ReadOnly && on_read_only_mount(path);
        let immutable = read_only_mount
            && !wal_file(path).try_exists().unwrap_or(true)
            && file_system_is_read_only(path);
        let opened = if immutable {
            Connection::open_with_flags(immutable_uri(path), flags | OpenFlags::SQLITE_OPEN_URI)
        } else {
            Connection::open_with_flags(path, flags)
        };
        let mut conn = opened.map_err(sql_error(format!("open {}", path.display())))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(sql_error("set busy timeout"))?;
        // Before any pragma: `journal_mode = WAL` rewrites the file's header, and a database
        // of another program (or of an unknown version) must be left exactly as it was.
        let found = schema::found(&conn).map_err(|err| match err {
            Error::Ledger { source, .. }
                if read_only_mount && !immutable && is_cannot_open(&source) =>
            {
                if wal_file(path).try_exists().unwrap_or(true) {
                    unreadable_log_on_read_only_mount(path)
                } else {
                    writable_elsewhere_on_read_only_mount(path)
                }
            }
            other => other,
        })?;
        if access == Access::ReadOnly {
            schema::check(found, path)?;
        } else {
            schema::refuse_unless_ours(found, path)?;
        }
        // Without the query planner stability guarantee, SQLite marks a statement whose plan
        // could depend on a bound value (a join with `= ?1`, as in `sources_of_chunk`) to be
        // prepared again on every new binding, so a cached statement was parsed and planned
        // anew on each call: a quarter of a search's time. The ledger has no statistics
        // tables for such a plan to use.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(sql_error("set query planner stability"))?;
        if access == Access::ReadOnly {
            // Readers (searches) read hits' text and sources at random places: through a
            // memory map each page read is a memory access, not a `pread` call.
            conn.execute_batch("PRAGMA mmap_size = 1073741824;")
                .map_err(sql_error("set the memory map"))?;
        }
        if access == Access::ReadWrite {
            if found == schema::Found::Empty {
                // Only before its first table: a new ledger can give free pages back
                // (`give_free_pages_back`).
                conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL;")
                    .map_err(sql_error("set pragmas"))?;
            }
            // WAL lets readers go on while a writer commits. synchronous=FULL makes every
            // commit durable against power loss too, and costs one fsync per transaction,
            // which ingest spends once per batch.
            // A writer's inserts land at random places in the ID indexes (IDs are hashes): a
            // page cache of 32 MiB rather than SQLite's 2 MiB keeps a batch's pages from being
            // spilled to the WAL and read back in the middle of its transaction.
            conn.execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;
                 PRAGMA cache_size = -32768;",
            )
            .map_err(sql_error("set pragmas"))?;
            if found != schema::Found::Ledger(SCHEMA_VERSION) {
                schema::create_or_upgrade(&mut conn, path)?;
            }
            // An upgrade that copied tables (schema 13) freed about half the file: given back
            // here, whichever command upgraded it (`sync`, `serve` and `migrate` end no run),
            // before a run adds rows into the free pages, and by every writer after one killed
            // while it gave them back. Otherwise a look at the file's header.
            if found != schema::Found::Empty
                && let Err(err) = give_free_pages_back(&mut conn)
            {
                tracing::warn!(error = %err, "the ledger's free pages were not given back");
            }
        }
        let has_pages = conn
            .prepare("SELECT page_start FROM doc_chunks LIMIT 0")
            .is_ok();
        let has_since = conn
            .prepare("SELECT since_generation FROM sources LIMIT 0")
            .is_ok();
        let has_links = conn
            .prepare("SELECT short_key FROM doc_chunk_links LIMIT 0")
            .is_ok();
        Ok(Ledger {
            conn,
            path: path.to_path_buf(),
            immutable,
            has_pages,
            has_since,
            has_links,
            texts: Texts::default(),
        })
    }

    /// How many bytes of the file this connection may read through a memory map (0: none).
    #[cfg(test)]
    pub(crate) fn mmap_size(&self) -> i64 {
        self.conn
            .query_row("PRAGMA mmap_size", [], |row| row.get(0))
            .expect("read mmap_size")
    }

    /// Reads by `pread` rather than through a memory map (`LedgerPool::open_unmapped`).
    pub(crate) fn unmap(&self) -> Result<()> {
        self.conn
            .execute_batch("PRAGMA mmap_size = 0;")
            .map_err(sql_error("turn the memory map off"))
    }

    /// False once a connection opened as immutable can no longer trust its file: its mount
    /// became writable (a remount), so a writer may change the file under it. A pool drops
    /// such a connection and opens the ledger again.
    pub(crate) fn still_safe(&self) -> bool {
        !self.immutable || on_read_only_mount(&self.path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` inside one read transaction, so that everything it reads comes from one
    /// snapshot of the ledger even while a writer commits (WAL readers see the database as of
    /// their transaction's first read).
    pub(crate) fn read_snapshot<T>(&self, f: impl FnOnce(&Ledger) -> Result<T>) -> Result<T> {
        /// Ends the read transaction however `f` ends, a panic included: a pooled connection
        /// must never go back to its pool inside a transaction.
        struct End<'a>(&'a Connection);
        impl Drop for End<'_> {
            fn drop(&mut self) {
                if !self.0.is_autocommit() {
                    let _ = self.0.execute_batch("ROLLBACK");
                }
            }
        }
        self.conn
            .execute_batch("BEGIN DEFERRED")
            .map_err(sql_error("begin a read transaction"))?;
        let end = End(&self.conn);
        let result = f(self);
        // A read transaction has nothing to keep: ending it either way only drops the snapshot.
        let ended = self
            .conn
            .execute_batch("ROLLBACK")
            .map_err(sql_error("end a read transaction"));
        drop(end);
        let value = result?;
        ended?;
        Ok(value)
    }

    /// The schema version of the ledger file.
    pub fn schema_version(&self) -> Result<i64> {
        self.meta("schema_version")
    }

    /// The generation of the last committed chunk change.
    pub fn generation(&self) -> Result<Generation> {
        self.meta("generation").map(|v| Generation(v as u64))
    }

    /// The oldest generation whose log rows are still kept, minus one: a replay can bring an
    /// index at this generation or later up to date.
    pub fn log_floor(&self) -> Result<Generation> {
        self.meta("log_floor").map(|v| Generation(v as u64))
    }

    fn meta(&self, name: &str) -> Result<i64> {
        // Cached: a server reads the generation at every call.
        self.conn
            .prepare_cached("SELECT value FROM meta WHERE name = ?1")
            .and_then(|mut stmt| stmt.query_row([name], |row| row.get(0)))
            .map_err(sql_error(format!("read {name}")))
    }

    /// The root row for a canonical folder path, if it was ever ingested.
    pub(crate) fn find_root(&self, root: &str) -> Result<Option<RootId>> {
        self.conn
            .query_row("SELECT root_id FROM roots WHERE path = ?1", [root], |row| {
                row.get(0).map(RootId)
            })
            .optional()
            .map_err(sql_error("read roots"))
    }

    /// The root row for a canonical folder path, created when missing.
    pub fn ensure_root(&mut self, root: &str) -> Result<RootId> {
        if let Some(id) = self.find_root(root)? {
            return Ok(id);
        }
        self.conn
            .execute("INSERT INTO roots (path) VALUES (?1)", [root])
            .map_err(sql_error("add root"))?;
        Ok(RootId(self.conn.last_insert_rowid()))
    }

    /// Every source under a root with its relative path, sorted by path (bytewise, as `str`
    /// orders): one query, for the planner.
    pub(crate) fn sources_of_root(&self, root: RootId) -> Result<Vec<(String, SourceRecord)>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT s.path, s.doc_hash, s.size, s.mtime_ns, s.ctime_ns, s.inode,
                   s.recorded_ns, coalesce(d.recipe_version, 0)
                 FROM sources s LEFT JOIN documents d ON d.doc_hash = s.doc_hash
                 WHERE s.root_id = ?1 ORDER BY s.path",
            )
            .map_err(sql_error("read sources"))?;
        let rows = stmt
            .query_map([root.0], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    SourceRecord {
                        doc_hash: doc_hash_column(row, 1)?,
                        stat: FileStat {
                            size: row.get::<_, i64>(2)? as u64,
                            mtime_ns: row.get(3)?,
                            ctime_ns: row.get(4)?,
                            inode: row.get::<_, i64>(5)? as u64,
                        },
                        recorded_ns: row.get(6)?,
                        recipe_version: row.get(7)?,
                    },
                ))
            })
            .map_err(sql_error("read sources"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read sources"))
    }

    /// Whether the ledger has this document without its front-matter fields (recorded by
    /// schema version 2): reading its file again fills them in.
    pub(crate) fn lacks_fields(&self, doc_hash: &DocHash) -> Result<bool> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM documents WHERE doc_hash = ?1 AND fields IS NULL")
            .map_err(sql_error("read documents"))?;
        stmt.exists([doc_hash.as_bytes()])
            .map_err(sql_error("read documents"))
    }

    /// Whether the ledger has this document with chunks an older recipe made (its recorded
    /// recipe version is under `recipe_version`, the one this build uses for its file), or
    /// with chunks whose stored text does not hash to their ID (chunk ID version 1, of the
    /// normalised text): its file is chunked again, and the document's chunks replaced
    /// (`BatchWriter::upsert`).
    pub(crate) fn chunks_outdated(&self, doc_hash: &DocHash, recipe_version: u32) -> Result<bool> {
        chunks_outdated(&self.conn, &self.texts, doc_hash, recipe_version)
    }

    /// What the documents that hold chunk `id` are called now (empty when none holds it).
    pub(crate) fn chunk_documents(&self, id: &ChunkId) -> Result<ChunkDocuments> {
        chunk_documents(&self.conn, id)
            .map(Option::unwrap_or_default)
            .map_err(sql_error("read the documents of a chunk"))
    }

    /// Whether the ledger already has the chunks of this document.
    pub(crate) fn has_document(&self, doc_hash: &DocHash) -> Result<bool> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT 1 FROM documents WHERE doc_hash = ?1")
            .map_err(sql_error("read documents"))?;
        stmt.exists([doc_hash.as_bytes()])
            .map_err(sql_error("read documents"))
    }

    /// Commits one batch in one transaction: the sources, documents and chunks it adds or
    /// releases, one `chunk_log` row per chunk added to or removed from the set of chunks,
    /// and, when there are such rows, the next generation.
    ///
    /// If it fails (or the process dies) before `COMMIT`, nothing of the batch is written.
    pub(crate) fn apply_batch(&mut self, batch: &Batch) -> Result<BatchOutcome> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("begin batch"))?;
        let outcome = write_batch(&tx, &self.texts, batch).inspect_err(|_| self.texts.forget())?;
        crash_point("ledger.before_commit");
        tx.commit().map_err(sql_error("commit batch"))?;
        Ok(outcome)
    }

    /// `apply_batch` on a replica of the shared ledger: the rows the batch changes are given
    /// to `publish` (which commits them to the shared ledger and returns the shared log
    /// position they took), and then the replica commits the batch at that position.
    ///
    /// The change set is found by applying the batch and rolling it back, and the batch is
    /// applied again once the shared ledger holds it: no SQLite write transaction stays open
    /// while `publish` waits on PostgreSQL (for up to its retry budget), so a server on this
    /// store can still write the calls it answers read-only meanwhile. The writer lock keeps
    /// every other writer of the batch's rows away in between, so the second run finds the
    /// same change set (checked). If `publish` fails, nothing of the batch is written here; if
    /// the process dies after it, the shared ledger has the batch and the replica pulls it.
    pub(crate) fn apply_batch_publishing(
        &mut self,
        batch: &Batch,
        publish: &mut Publish<'_>,
    ) -> Result<BatchOutcome> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("begin batch"))?;
        let outcome = write_batch(&tx, &self.texts, batch)?;
        let changes = batch_changes(&tx, &self.texts, batch, &outcome)?;
        if changes.is_empty() {
            crash_point("ledger.before_commit");
            tx.commit().map_err(sql_error("commit batch"))?;
            return Ok(outcome);
        }
        tx.rollback().map_err(sql_error("roll back batch"))?;
        // A dictionary the batch trained went with it: no decoder of it may outlive it.
        self.texts.forget();
        let state = publish(&changes)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("begin batch"))?;
        let outcome = write_batch(&tx, &self.texts, batch)?;
        if batch_changes(&tx, &self.texts, batch, &outcome)? != changes {
            return Err(Error::Inconsistent(
                "the replica changed while its batch was published to the shared ledger; the next run pulls the batch from there".into(),
            ));
        }
        replica::set_position(&tx, changes.generation, &state)?;
        crash_point("ledger.before_commit");
        tx.commit().map_err(sql_error("commit batch"))?;
        Ok(outcome)
    }

    /// The distinct chunk IDs that generations after `after` added, removed or relabelled.
    pub(crate) fn changed_since(&self, after: Generation) -> Result<Vec<ChunkId>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT chunk_id FROM chunk_log WHERE generation > ?1 ORDER BY chunk_id",
            )
            .map_err(sql_error("read chunk log"))?;
        let rows = stmt
            .query_map([after.0 as i64], |row| chunk_id_column(row, 0))
            .map_err(sql_error("read chunk log"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read chunk log"))
    }

    /// Drops log rows the index has applied (generation ≤ `upto`).
    pub fn prune_log(&mut self, upto: Generation) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("prune log"))?;
        tx.execute(
            "DELETE FROM chunk_log WHERE generation <= ?1",
            [upto.0 as i64],
        )
        .map_err(sql_error("prune log"))?;
        tx.execute(
            "UPDATE meta SET value = max(value, ?1) WHERE name = 'log_floor'",
            [upto.0 as i64],
        )
        .map_err(sql_error("prune log"))?;
        tx.commit().map_err(sql_error("prune log"))
    }

    /// The chunks among `ids` that the ledger holds now (the others were removed).
    pub fn chunks(&self, ids: &[ChunkId]) -> Result<Vec<StoredChunk>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT heading, text FROM chunks WHERE chunk_id = ?1")
            .map_err(sql_error("read chunks"))?;
        let mut found = Vec::with_capacity(ids.len());
        for id in ids {
            let row = stmt
                .query_row([id.as_bytes()], |row| {
                    Ok((
                        self.texts.column(&self.conn, row, 0)?,
                        self.texts.column(&self.conn, row, 1)?,
                    ))
                })
                .optional()
                .map_err(sql_error("read chunks"))?;
            if let Some((heading, text)) = row {
                found.push(StoredChunk {
                    id: *id,
                    heading_path: decode_heading(&heading),
                    text,
                });
            }
        }
        Ok(found)
    }

    /// Every chunk the ledger holds whose ID begins with the same eight bytes as one of `ids`
    /// (`ChunkId::short`, the index's delete key), each once, in ID order: the chunks a delete
    /// by those keys removes from the index and that must be added back. Two chunks share a
    /// key only by a 64-bit collision, so this is nearly always `chunks(ids)`.
    pub(crate) fn chunks_sharing_keys(&self, ids: &[ChunkId]) -> Result<Vec<StoredChunk>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT chunk_id, heading, text FROM chunks
                 WHERE chunk_id >= ?1 AND chunk_id < ?2 ORDER BY chunk_id",
            )
            .map_err(sql_error("read chunks"))?;
        let prefixes: std::collections::BTreeSet<[u8; 8]> = ids
            .iter()
            .map(|id| id.as_bytes()[..8].try_into().expect("8 bytes"))
            .collect();
        let mut found = Vec::with_capacity(ids.len());
        for prefix in prefixes {
            // A byte string after every ID with this prefix: the prefix plus one, as a
            // big-endian number; after a prefix of all 0xff, 33 bytes of 0xff (longer than
            // any ID, which has 32).
            let after = match u64::from_be_bytes(prefix).checked_add(1) {
                Some(next) => next.to_be_bytes().to_vec(),
                None => vec![0xff; 33],
            };
            let mut rows = stmt
                .query(rusqlite::params![prefix.as_slice(), after])
                .map_err(sql_error("read chunks"))?;
            while let Some(row) = rows.next().map_err(sql_error("read chunks"))? {
                found.push(StoredChunk {
                    id: chunk_id_column(row, 0).map_err(sql_error("read chunks"))?,
                    heading_path: decode_heading(
                        &self
                            .texts
                            .column(&self.conn, row, 1)
                            .map_err(sql_error("read chunks"))?,
                    ),
                    text: self
                        .texts
                        .column(&self.conn, row, 2)
                        .map_err(sql_error("read chunks"))?,
                });
            }
        }
        Ok(found)
    }

    /// Calls `f` for every chunk, in chunk ID order (for `rebuild` and `export`).
    pub(crate) fn for_each_chunk(
        &self,
        mut f: impl FnMut(StoredChunk) -> Result<()>,
    ) -> Result<()> {
        self.scan_chunks(|id, chunk| f(chunk.map_err(sql_error(format!("read chunk {id}")))?))
    }

    /// `for_each_chunk`, but a chunk whose stored text cannot be read (damaged) is given to
    /// `f` as `None`, with its ID, and the scan goes on (for `verify`, which names it).
    pub(crate) fn for_each_stored_chunk(
        &self,
        mut f: impl FnMut(ChunkId, Option<StoredChunk>) -> Result<()>,
    ) -> Result<()> {
        self.scan_chunks(|id, chunk| match chunk {
            Ok(chunk) => f(id, Some(chunk)),
            Err(rusqlite::Error::FromSqlConversionFailure(..)) => f(id, None),
            Err(other) => Err(sql_error(format!("read chunk {id}"))(other)),
        })
    }

    /// Calls `f` with every chunk's ID and its row as read, in chunk ID order.
    fn scan_chunks(
        &self,
        mut f: impl FnMut(ChunkId, rusqlite::Result<StoredChunk>) -> Result<()>,
    ) -> Result<()> {
        let mut stmt = self
            .conn
            .prepare("SELECT chunk_id, heading, text FROM chunks ORDER BY chunk_id")
            .map_err(sql_error("read chunks"))?;
        let mut rows = stmt.query([]).map_err(sql_error("read chunks"))?;
        while let Some(row) = rows.next().map_err(sql_error("read chunks"))? {
            let id = chunk_id_column(row, 0).map_err(sql_error("read chunks"))?;
            let chunk = self.texts.column(&self.conn, row, 1).and_then(|heading| {
                Ok(StoredChunk {
                    id,
                    heading_path: decode_heading(&heading),
                    text: self.texts.column(&self.conn, row, 2)?,
                })
            });
            f(id, chunk)?;
        }
        Ok(())
    }

    /// Damage to the links between documents and their chunks, which a writer never leaves:
    /// how many entries of documents' chunk lists name a document or chunk the ledger lacks or
    /// are missing, and the chunks (sorted) that no document references. For `verify`.
    pub(crate) fn link_damage(&self) -> Result<(u64, Vec<ChunkId>)> {
        let context = "check the chunk lists of documents";
        // Entries that name a row the ledger lacks, and entries missing from a document's list
        // (fewer than its `n_chunks`; its other chunks may be held by other documents).
        let (broken, unreferenced) = if self.has_links {
            (
                "SELECT (SELECT count(*) FROM doc_chunk_links l
                         WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_row = l.doc_row)
                            OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_row = l.chunk_row))
                      + (SELECT coalesce(sum(abs(d.n_chunks - (SELECT count(*)
                             FROM doc_chunk_links l WHERE l.doc_row = d.doc_row))), 0)
                         FROM documents d)",
                "SELECT chunk_id FROM chunks c
                 WHERE NOT EXISTS (SELECT 1 FROM doc_chunk_links l WHERE l.chunk_row = c.chunk_row)
                 ORDER BY chunk_id",
            )
        } else {
            (
                "SELECT (SELECT count(*) FROM doc_chunks l
                         WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_hash = l.doc_hash)
                            OR NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = l.chunk_id))
                      + (SELECT coalesce(sum(abs(d.n_chunks - (SELECT count(*)
                             FROM doc_chunks l WHERE l.doc_hash = d.doc_hash))), 0)
                         FROM documents d)",
                "SELECT chunk_id FROM chunks c
                 WHERE NOT EXISTS (SELECT 1 FROM doc_chunks l WHERE l.chunk_id = c.chunk_id)
                 ORDER BY chunk_id",
            )
        };
        let broken: i64 = self
            .conn
            .query_row(broken, [], |row| row.get(0))
            .map_err(sql_error(context))?;
        let mut stmt = self
            .conn
            .prepare(unreferenced)
            .map_err(sql_error(context))?;
        let ids = stmt
            .query_map([], |row| chunk_id_column(row, 0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(sql_error(context))?;
        Ok((broken as u64, ids))
    }

    /// Every chunk ID the ledger holds, sorted.
    pub fn chunk_ids(&self) -> Result<Vec<ChunkId>> {
        let mut stmt = self
            .conn
            .prepare("SELECT chunk_id FROM chunks ORDER BY chunk_id")
            .map_err(sql_error("read chunks"))?;
        let rows = stmt
            .query_map([], |row| chunk_id_column(row, 0))
            .map_err(sql_error("read chunks"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read chunks"))
    }

    /// Every place a chunk appears, sorted by root and path, one per path.
    pub(crate) fn sources_of_chunk(&self, id: &ChunkId) -> Result<Vec<ChunkSource>> {
        let mut stmt = self
            .conn
            .prepare_cached(if self.has_pages {
                "SELECT r.path, s.path, dc.ordinal, dc.line_start, dc.line_end,
                        dc.page_start, dc.page_end
                 FROM doc_chunks dc
                 JOIN sources s ON s.doc_hash = dc.doc_hash
                 JOIN roots r ON r.root_id = s.root_id
                 WHERE dc.chunk_id = ?1"
            } else {
                "SELECT r.path, s.path, dc.ordinal, dc.line_start, dc.line_end, NULL, NULL
                 FROM doc_chunks dc
                 JOIN sources s ON s.doc_hash = dc.doc_hash
                 JOIN roots r ON r.root_id = s.root_id
                 WHERE dc.chunk_id = ?1"
            })
            .map_err(sql_error("read chunk sources"))?;
        let mut rows = stmt
            .query([id.as_bytes()])
            .map_err(sql_error("read chunk sources"))?;
        let mut places = Vec::new();
        while let Some(row) = rows.next().map_err(sql_error("read chunk sources"))? {
            places.push(place_column(row, 0).map_err(sql_error("read chunk sources"))?);
        }
        Ok(sorted_sources(places))
    }

    /// Whether `chunk_with_sources` would find the chunk (the ledger holds it and a source names
    /// it), without reading its text or its places: what a search needs of the passage past its
    /// page.
    pub(crate) fn holds_chunk_with_source(&self, id: &ChunkId) -> Result<bool> {
        if !self.has_links {
            return Ok(self.chunk_with_sources(id)?.is_some());
        }
        const CONTEXT: &str = "look a chunk up";
        self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1
                 FROM chunks c
                 JOIN doc_chunk_links l ON l.chunk_row = c.chunk_row
                 JOIN documents d ON d.doc_row = l.doc_row
                 JOIN sources s ON s.doc_hash = d.doc_hash
                 JOIN roots r ON r.root_id = s.root_id
                 WHERE c.chunk_id = ?1)",
            )
            .and_then(|mut stmt| stmt.query_row([id.as_bytes()], |row| row.get(0)))
            .map_err(sql_error(CONTEXT))
    }

    /// A chunk the ledger holds now with every place it appears (as `chunks` and
    /// `sources_of_chunk` give them), or `None` when it holds the chunk no more or no source
    /// names it. One statement, where a search reads both for each hit: the two each looked
    /// the chunk up by its ID.
    pub(crate) fn chunk_with_sources(
        &self,
        id: &ChunkId,
    ) -> Result<Option<(StoredChunk, Vec<ChunkSource>)>> {
        if !self.has_links {
            // An older ledger a writer has not upgraded yet: its tables are joined another way.
            // The sources first: a chunk no source names is skipped without decoding its text.
            let sources = self.sources_of_chunk(id)?;
            if sources.is_empty() {
                return Ok(None);
            }
            return Ok(self
                .chunks(std::slice::from_ref(id))?
                .pop()
                .map(|chunk| (chunk, sources)));
        }
        const CONTEXT: &str = "read chunk and sources";
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT r.path, s.path, l.ordinal, l.line_start, l.line_end,
                        l.page_start, l.page_end, c.heading, c.text
                 FROM chunks c
                 JOIN doc_chunk_links l ON l.chunk_row = c.chunk_row
                 JOIN documents d ON d.doc_row = l.doc_row
                 JOIN sources s ON s.doc_hash = d.doc_hash
                 JOIN roots r ON r.root_id = s.root_id
                 WHERE c.chunk_id = ?1",
            )
            .map_err(sql_error(CONTEXT))?;
        let mut rows = stmt.query([id.as_bytes()]).map_err(sql_error(CONTEXT))?;
        let mut places = Vec::new();
        let mut chunk = None;
        while let Some(row) = rows.next().map_err(sql_error(CONTEXT))? {
            places.push(place_column(row, 0).map_err(sql_error(CONTEXT))?);
            if chunk.is_none() {
                // The same text on every row: decoded once.
                let heading = self
                    .texts
                    .column(&self.conn, row, 7)
                    .map_err(sql_error(CONTEXT))?;
                let text = self
                    .texts
                    .column(&self.conn, row, 8)
                    .map_err(sql_error(CONTEXT))?;
                chunk = Some(StoredChunk {
                    id: *id,
                    heading_path: decode_heading(&heading),
                    text,
                });
            }
        }
        Ok(chunk.map(|chunk| (chunk, sorted_sources(places))))
    }

    /// Every root ever ingested, by canonical path, sorted.
    pub fn roots(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT path FROM roots ORDER BY path")
            .map_err(sql_error("read roots"))?;
        let rows = stmt
            .query_map([], |row| row.get(0))
            .map_err(sql_error("read roots"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read roots"))
    }

    /// The dictionary the ledger compresses chunk text with, if it has one yet.
    pub(crate) fn text_dictionary(&self) -> Result<Option<std::sync::Arc<Dictionary>>> {
        Ok(Dictionary::of_ledger(&self.conn)?.map(std::sync::Arc::new))
    }

    /// Chunk text to train a dictionary from, from the first rows (for a ledger without one).
    pub(crate) fn text_samples(&self) -> Result<Samples> {
        let mut samples = Samples::default();
        let mut stmt = self
            .conn
            .prepare("SELECT text FROM chunks ORDER BY rowid")
            .map_err(sql_error("read chunks"))?;
        let mut rows = stmt.query([]).map_err(sql_error("read chunks"))?;
        while !samples.enough() {
            let Some(row) = rows.next().map_err(sql_error("read chunks"))? else {
                break;
            };
            let text = self
                .texts
                .column(&self.conn, row, 0)
                .map_err(sql_error("read chunks"))?;
            samples.add(std::iter::once(text.as_str()));
        }
        Ok(samples)
    }

    /// Counts for `status`.
    /// The number of chunks alone (what a no-op embedding run reports, without the other counts).
    pub fn chunk_count(&self) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM chunks", [], |row| {
                row.get::<_, i64>(0)
            })
            .map(|n| n as u64)
            .map_err(sql_error("count chunks"))
    }

    pub fn counts(&self) -> Result<Counts> {
        let count = |sql: &str| -> Result<u64> {
            self.conn
                .query_row(sql, [], |row| row.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(sql_error("count rows"))
        };
        Ok(Counts {
            documents: count("SELECT count(*) FROM documents")?,
            sources: count("SELECT count(*) FROM sources")?,
            chunks: count("SELECT count(*) FROM chunks")?,
            audit_events: count("SELECT count(*) FROM audit_events")?,
            usage_units: count("SELECT coalesce(sum(units), 0) FROM usage_events")?,
            idempotency_keys: count("SELECT count(*) FROM idempotency_keys")?,
        })
    }

    /// Records the start of an ingest run without waiting for the disk: `synchronous = NORMAL`
    /// for this one commit, which in WAL mode does not fsync the commit itself, but still
    /// fsyncs a log started afresh (its header) and any checkpoint the commit runs. (OFF would
    /// skip those too, and a checkpoint copying the log into the database unsynced can lose
    /// earlier commits in a power loss.) Nothing relies on the record being durable before the
    /// run's next commit, whose fsync makes it durable with everything before it in the log. A
    /// power loss before then loses only the record of a run that had written nothing (a
    /// shared ledger may then hold a start its replica lacks; only finished runs are ever read
    /// back from it); a killed process loses nothing, as the kernel has its pages. A run that
    /// changes nothing then waits for one commit, its end, instead of two.
    pub(crate) fn start_run(&mut self, run_id: &str, roots: &[String], now_ms: i64) -> Result<()> {
        self.conn
            .execute_batch("PRAGMA synchronous = NORMAL")
            .map_err(sql_error("record run"))?;
        let recorded = self.conn.execute(
            "INSERT INTO runs (run_id, roots, started_at) VALUES (?1, ?2, ?3)",
            params![
                run_id,
                serde_json::to_string(roots).unwrap_or_default(),
                now_ms
            ],
        );
        // Every later commit waits for the disk again, whether or not the insert went in.
        self.conn
            .execute_batch("PRAGMA synchronous = FULL")
            .map_err(sql_error("record run"))?;
        recorded.map_err(sql_error("record run"))?;
        Ok(())
    }

    /// Records the end of an ingest run with its report.
    pub(crate) fn finish_run(
        &mut self,
        run_id: &str,
        generation: Generation,
        report_json: &str,
        now_ms: i64,
    ) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error("record run"))?;
        tx.execute(
            "UPDATE runs SET finished_at = ?2, generation = ?3, report = ?4 WHERE run_id = ?1",
            params![run_id, now_ms, generation.0 as i64, report_json],
        )
        .map_err(sql_error("record run"))?;
        tx.commit().map_err(sql_error("record run"))?;
        // After the run is recorded: a failure here (a full disk) costs only the space.
        if let Err(err) = give_free_pages_back(&mut self.conn) {
            tracing::warn!(error = %err, "the ledger's free pages were not given back");
        }
        Ok(())
    }

    /// One run's row, as recorded.
    pub(crate) fn run_row(&self, run_id: &str) -> Result<Option<RunRow>> {
        replica::last_run(&self.conn, run_id)
    }

    /// When the last ingest run finished, in ms since the epoch.
    pub fn last_ingest_ms(&self) -> Result<Option<i64>> {
        // Cached: every search reads it.
        self.conn
            .prepare_cached("SELECT max(finished_at) FROM runs")
            .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
            .map_err(sql_error("read runs"))
    }
}

/// Gives the file's free pages back to the file system, in a transaction of its own after the
/// run's end is recorded, when there are 16 or more and they are a 32nd of the file or more
/// (so never after a run that changed little). A run's log rows are written with its chunks
/// and deleted once the index has them: a cold ingest left 7 % of its ledger as free pages,
/// which later runs would reuse but a new store should not carry. A ledger made with
/// `auto_vacuum = INCREMENTAL` (every one made since schema 12) gives them back page by page.
///
/// An older ledger (`auto_vacuum = NONE`) cannot, until one `VACUUM` rewrites it with the
/// setting; that is done once a quarter of it is free, which the upgrade to schema 13 leaves
/// (it copies the documents, chunks and links, and half the file was free after it; called
/// when a writer opens the ledger and at each run's end, so a rewrite killed or failed is done
/// by the next), and rarely anything else. A `VACUUM` that fails (a full disk) leaves the
/// ledger as it was.
fn give_free_pages_back(conn: &mut Connection) -> Result<()> {
    let context = "give free pages back";
    let (free, total, auto_vacuum): (i64, i64, i64) = conn
        .query_row(
            "SELECT f.freelist_count, p.page_count, a.auto_vacuum
             FROM pragma_freelist_count f, pragma_page_count p, pragma_auto_vacuum a",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .map_err(sql_error(context))?;
    if free < 16 || free * 32 < total {
        return Ok(());
    }
    if auto_vacuum == 0 {
        if free * 4 >= total {
            conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")
                .map_err(sql_error("rewrite the ledger without its free pages"))?;
            // The rewrite went through the write-ahead log, which is now the ledger's size:
            // emptied here (when no reader holds it), not when the last connection closes.
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                .map_err(sql_error("empty the write-ahead log"))?;
        }
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql_error(context))?;
    {
        // Each step of the pragma frees one page: it is stepped to its end.
        let mut stmt = tx
            .prepare("PRAGMA incremental_vacuum")
            .map_err(sql_error(context))?;
        let mut rows = stmt.query([]).map_err(sql_error(context))?;
        while rows.next().map_err(sql_error(context))?.is_some() {}
    }
    tx.commit().map_err(sql_error(context))
}

/// Writes one batch's rows in `tx` (which the caller commits or rolls back): its sources,
/// documents and chunks, one `chunk_log` row per chunk added, removed or relabelled, and, when
/// there are such rows, the next generation.
fn write_batch(
    tx: &rusqlite::Transaction<'_>,
    texts: &Texts,
    batch: &Batch,
) -> Result<BatchOutcome> {
    let current: i64 = tx
        .query_row(
            "SELECT value FROM meta WHERE name = 'generation'",
            [],
            |row| row.get(0),
        )
        .map_err(sql_error("read generation"))?;
    let generation = current + 1;
    let mut outcome = BatchOutcome::default();
    {
        let samples = batch
            .upserts
            .iter()
            .filter_map(|upsert| upsert.document.as_ref())
            .flat_map(|document| document.chunks.iter())
            .map(|chunk| chunk.text.as_str());
        // A dictionary trained where the batch was chunked, if any.
        let offered = batch
            .upserts
            .iter()
            .filter_map(|upsert| upsert.document.as_ref()?.packed.as_ref()?.dictionary())
            .next();
        let mut writer = BatchWriter {
            tx,
            texts,
            text_writer: TextWriter::for_transaction(tx, offered, samples)?,
            generation,
            outcome: &mut outcome,
            logged: HashSet::new(),
            changed_paths: Vec::new(),
            rechunked: Vec::new(),
        };
        // What the chunks the batch touches are called before it: a chunk that stays but
        // whose documents' names or fields change is logged again for the index.
        let before = writer.labels_before(batch)?;
        // Every new source is in place before any old document is released, so content
        // that moves between paths within the batch is never dropped and re-added.
        let mut released = Vec::new();
        for upsert in &batch.upserts {
            released.extend(writer.upsert(batch.root, upsert)?);
        }
        for path in &batch.deletes {
            released.extend(writer.delete(batch.root, path)?);
        }
        for doc_hash in released {
            writer.release(&doc_hash)?;
        }
        for (path, stat, recorded_ns) in &batch.stat_updates {
            writer.update_stat(batch.root, path, stat, *recorded_ns)?;
        }
        writer.log_relabelled(before)?;
        let advances = writer.outcome.chunks_added
            + writer.outcome.chunks_removed
            + writer.outcome.chunks_reindexed
            > 0;
        // A batch that logs no chunk (a rename, a move) leaves the generation where it is, and
        // so is what its sources hold from.
        let reached = if advances { generation } else { current };
        writer.mark_since(batch.root, reached)?;
    }
    if outcome.chunks_added + outcome.chunks_removed + outcome.chunks_reindexed > 0 {
        tx.execute(
            "UPDATE meta SET value = ?1 WHERE name = 'generation'",
            [generation],
        )
        .map_err(sql_error("bump generation"))?;
        outcome.generation = Some(Generation(generation as u64));
    }
    Ok(outcome)
}

/// The change set of the batch `write_batch` just wrote in `tx`, for the shared ledger.
fn batch_changes(
    tx: &rusqlite::Transaction<'_>,
    texts: &Texts,
    batch: &Batch,
    outcome: &BatchOutcome,
) -> Result<ChangeSet> {
    let reached: i64 = tx
        .query_row(
            "SELECT value FROM meta WHERE name = 'generation'",
            [],
            |row| row.get(0),
        )
        .map_err(sql_error("read generation"))?;
    let root: String = tx
        .query_row(
            "SELECT path FROM roots WHERE root_id = ?1",
            [batch.root.0],
            |row| row.get(0),
        )
        .map_err(sql_error("read root"))?;
    let paths: BTreeSet<String> = batch
        .upserts
        .iter()
        .map(|upsert| upsert.path.clone())
        .chain(batch.deletes.iter().cloned())
        .collect();
    replica::collect_batch(
        tx,
        texts,
        &root,
        &paths,
        Generation(reached as u64),
        outcome.generation.is_some(),
    )
}

/// Writes one batch's rows inside its transaction.
struct BatchWriter<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    /// Reads the chunk text the ledger holds; `text_writer` writes the batch's.
    texts: &'a Texts,
    text_writer: TextWriter,
    generation: i64,
    outcome: &'a mut BatchOutcome,
    /// The chunks this batch has logged so far.
    logged: HashSet<ChunkId>,
    /// The paths that hold other content after the batch, and the documents chunked again:
    /// their sources' `since_generation` is set once the batch knows the generation it reaches.
    changed_paths: Vec<String>,
    rechunked: Vec<DocHash>,
}

impl BatchWriter<'_> {
    /// What every existing chunk of a document the batch touches (the old and new content of
    /// each path it writes or deletes) is called before the batch.
    fn labels_before(&self, batch: &Batch) -> Result<BTreeMap<ChunkId, ChunkDocuments>> {
        let context = || "read the documents of the batch".to_string();
        let mut docs: BTreeSet<DocHash> = BTreeSet::new();
        let mut chunk_ids: BTreeSet<ChunkId> = BTreeSet::new();
        for upsert in &batch.upserts {
            docs.extend(self.source_doc(batch.root, &upsert.path)?);
            docs.insert(upsert.doc_hash);
            if let Some(document) = &upsert.document {
                chunk_ids.extend(document.chunks.iter().map(|chunk| chunk.id));
            }
        }
        for path in &batch.deletes {
            docs.extend(self.source_doc(batch.root, path)?);
        }
        let mut stmt = self
            .tx
            .prepare_cached("SELECT DISTINCT chunk_id FROM doc_chunks WHERE doc_hash = ?1")
            .map_err(sql_error(context()))?;
        for doc_hash in &docs {
            let rows = stmt
                .query_map([doc_hash.as_bytes()], |row| chunk_id_column(row, 0))
                .map_err(sql_error(context()))?;
            for id in rows {
                chunk_ids.insert(id.map_err(sql_error(context()))?);
            }
        }
        let mut before = BTreeMap::new();
        for id in chunk_ids {
            if let Some(documents) = chunk_documents(self.tx, &id).map_err(sql_error(context()))? {
                before.insert(id, documents);
            }
        }
        Ok(before)
    }

    /// Logs every chunk of `before` that the batch neither added nor removed but whose
    /// documents are now called otherwise (a rename, a document joining or leaving it, fields
    /// filled in), so the index writes it again with its new labels.
    fn log_relabelled(&mut self, before: BTreeMap<ChunkId, ChunkDocuments>) -> Result<()> {
        for (id, was) in before {
            if self.logged.contains(&id) {
                continue;
            }
            let now = chunk_documents(self.tx, &id)
                .map_err(sql_error("read the documents of a chunk"))?;
            if now.is_some_and(|now| now != was) {
                self.log("add", &id)?;
                self.outcome.chunks_reindexed += 1;
            }
        }
        Ok(())
    }

    /// Points the source at its new document; returns the document it held before, if other.
    fn upsert(&mut self, root: RootId, upsert: &SourceUpsert) -> Result<Option<DocHash>> {
        let old = self.source_doc(root, &upsert.path)?;
        if !self.has_document(&upsert.doc_hash)? {
            let Some(document) = &upsert.document else {
                return Err(Error::Inconsistent(format!(
                    "document {} of {} vanished from the ledger during the run",
                    upsert.doc_hash, upsert.path
                )));
            };
            self.insert_document(&upsert.doc_hash, document)?;
        } else if let Some(document) = &upsert.document {
            if chunks_outdated(
                self.tx,
                self.texts,
                &upsert.doc_hash,
                document.recipe_version,
            )? {
                self.rechunk(&upsert.doc_hash, document)?;
            } else {
                self.fill_fields(&upsert.doc_hash, document)?;
            }
        }
        let mut stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO sources
                   (root_id, path, doc_hash, size, mtime_ns, ctime_ns, inode, recorded_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (root_id, path) DO UPDATE SET doc_hash = excluded.doc_hash,
                   size = excluded.size, mtime_ns = excluded.mtime_ns,
                   ctime_ns = excluded.ctime_ns, inode = excluded.inode,
                   recorded_ns = excluded.recorded_ns",
            )
            .map_err(sql_error("write source"))?;
        stmt.execute(params![
            root.0,
            upsert.path,
            upsert.doc_hash.as_bytes(),
            upsert.stat.size as i64,
            upsert.stat.mtime_ns,
            upsert.stat.ctime_ns,
            upsert.stat.inode as i64,
            upsert.recorded_ns,
        ])
        .map_err(sql_error(format!("write source {}", upsert.path)))?;
        if old != Some(upsert.doc_hash) {
            self.changed_paths.push(upsert.path.clone());
        }
        Ok(old.filter(|old| *old != upsert.doc_hash))
    }

    /// Records `reached`, the generation the batch brings the ledger to, as the generation from
    /// which each path it gave other content, and each source of a document it chunked again,
    /// holds what it holds now (`read_document` pins a generation with it).
    fn mark_since(&mut self, root: RootId, reached: i64) -> Result<()> {
        let context = || "record what the sources hold from".to_string();
        for path in &self.changed_paths {
            self.tx
                .prepare_cached(
                    "UPDATE sources SET since_generation = ?3 WHERE root_id = ?1 AND path = ?2",
                )
                .and_then(|mut stmt| stmt.execute(params![root.0, path, reached]))
                .map_err(sql_error(context()))?;
        }
        for doc_hash in &self.rechunked {
            self.tx
                .prepare_cached("UPDATE sources SET since_generation = ?2 WHERE doc_hash = ?1")
                .and_then(|mut stmt| stmt.execute(params![doc_hash.as_bytes(), reached]))
                .map_err(sql_error(context()))?;
        }
        Ok(())
    }

    /// Deletes the source; returns the document it held.
    fn delete(&mut self, root: RootId, path: &str) -> Result<Option<DocHash>> {
        let old = self.source_doc(root, path)?;
        self.tx
            .prepare_cached("DELETE FROM sources WHERE root_id = ?1 AND path = ?2")
            .and_then(|mut stmt| stmt.execute(params![root.0, path]))
            .map_err(sql_error(format!("delete source {path}")))?;
        Ok(old)
    }

    fn update_stat(
        &mut self,
        root: RootId,
        path: &str,
        stat: &FileStat,
        recorded_ns: i64,
    ) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE sources SET size = ?3, mtime_ns = ?4, ctime_ns = ?5, inode = ?6,
                   recorded_ns = ?7
                 WHERE root_id = ?1 AND path = ?2",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    root.0,
                    path,
                    stat.size as i64,
                    stat.mtime_ns,
                    stat.ctime_ns,
                    stat.inode as i64,
                    recorded_ns
                ])
            })
            .map_err(sql_error(format!("update stat of {path}")))?;
        Ok(())
    }

    fn source_doc(&self, root: RootId, path: &str) -> Result<Option<DocHash>> {
        self.tx
            .prepare_cached("SELECT doc_hash FROM sources WHERE root_id = ?1 AND path = ?2")
            .and_then(|mut stmt| {
                stmt.query_row(params![root.0, path], |row| doc_hash_column(row, 0))
                    .optional()
            })
            .map_err(sql_error("read source"))
    }

    fn has_document(&self, doc_hash: &DocHash) -> Result<bool> {
        self.tx
            .prepare_cached("SELECT 1 FROM documents WHERE doc_hash = ?1")
            .and_then(|mut stmt| stmt.exists([doc_hash.as_bytes()]))
            .map_err(sql_error("read documents"))
    }

    /// Fills in the fields of a document recorded without them (by schema version 2).
    fn fill_fields(&mut self, doc_hash: &DocHash, document: &NewDocument) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE documents SET fields = ?2 WHERE doc_hash = ?1 AND fields IS NULL",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    doc_hash.as_bytes(),
                    encode_fields(&document.fields)
                ])
            })
            .map_err(sql_error(format!(
                "write the fields of document {doc_hash}"
            )))?;
        Ok(())
    }

    /// Replaces the chunks of a document the ledger has, made by an older groundidx, by those
    /// its file gives now (the same document: its bytes are what its hash names). The new
    /// chunks are written first, then every old chunk no document references any more is
    /// removed, so a chunk both lists hold stays in the index.
    fn rechunk(&mut self, doc_hash: &DocHash, document: &NewDocument) -> Result<()> {
        let context = || format!("chunk document {doc_hash} again");
        self.rechunked.push(*doc_hash);
        let old_ids = self.remove_document_rows(doc_hash, &context)?;
        self.insert_document(doc_hash, document)?;
        self.drop_unreferenced(&old_ids, &context)
    }

    /// Removes (and logs) every chunk of `ids` that no document references.
    fn drop_unreferenced(&mut self, ids: &[ChunkId], context: &dyn Fn() -> String) -> Result<()> {
        for chunk_id in ids {
            let referenced = self
                .tx
                .prepare_cached(
                    "SELECT 1 FROM doc_chunk_links
                     WHERE chunk_row = (SELECT chunk_row FROM chunks WHERE chunk_id = ?1)",
                )
                .and_then(|mut stmt| stmt.exists([chunk_id.as_bytes()]))
                .map_err(sql_error(context()))?;
            if !referenced {
                self.tx
                    .prepare_cached("DELETE FROM chunks WHERE chunk_id = ?1")
                    .and_then(|mut stmt| stmt.execute([chunk_id.as_bytes()]))
                    .map_err(sql_error(context()))?;
                self.log("remove", chunk_id)?;
                self.outcome.chunks_removed += 1;
            }
        }
        Ok(())
    }

    fn insert_document(&mut self, doc_hash: &DocHash, document: &NewDocument) -> Result<()> {
        let context = || format!("write document {doc_hash}");
        let doc_row: i64 = self
            .tx
            .prepare_cached(
                "INSERT INTO documents (doc_hash, title, n_chunks, fields, recipe_version)
                 VALUES (?1, ?2, ?3, ?4, ?5) RETURNING doc_row",
            )
            .and_then(|mut stmt| {
                stmt.query_row(
                    params![
                        doc_hash.as_bytes(),
                        document.title,
                        document.chunks.len() as i64,
                        encode_fields(&document.fields),
                        document.recipe_version,
                    ],
                    |row| row.get(0),
                )
            })
            .map_err(sql_error(context()))?;
        let mut tag_stmt = self
            .tx
            .prepare_cached("INSERT OR IGNORE INTO doc_tags (doc_hash, tag) VALUES (?1, ?2)")
            .map_err(sql_error(context()))?;
        for tag in &document.tags {
            tag_stmt
                .execute(params![doc_hash.as_bytes(), tag])
                .map_err(sql_error(context()))?;
        }
        let mut link_stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO doc_chunk_links
                    (doc_row, ordinal, chunk_row, short_key, line_start, line_end, page_start,
                     page_end)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(sql_error(context()))?;
        let mut held_stmt = self
            .tx
            .prepare_cached("SELECT chunk_row FROM chunks WHERE chunk_id = ?1")
            .map_err(sql_error(context()))?;
        let mut chunk_stmt = self
            .tx
            .prepare_cached("INSERT INTO chunks (chunk_id, heading, text) VALUES (?1, ?2, ?3)")
            .map_err(sql_error(context()))?;
        for (index, chunk) in document.chunks.iter().enumerate() {
            // A chunk the ledger holds (another document's, or this one's further up) is
            // linked as it is, not compressed again only to be ignored.
            let held: Option<i64> = held_stmt
                .query_row([chunk.id.as_bytes()], |row| row.get(0))
                .optional()
                .map_err(sql_error(context()))?;
            let chunk_row = match held {
                Some(chunk_row) => chunk_row,
                None => {
                    let heading = encode_heading(&chunk.heading_path);
                    let [heading_value, text_value] = match self.text_writer.packed(
                        document.packed.as_ref(),
                        index,
                        &heading,
                        &chunk.text,
                    ) {
                        Some(values) => values,
                        None => [
                            self.text_writer.value(&heading)?,
                            self.text_writer.value(&chunk.text)?,
                        ],
                    };
                    chunk_stmt
                        .execute(params![chunk.id.as_bytes(), heading_value, text_value])
                        .map_err(sql_error(context()))?;
                    // Taken before the log's own insert moves it.
                    let chunk_row = self.tx.last_insert_rowid();
                    self.log("add", &chunk.id)?;
                    self.outcome.chunks_added += 1;
                    chunk_row
                }
            };
            link_stmt
                .execute(params![
                    doc_row,
                    chunk.ordinal,
                    chunk_row,
                    chunk.id.short() as i64,
                    chunk.lines.0,
                    chunk.lines.1,
                    chunk.pages.map(|pages| pages.0),
                    chunk.pages.map(|pages| pages.1)
                ])
                .map_err(sql_error(context()))?;
        }
        Ok(())
    }

    /// Drops a document that no source holds any more, and the chunks only it referenced.
    fn release(&mut self, doc_hash: &DocHash) -> Result<()> {
        let still_held = self
            .tx
            .prepare_cached("SELECT 1 FROM sources WHERE doc_hash = ?1")
            .and_then(|mut stmt| stmt.exists([doc_hash.as_bytes()]))
            .map_err(sql_error("read sources"))?;
        if still_held {
            return Ok(());
        }
        let context = || format!("release document {doc_hash}");
        let chunk_ids = self.remove_document_rows(doc_hash, &context)?;
        self.drop_unreferenced(&chunk_ids, &context)
    }

    /// Deletes a document's rows (its chunk list, tags and the document) and returns the
    /// distinct chunk IDs it referenced, for the caller to drop those no document holds now.
    fn remove_document_rows(
        &mut self,
        doc_hash: &DocHash,
        context: &dyn Fn() -> String,
    ) -> Result<Vec<ChunkId>> {
        let chunk_ids: Vec<ChunkId> = self
            .tx
            .prepare_cached("SELECT DISTINCT chunk_id FROM doc_chunks WHERE doc_hash = ?1")
            .and_then(|mut stmt| {
                stmt.query_map([doc_hash.as_bytes()], |row| chunk_id_column(row, 0))
                    .and_then(|rows| rows.collect())
            })
            .map_err(sql_error(context()))?;
        for sql in [
            "DELETE FROM doc_chunk_links
             WHERE doc_row = (SELECT doc_row FROM documents WHERE doc_hash = ?1)",
            "DELETE FROM doc_tags WHERE doc_hash = ?1",
            "DELETE FROM documents WHERE doc_hash = ?1",
        ] {
            self.tx
                .prepare_cached(sql)
                .and_then(|mut stmt| stmt.execute([doc_hash.as_bytes()]))
                .map_err(sql_error(context()))?;
        }
        Ok(chunk_ids)
    }

    fn log(&mut self, op: &str, chunk_id: &ChunkId) -> Result<()> {
        self.tx
            .prepare_cached("INSERT INTO chunk_log (generation, op, chunk_id) VALUES (?1, ?2, ?3)")
            .and_then(|mut stmt| stmt.execute(params![self.generation, op, chunk_id.as_bytes()]))
            .map_err(sql_error("write chunk log"))?;
        self.logged.insert(*chunk_id);
        Ok(())
    }
}

/// True when the file system holding `path` is mounted read-only: nothing can write there,
/// so no writer can change the ledger while it stays so.
pub(crate) fn on_read_only_mount(path: &Path) -> bool {
    rustix::fs::statvfs(path)
        .is_ok_and(|stat| stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

/// True when the file system holding `path` is itself read-only and local, as
/// `/proc/self/mountinfo` says: the super block's options hold `ro`, and it is no network or
/// FUSE file system. A read-only mount alone is not enough: a read-only bind mount of a
/// writable file system (`docker run -v DIR:DIR:ro`) is written through its other mounts.
/// False when it cannot be told.
fn file_system_is_read_only(path: &Path) -> bool {
    let Ok(folder) = path.parent().unwrap_or(path).canonicalize() else {
        return false;
    };
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    mount_of(&mountinfo, &folder).is_some_and(|mount| mount.is_read_only_and_local())
}

/// One line of `/proc/self/mountinfo`, the parts `file_system_is_read_only` reads.
#[derive(Debug, PartialEq, Eq)]
struct MountLine {
    mount_point: PathBuf,
    fs_type: String,
    super_options: String,
}

impl MountLine {
    /// The file system itself is read-only (its super block's options hold `ro`) and no other
    /// machine or user-space daemon can change it (no network or FUSE file system).
    fn is_read_only_and_local(&self) -> bool {
        const SHARED: &[&str] = &[
            "nfs",
            "nfs4",
            "cifs",
            "smb3",
            "smbfs",
            "ceph",
            "glusterfs",
            "9p",
            "afs",
            "lustre",
            "gfs2",
            "ocfs2",
            "virtiofs",
        ];
        self.super_options.split(',').any(|option| option == "ro")
            && !SHARED.contains(&self.fs_type.as_str())
            && !self.fs_type.starts_with("fuse")
    }
}

/// The mount that holds `folder` (a canonical path): the last mounted of those whose mount
/// point is the longest prefix of it.
fn mount_of(mountinfo: &str, folder: &Path) -> Option<MountLine> {
    let mut best: Option<MountLine> = None;
    for line in mountinfo.lines() {
        let Some(mount) = parse_mount_line(line) else {
            continue;
        };
        if !folder.starts_with(&mount.mount_point) {
            continue;
        }
        let longer = best.as_ref().is_none_or(|best| {
            mount.mount_point.as_os_str().len() >= best.mount_point.as_os_str().len()
        });
        if longer {
            best = Some(mount);
        }
    }
    best
}

/// `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL…] - FS_TYPE SOURCE SUPER_OPTIONS`, with
/// white space and backslashes in paths written as octal escapes (`\040`).
fn parse_mount_line(line: &str) -> Option<MountLine> {
    let (before, after) = line.split_once(" - ")?;
    let mount_point = before.split(' ').nth(4)?;
    let mut after = after.split(' ');
    let fs_type = after.next()?.to_string();
    let _source = after.next()?;
    let super_options = after.next()?.to_string();
    Some(MountLine {
        mount_point: PathBuf::from(unescape_mount_path(mount_point)),
        fs_type,
        super_options,
    })
}

/// Undoes the kernel's octal escapes in a mountinfo path (`\040` is a space).
fn unescape_mount_path(escaped: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |value, d| value * 8 + u32::from(d - b'0'));
                out.push(value as u8);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// The ledger's write-ahead log file.
fn wal_file(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// The URI that opens `path` as an immutable database. Every byte that is not unreserved in a
/// URI (RFC 3986) or `/` is percent-encoded, so that a `?`, `#` or `%` in a folder's name stays
/// part of the path.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// The error for a ledger on a read-only mount of a file system that can still be written
/// elsewhere (a bind mount, a network file system), with no write-ahead log: SQLite could read
/// it safely only with a `-shm` file it cannot make there.
fn writable_elsewhere_on_read_only_mount(path: &Path) -> Error {
    Error::io(
        format!("open {}", path.display()),
        std::io::Error::new(
            std::io::ErrorKind::ReadOnlyFilesystem,
            "the ledger is on a read-only mount of a file system that can still be written elsewhere (a read-only bind mount or a network file system), where SQLite cannot read it safely without the `-shm` file it would make\nhint: give this reader the store folder read-write, or a copy of the store on a file system of its own that is read-only as a whole (an image layer, a snapshot)",
        ),
    )
}

/// True for SQLite's refusals to open a file (or to make one it needs, as the `-shm`).
fn is_cannot_open(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
    )
}

/// The error for a ledger on a read-only mount whose write-ahead log SQLite could not read
/// there (its `-shm` file is missing, and cannot be made there): names the cause and the fix.
fn unreadable_log_on_read_only_mount(path: &Path) -> Error {
    Error::io(
        format!("open {}", path.display()),
        std::io::Error::new(
            std::io::ErrorKind::ReadOnlyFilesystem,
            format!(
                "the ledger is on a read-only file system, beside a write-ahead log ({}) that SQLite cannot read there without its `-shm` file\nhint: mount it read-write and run `groundidx status` on the store once (it makes the missing `-shm` file; any writer folds the log into the ledger instead), then mount it read-only again",
                wal_file(path).display()
            ),
        ),
    )
}

/// Maps a rusqlite error to the library's: busy and locked become the retryable `Busy`.
pub(crate) fn sql_error(context: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> Error {
    let context = context.into();
    move |source| match source.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            Error::Busy { context }
        }
        _ => Error::Ledger { context, source },
    }
}

pub(crate) fn doc_hash_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<DocHash> {
    let bytes: Vec<u8> = row.get(index)?;
    DocHash::from_slice(&bytes).ok_or_else(|| bad_blob(index))
}

pub(crate) fn chunk_id_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<ChunkId> {
    let bytes: Vec<u8> = row.get(index)?;
    ChunkId::from_slice(&bytes).ok_or_else(|| bad_blob(index))
}

fn bad_blob(index: usize) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        index,
        rusqlite::types::Type::Blob,
        "a hash column does not hold 32 bytes".into(),
    )
}

/// Whether a document's chunks were made by an older groundidx (or altered since): its recorded
/// recipe version is under `recipe_version`, or its first chunk's ID is not `ids::chunk_id` of
/// the chunk's stored heading path and text. A document's chunks are written together, by one
/// recipe, so the first tells for all. A document of an older recipe counts even without
/// chunks (a newer recipe may find some: one of headings alone); one not in the ledger has
/// nothing to make again.
fn chunks_outdated(
    conn: &Connection,
    texts: &Texts,
    doc_hash: &DocHash,
    recipe_version: u32,
) -> Result<bool> {
    let recorded: Option<u32> = conn
        .prepare_cached("SELECT recipe_version FROM documents WHERE doc_hash = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([doc_hash.as_bytes()], |row| row.get(0))
                .optional()
        })
        .map_err(sql_error(format!("read document {doc_hash}")))?;
    if recorded.is_some_and(|recorded| recorded < recipe_version) {
        return Ok(true);
    }
    let first = conn
        .prepare_cached(
            "SELECT c.chunk_id, c.heading, c.text FROM doc_chunks dc
             JOIN chunks c ON c.chunk_id = dc.chunk_id
             WHERE dc.doc_hash = ?1 ORDER BY dc.ordinal LIMIT 1",
        )
        .and_then(|mut stmt| {
            stmt.query_row([doc_hash.as_bytes()], |row| {
                Ok((
                    chunk_id_column(row, 0)?,
                    texts.column(conn, row, 1)?,
                    texts.column(conn, row, 2)?,
                ))
            })
            .optional()
        })
        .map_err(sql_error(format!("read the chunks of document {doc_hash}")))?;
    Ok(first.is_some_and(|(id, heading, text)| {
        crate::ids::check_chunk_id(&id, &decode_heading(&heading), &text)
            != crate::ids::ChunkIdCheck::Current
    }))
}

/// What the documents holding chunk `id` are called; `None` when no document holds it.
fn chunk_documents(conn: &Connection, id: &ChunkId) -> rusqlite::Result<Option<ChunkDocuments>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT d.fields, s.path, d.title
         FROM doc_chunks dc
         JOIN documents d ON d.doc_hash = dc.doc_hash
         LEFT JOIN sources s ON s.doc_hash = dc.doc_hash
         WHERE dc.chunk_id = ?1",
    )?;
    let mut rows = stmt.query([id.as_bytes()])?;
    let mut held = false;
    let mut names = BTreeSet::new();
    let mut fields = BTreeSet::new();
    let mut titles = BTreeSet::new();
    while let Some(row) = rows.next()? {
        held = true;
        if let Some(title) = row.get::<_, Option<String>>(2)? {
            titles.insert(title);
        }
        if let Some(json) = row.get::<_, Option<String>>(0)? {
            fields.extend(decode_fields(&json));
        }
        if let Some(path) = row.get::<_, Option<String>>(1)? {
            names.insert(file_stem(&path).to_string());
        }
    }
    Ok(held.then(|| ChunkDocuments {
        names: names.into_iter().collect(),
        fields: fields.into_iter().collect(),
        titles: titles.into_iter().collect(),
    }))
}

/// The file name of a source path without its last extension: `pages/common/tar.md` is `tar`,
/// `v2.3.1-notes.txt` is `v2.3.1-notes`, `.profile` stays `.profile`.
fn file_stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name.rfind('.') {
        Some(at) if at > 0 => &name[..at],
        _ => name,
    }
}

/// A document's fields as the ledger stores them: a JSON object of strings, capped at
/// `MAX_FIELDS` fields and `MAX_FIELD_CHARS` characters per key or value.
fn encode_fields(fields: &BTreeMap<String, String>) -> String {
    let cut = |text: &str| -> String { text.chars().take(MAX_FIELD_CHARS).collect() };
    let kept: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .take(MAX_FIELDS)
        .map(|(key, value)| (cut(key), serde_json::Value::String(cut(value))))
        .collect();
    serde_json::Value::Object(kept).to_string()
}

/// The `(key, value)` pairs of a stored fields object; anything else in it is ignored.
fn decode_fields(json: &str) -> Vec<(String, String)> {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter_map(|(key, value)| match value {
                serde_json::Value::String(text) => Some((key, text)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn encode_heading(heading_path: &[String]) -> String {
    serde_json::to_string(heading_path).expect("a list of strings always serialises")
}

/// One place of a chunk from the columns from `first` on: root, path, ordinal, first and last
/// line, first and last page.
fn place_column(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<(ChunkSource, i64)> {
    let source = ChunkSource {
        root: row.get(first)?,
        path: row.get(first + 1)?,
        lines: (row.get(first + 3)?, row.get(first + 4)?),
        pages: match (
            row.get::<_, Option<u32>>(first + 5)?,
            row.get::<_, Option<u32>>(first + 6)?,
        ) {
            (Some(start), Some(end)) => Some((start, end)),
            _ => None,
        },
    };
    Ok((source, row.get(first + 2)?))
}

/// The places of a chunk by root, path and ordinal (byte order, as SQLite's `ORDER BY` on
/// text), each path once: a passage repeated inside one document is listed at its first place.
/// Sorted here rather than by the statement, which would build a temporary B-tree for a row or
/// two.
fn sorted_sources(mut places: Vec<(ChunkSource, i64)>) -> Vec<ChunkSource> {
    places.sort_unstable_by(|(a, a_ordinal), (b, b_ordinal)| {
        (&a.root, &a.path, a_ordinal).cmp(&(&b.root, &b.path, b_ordinal))
    });
    let mut sources: Vec<ChunkSource> = places.into_iter().map(|(source, _)| source).collect();
    sources.dedup_by(|a, b| a.root == b.root && a.path == b.path);
    sources
}

fn decode_heading(json: &str) -> Vec<String> {
    serde_json::from_str(json).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{Access, Ledger, MountLine, mount_of, parse_mount_line};

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /srv/store rw,relatime shared:20 - tmpfs tmpfs rw,size=1024k
41 22 0:36 / /srv/snap ro,relatime shared:21 - tmpfs tmpfs ro,size=1024k
42 22 0:35 / /srv/bind ro,relatime shared:20 - tmpfs tmpfs rw,size=1024k
43 22 0:40 / /srv/nfs ro,relatime - nfs4 host:/export ro,vers=4.2
44 22 0:41 / /srv/with\\040space ro master:3 - squashfs /dev/loop0 ro
";

    #[test]
    fn the_last_ingest_is_found_by_an_index_not_by_reading_every_run() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut ledger =
            Ledger::open(&dir.path().join("ledger.sqlite"), Access::ReadWrite).expect("ledger");
        for (i, finished) in [(0, Some(5_000)), (1, Some(9_000)), (2, None)] {
            let id = format!("run-{i}");
            ledger.start_run(&id, &[], 1_000).expect("start");
            if let Some(at) = finished {
                ledger
                    .finish_run(&id, crate::ids::Generation(1), "{}", at)
                    .expect("finish");
            }
        }
        assert_eq!(ledger.last_ingest_ms().expect("read"), Some(9_000));
        let plan: Vec<String> = ledger
            .conn
            .prepare("EXPLAIN QUERY PLAN SELECT max(finished_at) FROM runs")
            .expect("plan")
            .query_map([], |row| row.get::<_, String>(3))
            .expect("plan")
            .collect::<rusqlite::Result<_>>()
            .expect("plan");
        assert!(
            plan.iter().any(|step| step.contains("runs_by_finish")),
            "the last ingest reads every run: {plan:?}"
        );
    }

    #[test]
    fn every_commit_after_a_run_start_waits_for_the_disk_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut ledger =
            Ledger::open(&dir.path().join("ledger.sqlite"), Access::ReadWrite).expect("ledger");
        let synchronous = |ledger: &Ledger| -> i64 {
            ledger
                .conn
                .query_row("PRAGMA synchronous", [], |row| row.get(0))
                .expect("read synchronous")
        };
        // 2 is FULL: each commit is fsynced before it returns.
        assert_eq!(synchronous(&ledger), 2);
        ledger.start_run("run-1", &[], 1_000).expect("start");
        assert_eq!(synchronous(&ledger), 2, "after a run's start");
        assert!(ledger.run_row("run-1").expect("read run").is_some());
        // A start that fails (the run's ID taken) leaves it FULL too.
        assert!(ledger.start_run("run-1", &[], 2_000).is_err());
        assert_eq!(synchronous(&ledger), 2, "after a run's start failed");
    }

    fn mount(folder: &str) -> Option<MountLine> {
        mount_of(MOUNTINFO, Path::new(folder))
    }

    #[test]
    fn the_mount_of_a_folder_is_the_longest_mount_point_above_it() {
        let line = |point: &str, fs_type: &str, super_options: &str| MountLine {
            mount_point: PathBuf::from(point),
            fs_type: fs_type.into(),
            super_options: super_options.into(),
        };
        assert_eq!(mount("/home/me"), Some(line("/", "ext4", "rw")));
        assert_eq!(
            mount("/srv/snap/store"),
            Some(line("/srv/snap", "tmpfs", "ro,size=1024k"))
        );
        // A read-only bind mount of a writable file system: the super block says rw.
        assert_eq!(
            mount("/srv/bind"),
            Some(line("/srv/bind", "tmpfs", "rw,size=1024k"))
        );
        // `/srv/snapshot` is not under `/srv/snap`: components, not characters, are compared.
        assert_eq!(mount("/srv/snapshot"), Some(line("/", "ext4", "rw")));
        assert_eq!(
            mount("/srv/with space/x"),
            Some(line("/srv/with space", "squashfs", "ro"))
        );
        assert_eq!(parse_mount_line("garbage"), None);
    }

    #[test]
    fn only_a_read_only_local_file_system_is_trusted_to_stay_as_it_is() {
        let trusted = |folder: &str| mount(folder).is_some_and(|m| m.is_read_only_and_local());
        assert!(trusted("/srv/snap/store"));
        assert!(trusted("/srv/with space/store"));
        assert!(!trusted("/srv/store"), "a writable tmpfs");
        assert!(
            !trusted("/srv/bind/store"),
            "a read-only bind mount of a writable one"
        );
        assert!(!trusted("/srv/nfs/store"), "a network file system");
    }

    #[test]
    fn a_panic_inside_a_read_snapshot_ends_its_transaction() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ledger.sqlite");
        drop(Ledger::open(&path, Access::ReadWrite).expect("create"));
        let ledger = Ledger::open(&path, Access::ReadOnly).expect("open");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ledger.read_snapshot(|_| -> crate::error::Result<()> { panic!("inside") })
        }));
        assert!(panicked.is_err());
        // The connection is out of the transaction: another snapshot begins.
        ledger
            .read_snapshot(super::Ledger::generation)
            .expect("a second snapshot");
    }
}
