//! The ledger read by document: the filters every reader shares (root, path prefix or glob,
//! tags, front-matter fields), the documents that pass them, one document found by its path,
//! and a document's passages in order. What `list_documents`, `read_document` and the MCP
//! resources answer from; `chunks_matching` (search's filter) uses the same conditions.

use std::collections::{BTreeMap, HashSet};

use globset::GlobMatcher;
use rusqlite::params_from_iter;

use super::{Ledger, chunk_id_column, decode_fields, decode_heading, doc_hash_column, sql_error};
use crate::error::{Error, Result};
use crate::ids::{DocHash, Generation};
use crate::ledger::{ChunkFilter, DocumentEntry, Listing, Passage, path_glob};

/// What a filter checks in Rust rather than SQL: the glob, and field values and title words,
/// whose case is folded for all of Unicode (SQLite's `lower` folds ASCII alone).
struct Checks {
    glob: Option<GlobMatcher>,
    /// Keys, and values folded.
    fields: Vec<(String, String)>,
    /// Folded.
    title: Option<String>,
}

impl Checks {
    fn new(filter: &ChunkFilter, title: Option<&str>) -> Result<Checks> {
        Ok(Checks {
            glob: filter
                .path_glob
                .as_deref()
                .map(path_glob)
                .transpose()
                .map_err(Error::Usage)?,
            fields: filter
                .fields
                .iter()
                .map(|(key, value)| (key.clone(), value.to_lowercase()))
                .collect(),
            title: title.map(str::to_lowercase),
        })
    }

    /// Whether the fields matter (else they need not be read).
    fn reads_fields(&self) -> bool {
        !self.fields.is_empty()
    }

    fn passes(&self, path: &str, title: Option<&str>, fields: &BTreeMap<String, String>) -> bool {
        self.glob.as_ref().is_none_or(|glob| glob.is_match(path))
            && self.fields.iter().all(|(key, value)| {
                fields
                    .get(key)
                    .is_some_and(|held| held.to_lowercase() == *value)
            })
            && self.title.as_ref().is_none_or(|words| {
                title.is_some_and(|title| title.to_lowercase().contains(words.as_str()))
            })
    }
}

fn fields_of(json: Option<String>) -> BTreeMap<String, String> {
    json.map(|json| decode_fields(&json).into_iter().collect())
        .unwrap_or_default()
}

/// The SQL conditions of a filter on `s` (sources), `r` (roots) and `d` (documents), with
/// their arguments. The glob, fields and title are not SQL: `Checks` matches them.
fn conditions(filter: &ChunkFilter) -> (String, Vec<String>) {
    let mut sql = String::new();
    let mut args: Vec<String> = Vec::new();
    let arg = |args: &mut Vec<String>, value: &str| -> usize {
        args.push(value.to_string());
        args.len()
    };
    if let Some(prefix) = &filter.path_prefix {
        let n = arg(&mut args, prefix);
        sql.push_str(&format!(" AND substr(s.path, 1, length(?{n})) = ?{n}"));
    }
    if let Some(root) = &filter.root {
        let n = arg(&mut args, root);
        sql.push_str(&format!(" AND r.path = ?{n}"));
    }
    for tag in &filter.tags {
        let n = arg(&mut args, &tag.to_lowercase());
        sql.push_str(&format!(
            " AND EXISTS (SELECT 1 FROM doc_tags t WHERE t.doc_hash = s.doc_hash AND t.tag = ?{n})"
        ));
    }
    (sql, args)
}

impl Ledger {
    /// The short keys (`ChunkId::short`) of the chunks that pass `filter`.
    pub(crate) fn chunks_matching(&self, filter: &ChunkFilter) -> Result<HashSet<u64>> {
        let checks = Checks::new(filter, None)?;
        let (conditions, args) = conditions(filter);
        let fields = if checks.reads_fields() {
            "d.fields"
        } else {
            "NULL"
        };
        // Since schema 13 the links hold each chunk's short key: the filter reads them alone,
        // not the chunks' rows (their text), which `doc_chunks`, a view, would join.
        let sql = if self.has_links {
            format!(
                "SELECT l.short_key, s.path, {fields} FROM doc_chunk_links l
                 JOIN documents d ON d.doc_row = l.doc_row
                 JOIN sources s ON s.doc_hash = d.doc_hash
                 JOIN roots r ON r.root_id = s.root_id
                 WHERE 1 = 1{conditions}"
            )
        } else {
            format!(
                "SELECT dc.chunk_id, s.path, {fields} FROM doc_chunks dc
                 JOIN sources s ON s.doc_hash = dc.doc_hash
                 JOIN roots r ON r.root_id = s.root_id
                 JOIN documents d ON d.doc_hash = s.doc_hash
                 WHERE 1 = 1{conditions}"
            )
        };
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(sql_error("filter chunks"))?;
        let mut rows = stmt
            .query(params_from_iter(args.iter()))
            .map_err(sql_error("filter chunks"))?;
        let mut keys = HashSet::new();
        while let Some(row) = rows.next().map_err(sql_error("filter chunks"))? {
            let path: String = row.get(1).map_err(sql_error("filter chunks"))?;
            let fields = fields_of(row.get(2).map_err(sql_error("filter chunks"))?);
            if checks.passes(&path, None, &fields) {
                let key = if self.has_links {
                    row.get::<_, i64>(0).map_err(sql_error("filter chunks"))? as u64
                } else {
                    chunk_id_column(row, 0)
                        .map_err(sql_error("filter chunks"))?
                        .short()
                };
                keys.insert(key);
            }
        }
        Ok(keys)
    }

    /// The documents that pass `filter` (and whose title holds `title`, ignoring case), by root
    /// and path, `limit` of them after the first `offset`.
    pub(crate) fn documents_matching(
        &self,
        filter: &ChunkFilter,
        title: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Result<Listing> {
        let checks = Checks::new(filter, title)?;
        let (conditions, args) = conditions(filter);
        let mut entries = Vec::with_capacity(limit.min(1024) + 1);
        let mut skipped = 0;
        self.for_each_entry(&conditions, &args, |entry| {
            if !checks.passes(&entry.path, entry.title.as_deref(), &entry.fields) {
                return Ok(true);
            }
            if skipped < offset {
                skipped += 1;
                return Ok(true);
            }
            entries.push(entry);
            Ok(entries.len() <= limit)
        })?;
        let more = entries.len() > limit;
        entries.truncate(limit);
        for entry in &mut entries {
            entry.tags = self.tags_of(&entry.doc_hash)?;
        }
        Ok(Listing {
            documents: entries,
            more,
        })
    }

    /// The documents at `path`: under `root` when given, else under every root that has it.
    pub(crate) fn documents_at(
        &self,
        root: Option<&str>,
        path: &str,
    ) -> Result<Vec<DocumentEntry>> {
        let filter = ChunkFilter {
            root: root.map(str::to_string),
            ..ChunkFilter::default()
        };
        let (mut conditions, mut args) = conditions(&filter);
        args.push(path.to_string());
        conditions.push_str(&format!(" AND s.path = ?{}", args.len()));
        let mut entries = Vec::new();
        self.for_each_entry(&conditions, &args, |entry| {
            entries.push(entry);
            Ok(true)
        })?;
        for entry in &mut entries {
            entry.tags = self.tags_of(&entry.doc_hash)?;
        }
        Ok(entries)
    }

    /// The passages of a document, in order.
    pub fn passages(&self, doc_hash: &DocHash) -> Result<Vec<Passage>> {
        let sql = if self.has_pages {
            "SELECT dc.ordinal, dc.chunk_id, c.heading, c.text, dc.line_start, dc.line_end,
                    dc.page_start, dc.page_end
             FROM doc_chunks dc JOIN chunks c ON c.chunk_id = dc.chunk_id
             WHERE dc.doc_hash = ?1 ORDER BY dc.ordinal"
        } else {
            "SELECT dc.ordinal, dc.chunk_id, c.heading, c.text, dc.line_start, dc.line_end,
                    NULL, NULL
             FROM doc_chunks dc JOIN chunks c ON c.chunk_id = dc.chunk_id
             WHERE dc.doc_hash = ?1 ORDER BY dc.ordinal"
        };
        let context = || format!("read the passages of document {doc_hash}");
        let mut stmt = self
            .conn
            .prepare_cached(sql)
            .map_err(sql_error(context()))?;
        let rows = stmt
            .query_map([doc_hash.as_bytes()], |row| {
                Ok(Passage {
                    ordinal: row.get(0)?,
                    chunk_id: chunk_id_column(row, 1)?,
                    heading_path: decode_heading(&self.texts.column(&self.conn, row, 2)?),
                    text: self.texts.column(&self.conn, row, 3)?,
                    lines: (row.get(4)?, row.get(5)?),
                    pages: match (row.get::<_, Option<u32>>(6)?, row.get::<_, Option<u32>>(7)?) {
                        (Some(first), Some(last)) => Some((first, last)),
                        _ => None,
                    },
                })
            })
            .map_err(sql_error(context()))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error(context()))
    }

    /// Calls `f` with each source that passes `conditions`, by root and path, until it returns
    /// false. Tags are left empty (`tags_of` fills them for the entries kept).
    fn for_each_entry(
        &self,
        conditions: &str,
        args: &[String],
        mut f: impl FnMut(DocumentEntry) -> Result<bool>,
    ) -> Result<()> {
        let since = if self.has_since {
            "s.since_generation"
        } else {
            "(SELECT value FROM meta WHERE name = 'generation')"
        };
        let sql = format!(
            "SELECT r.path, s.path, s.doc_hash, d.title, d.n_chunks, d.fields, {since}
             FROM sources s
             JOIN roots r ON r.root_id = s.root_id
             JOIN documents d ON d.doc_hash = s.doc_hash
             WHERE 1 = 1{conditions}
             ORDER BY r.path, s.path"
        );
        let context = || "list documents".to_string();
        let mut stmt = self.conn.prepare(&sql).map_err(sql_error(context()))?;
        let mut rows = stmt
            .query(params_from_iter(args.iter()))
            .map_err(sql_error(context()))?;
        while let Some(row) = rows.next().map_err(sql_error(context()))? {
            let entry = (|| -> rusqlite::Result<DocumentEntry> {
                Ok(DocumentEntry {
                    root: row.get(0)?,
                    path: row.get(1)?,
                    doc_hash: doc_hash_column(row, 2)?,
                    title: row.get(3)?,
                    tags: Vec::new(),
                    fields: fields_of(row.get(5)?),
                    chunks: row.get::<_, i64>(4)?.max(0) as u64,
                    since: Generation(row.get::<_, i64>(6)?.max(0) as u64),
                })
            })()
            .map_err(sql_error(context()))?;
            if !f(entry)? {
                break;
            }
        }
        Ok(())
    }

    /// Every root with at least one document, by path, with how many documents it holds.
    pub(crate) fn root_counts(&self) -> Result<Vec<(String, u64)>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT r.path, count(*) FROM sources s JOIN roots r ON r.root_id = s.root_id
                 GROUP BY r.path ORDER BY r.path",
            )
            .map_err(sql_error("count the documents of each root"))?;
        let rows = stmt
            .query_map([], |row| {
                Ok((row.get(0)?, row.get::<_, i64>(1)?.max(0) as u64))
            })
            .map_err(sql_error("count the documents of each root"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("count the documents of each root"))
    }

    fn tags_of(&self, doc_hash: &DocHash) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT tag FROM doc_tags WHERE doc_hash = ?1 ORDER BY tag")
            .map_err(sql_error("read tags"))?;
        let rows = stmt
            .query_map([doc_hash.as_bytes()], |row| row.get(0))
            .map_err(sql_error("read tags"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql_error("read tags"))
    }
}
