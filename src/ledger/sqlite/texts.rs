//! How the ledger keeps chunk text: compressed with zstd, against a dictionary trained once
//! per ledger when enough text has gathered (`Samples`: the ledger's rows, then a run's
//! batches).
//!
//! A chunk's text is most of a ledger's bytes, and a passage of documentation compresses
//! poorly on its own (a few hundred bytes has little to refer back to): a dictionary of the
//! words, markup and headings the store's documents share takes it from about 1.9× to about
//! 2.7× on real docs.
//!
//! A value of `chunks.heading` or `chunks.text` is either TEXT, kept as it is (every row of
//! a ledger before schema 12, and any value that compression would not shrink), or a BLOB:
//! one byte naming the dictionary (0 for none), then a zstd frame without its 4-byte magic
//! number, with the content size in its header and its checksum (a damaged value is an
//! error, never other text). SQLite keeps each value's type, so the two are told apart without
//! a flag. A dictionary is never changed or removed once written (`text_dictionaries`, named
//! by `meta.text_dictionary`), and it is written in the transaction of the first rows that use
//! it, so every reader that sees such a row sees its dictionary; a writer refuses a ledger that
//! names a dictionary it lacks rather than train another under the same number.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use rusqlite::types::{ToSqlOutput, Type, ValueRef};
use rusqlite::{Connection, OptionalExtension};

use super::sql_error;
use crate::chunk::Chunk;
use crate::error::{Error, Result};

/// A batch trains the ledger's dictionary when it brings at least this many bytes of text.
pub(crate) const TRAIN_FROM_BYTES: usize = 256 * 1024;
/// ... and at least this many values (zstd's trainer needs enough distinct samples).
const TRAIN_FROM_VALUES: usize = 64;
/// The trainer reads at most this much of each value (a prefix), and at least `SAMPLES`
/// values where the batch has them: a batch of a few very large passages trains too.
const SAMPLE_BYTES: usize = 4 * 1024;
const SAMPLES: usize = 512;
/// The largest dictionary trained: past 32 KiB, real docs gained about 3 % more.
const DICTIONARY_BYTES: usize = 32 * 1024;
/// zstd's level: 3, its default, compresses 200 MB/s or more with a dictionary.
const LEVEL: i32 = 3;
/// The largest text a stored value may claim to hold (a document is at most the ingest's
/// `--max-file-size`, 64 MiB by default); a larger claim is a damaged value.
const MAX_TEXT_BYTES: u64 = 1 << 30;
/// The magic number that begins every zstd frame, left out of the stored value.
const MAGIC: [u8; 4] = 0xFD2F_B528_u32.to_le_bytes();

/// Reads stored text values, keeping each dictionary the ledger's values named once loaded.
#[derive(Default)]
pub(crate) struct Texts {
    decoders: RefCell<HashMap<u8, zstd::bulk::Decompressor<'static>>>,
}

impl Texts {
    /// Drops every decoder: after a rolled back transaction, whose dictionary is gone.
    pub(crate) fn forget(&self) {
        self.decoders.borrow_mut().clear();
    }

    /// The text of column `index` of `row`, read through `conn` (for a dictionary not yet
    /// loaded).
    pub(crate) fn column(
        &self,
        conn: &Connection,
        row: &rusqlite::Row<'_>,
        index: usize,
    ) -> rusqlite::Result<String> {
        match row.get_ref(index)? {
            ValueRef::Text(bytes) => String::from_utf8(bytes.to_vec()).map_err(|err| {
                rusqlite::Error::FromSqlConversionFailure(index, Type::Text, err.into())
            }),
            ValueRef::Blob(stored) => self.decode(conn, stored).map_err(|err| {
                let damaged = format!(
                    "stored chunk text is damaged ({err})\nhint: copy the store from a backup, \
                     or ingest into a new store (`groundidx rebuild` makes the index again, not \
                     the ledger)"
                );
                rusqlite::Error::FromSqlConversionFailure(index, Type::Blob, damaged.into())
            }),
            other => Err(rusqlite::Error::InvalidColumnType(
                index,
                "text".into(),
                other.data_type(),
            )),
        }
    }

    fn decode(&self, conn: &Connection, stored: &[u8]) -> std::result::Result<String, String> {
        let (&dictionary, body) = stored.split_first().ok_or("an empty compressed value")?;
        let mut frame = Vec::with_capacity(MAGIC.len() + body.len());
        frame.extend_from_slice(&MAGIC);
        frame.extend_from_slice(body);
        let size = match zstd::zstd_safe::get_frame_content_size(&frame) {
            Ok(Some(size)) if size <= MAX_TEXT_BYTES => size as usize,
            Ok(Some(size)) => return Err(format!("a compressed value claims {size} bytes")),
            _ => return Err("a compressed value without a readable frame header".into()),
        };
        let mut decoders = self.decoders.borrow_mut();
        let decoder = match decoders.entry(dictionary) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let bytes = match dictionary {
                    0 => Vec::new(),
                    id => load_dictionary(conn, id)
                        .map_err(|err| err.to_string())?
                        .ok_or_else(|| {
                            format!(
                                "a compressed value names dictionary {id}, which the ledger does not hold"
                            )
                        })?,
                };
                let decoder = zstd::bulk::Decompressor::with_dictionary(&bytes)
                    .map_err(|err| format!("load dictionary {dictionary}: {err}"))?;
                entry.insert(decoder)
            }
        };
        let bytes = decoder
            .decompress(&frame, size)
            .map_err(|err| format!("decompress a value of dictionary {dictionary}: {err}"))?;
        String::from_utf8(bytes).map_err(|err| format!("decompressed text is not UTF-8: {err}"))
    }
}

/// Text a dictionary can be trained from, gathered until there is enough: the first
/// `SAMPLE_BYTES` of each value, from the ledger's rows and the batches of a run, so that a
/// store ingested a little at a time trains one too.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    texts: Vec<String>,
    bytes: usize,
}

impl Samples {
    /// Adds (a prefix of) each of `texts`, up to four times what training reads.
    pub(crate) fn add<'t>(&mut self, texts: impl Iterator<Item = &'t str>) {
        for text in texts {
            if self.bytes >= 4 * TRAIN_FROM_BYTES {
                return;
            }
            let mut end = text.len().min(SAMPLE_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            self.bytes += end;
            self.texts.push(text[..end].to_string());
        }
    }

    /// Whether there is enough to train on.
    pub(crate) fn enough(&self) -> bool {
        self.bytes >= TRAIN_FROM_BYTES && self.texts.len() >= TRAIN_FROM_VALUES
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> + Clone {
        self.texts.iter().map(String::as_str)
    }
}

/// A dictionary chunk text is compressed with: its number in the ledger, and its bytes.
pub struct Dictionary {
    id: u8,
    bytes: Vec<u8>,
    /// zstd's tables for compressing with it (about 800 KB to fill), made when a packer first
    /// needs them: a run reads the ledger's dictionary at every batch, mostly to compare it.
    encoder: OnceLock<zstd::dict::EncoderDictionary<'static>>,
}

impl Dictionary {
    fn new(id: u8, bytes: Vec<u8>) -> Dictionary {
        Dictionary {
            id,
            bytes,
            encoder: OnceLock::new(),
        }
    }

    /// The tables to compress with, made at the first call.
    fn encoder(&self) -> std::io::Result<&zstd::dict::EncoderDictionary<'static>> {
        if let Some(encoder) = self.encoder.get() {
            return Ok(encoder);
        }
        let made = zstd::dict::EncoderDictionary::try_copy(&self.bytes, LEVEL)?;
        Ok(self.encoder.get_or_init(|| made))
    }

    /// A dictionary trained from `samples` (the texts of a batch) when they are enough to
    /// train one: `TRAIN_FROM_BYTES` and `TRAIN_FROM_VALUES`. It is the ledger's first (a
    /// ledger has at most one).
    pub(crate) fn train<'t>(samples: impl Iterator<Item = &'t str> + Clone) -> Option<Dictionary> {
        let prefix = |text: &'t str| &text.as_bytes()[..text.len().min(SAMPLE_BYTES)];
        let total: usize = samples.clone().map(|text| prefix(text).len()).sum();
        let count = samples.clone().count();
        if total < TRAIN_FROM_BYTES || count < TRAIN_FROM_VALUES {
            return None;
        }
        // Every k-th value, so that the sample spans the whole batch (its files are in path
        // order: the first ones alone may all be one folder's), about `TRAIN_FROM_BYTES` of
        // them but never fewer than `SAMPLES` values.
        let step = total
            .div_ceil(TRAIN_FROM_BYTES)
            .min(count.div_ceil(SAMPLES))
            .max(1);
        let picked: Vec<&[u8]> = samples.step_by(step).map(prefix).collect();
        match zstd::dict::from_samples(&picked, DICTIONARY_BYTES)
            .map(|bytes| Dictionary::new(1, bytes))
        {
            Ok(dictionary) => Some(dictionary),
            // Too few distinct samples: this batch is written without, and the next large
            // one tries again.
            Err(err) => {
                tracing::debug!("no chunk text dictionary trained this time: {err}");
                None
            }
        }
    }

    /// The ledger's dictionary, if it has one. `meta.text_dictionary` names it from the
    /// commit that wrote it on: a ledger that names one it does not hold is damaged (its rows
    /// cannot be read), and no writer may train another in its place.
    pub(crate) fn of_ledger(conn: &Connection) -> Result<Option<Dictionary>> {
        let context = "read the chunk text dictionary";
        let named: i64 = conn
            .prepare_cached(
                "SELECT coalesce(
                    (SELECT value FROM meta WHERE name = 'text_dictionary'),
                    (SELECT max(dict_id) FROM text_dictionaries),
                    0
                 )",
            )
            .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
            .map_err(sql_error(context))?;
        if named == 0 {
            return Ok(None);
        }
        let damaged = |why: String| {
            Error::LedgerDamaged(format!(
                "its chunk text dictionary {named} {why}, so its compressed rows cannot be read"
            ))
        };
        let id = u8::try_from(named).map_err(|_| damaged("is out of range".into()))?;
        let bytes = load_dictionary(conn, id)?.ok_or_else(|| damaged("is missing".into()))?;
        Ok(Some(Dictionary::new(id, bytes)))
    }

    fn is(&self, other: &Dictionary) -> bool {
        self.id == other.id && self.bytes == other.bytes
    }
}

impl PartialEq for Dictionary {
    fn eq(&self, other: &Dictionary) -> bool {
        self.is(other)
    }
}

impl Eq for Dictionary {}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dictionary({}, {} bytes)", self.id, self.bytes.len())
    }
}

/// Compresses text values with one dictionary, or none: one per thread.
pub(crate) struct Packer<'d> {
    dictionary: u8,
    compressor: zstd::bulk::Compressor<'d>,
}

impl<'d> Packer<'d> {
    /// A packer that shares the dictionary's prepared tables (for the threads of a batch).
    pub(crate) fn new(dictionary: Option<&'d Dictionary>) -> Result<Packer<'d>> {
        let compressor = match dictionary {
            Some(dictionary) => {
                let encoder = dictionary.encoder().map_err(|err| {
                    Error::LedgerDamaged(format!(
                        "its chunk text dictionary {} cannot be loaded ({err}), so its \
                         compressed rows cannot be read",
                        dictionary.id
                    ))
                })?;
                zstd::bulk::Compressor::with_prepared_dictionary(encoder)
            }
            None => zstd::bulk::Compressor::new(LEVEL),
        };
        Packer::with(dictionary.map_or(0, |dictionary| dictionary.id), compressor)
    }

    fn with(
        dictionary: u8,
        compressor: std::io::Result<zstd::bulk::Compressor<'d>>,
    ) -> Result<Packer<'d>> {
        let started = compressor.and_then(|mut compressor| {
            use zstd::zstd_safe::CParameter;
            // A damaged value is an error, not other text: 4 bytes a value.
            compressor.set_parameter(CParameter::ChecksumFlag(true))?;
            compressor.set_parameter(CParameter::ContentSizeFlag(true))?;
            compressor.set_parameter(CParameter::DictIdFlag(false))?;
            // Touched once, so that a compressor that cannot work fails here.
            compressor.compress(b"")?;
            Ok(compressor)
        });
        let compressor = started.map_err(|err| Error::io("start the text compressor", err))?;
        Ok(Packer {
            dictionary,
            compressor,
        })
    }

    /// The BLOB to store for `text`, or `None` when compression would not shrink it (the
    /// text itself is stored).
    pub(crate) fn pack(&mut self, text: &str) -> Result<Option<Vec<u8>>> {
        let frame = self
            .compressor
            .compress(text.as_bytes())
            .map_err(|err| Error::io("compress chunk text", err))?;
        debug_assert_eq!(frame[..MAGIC.len()], MAGIC);
        let stored_len = 1 + frame.len() - MAGIC.len();
        if stored_len >= text.len() {
            return Ok(None);
        }
        let mut stored = Vec::with_capacity(stored_len);
        stored.push(self.dictionary);
        stored.extend_from_slice(&frame[MAGIC.len()..]);
        Ok(Some(stored))
    }
}

/// A document's chunk text values compressed before its batch's transaction (by the stage
/// that chunks a batch, on every core), with the dictionary they were compressed with: for
/// each chunk in order, its heading's and its text's (`None`: stored as it is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedTexts {
    dictionary: Option<Arc<Dictionary>>,
    values: Vec<[Option<Vec<u8>>; 2]>,
}

impl PackedTexts {
    /// The dictionary the values were compressed with.
    pub(crate) fn dictionary(&self) -> Option<&Arc<Dictionary>> {
        self.dictionary.as_ref()
    }

    /// Packs the heading and text of each of `chunks` with `packer`, which compresses with
    /// `dictionary`.
    pub(crate) fn of(
        chunks: &[Chunk],
        packer: &mut Packer<'_>,
        dictionary: Option<&Arc<Dictionary>>,
    ) -> Result<PackedTexts> {
        debug_assert_eq!(
            packer.dictionary,
            dictionary.map_or(0, |dictionary| dictionary.id)
        );
        let values = chunks
            .iter()
            .map(|chunk| {
                let heading = super::encode_heading(&chunk.heading_path);
                Ok([packer.pack(&heading)?, packer.pack(&chunk.text)?])
            })
            .collect::<Result<_>>()?;
        Ok(PackedTexts {
            dictionary: dictionary.cloned(),
            values,
        })
    }
}

/// Writes the text values of one transaction, with the ledger's dictionary when it has one.
pub(crate) struct TextWriter {
    dictionary: Option<Arc<Dictionary>>,
    /// Made at the first value not packed before the transaction: a run's batches come
    /// packed, and a one-file edit would spend more making it than writing its rows.
    packer: Option<Packer<'static>>,
}

impl TextWriter {
    /// The writer for a transaction about to write the texts `samples` gives. A ledger
    /// without a dictionary gets one here, written in this transaction: `offered` (trained
    /// where the batch was chunked) or, without it, one trained from `samples` when they are
    /// enough.
    pub(crate) fn for_transaction<'t>(
        tx: &Connection,
        offered: Option<&Arc<Dictionary>>,
        samples: impl Iterator<Item = &'t str> + Clone,
    ) -> Result<TextWriter> {
        let dictionary = match Dictionary::of_ledger(tx)? {
            Some(held) => Some(match offered {
                Some(offered) if offered.is(&held) => Arc::clone(offered),
                _ => Arc::new(held),
            }),
            None => {
                let new = match offered {
                    Some(offered) => Some(Arc::clone(offered)),
                    None => Dictionary::train(samples).map(Arc::new),
                };
                if let Some(new) = &new {
                    tx.execute_batch(
                        "INSERT OR IGNORE INTO meta (name, value) VALUES ('text_dictionary', 0)",
                    )
                    .and_then(|()| {
                        tx.execute(
                            "INSERT INTO text_dictionaries (dict_id, dictionary) VALUES (?1, ?2)",
                            rusqlite::params![new.id, new.bytes],
                        )
                    })
                    .and_then(|_| {
                        tx.execute(
                            "UPDATE meta SET value = ?1 WHERE name = 'text_dictionary'",
                            [new.id],
                        )
                    })
                    .map_err(sql_error("write the chunk text dictionary"))?;
                }
                new
            }
        };
        Ok(TextWriter {
            dictionary,
            packer: None,
        })
    }

    /// The value to store for `text`: compressed when that is smaller, else the text itself.
    pub(crate) fn value<'a>(&mut self, text: &'a str) -> Result<ToSqlOutput<'a>> {
        let packer = match &mut self.packer {
            Some(packer) => packer,
            None => self.packer.insert(match &self.dictionary {
                // Its own copy of the tables: the writer outlives no borrow.
                Some(dictionary) => Packer::with(
                    dictionary.id,
                    zstd::bulk::Compressor::with_dictionary(LEVEL, &dictionary.bytes),
                )?,
                None => Packer::new(None)?,
            }),
        };
        Ok(match packer.pack(text)? {
            Some(blob) => ToSqlOutput::Owned(rusqlite::types::Value::Blob(blob)),
            None => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
        })
    }

    /// The values `packed` holds for the document's `index`-th chunk (heading, text), when they were
    /// compressed with this transaction's dictionary; `None` when they must be packed here.
    pub(crate) fn packed<'a>(
        &self,
        packed: Option<&'a PackedTexts>,
        index: usize,
        heading: &'a str,
        text: &'a str,
    ) -> Option<[ToSqlOutput<'a>; 2]> {
        let packed = packed?;
        let same = match (&packed.dictionary, &self.dictionary) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a.is(b),
            _ => false,
        };
        if !same {
            return None;
        }
        let [heading_value, text_value] = packed.values.get(index)?;
        let value = |blob: &'a Option<Vec<u8>>, text: &'a str| match blob {
            Some(blob) => ToSqlOutput::Borrowed(ValueRef::Blob(blob)),
            None => ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes())),
        };
        Some([value(heading_value, heading), value(text_value, text)])
    }
}

fn load_dictionary(conn: &Connection, id: u8) -> Result<Option<Vec<u8>>> {
    conn.prepare_cached("SELECT dictionary FROM text_dictionaries WHERE dict_id = ?1")
        .and_then(|mut stmt| stmt.query_row([id], |row| row.get(0)).optional())
        .map_err(sql_error(format!("read chunk text dictionary {id}")))
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;
    use rusqlite::types::{ToSqlOutput, Value, ValueRef};

    use std::sync::Arc;

    use super::{Dictionary, MAGIC, PackedTexts, Packer, TRAIN_FROM_BYTES, TextWriter, Texts};
    use crate::chunk::Chunk;

    /// A connection with the one table the codec uses.
    fn ledger() -> Connection {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch(super::super::schema::SCHEMA_V12_FOR_TESTS)
            .and_then(|()| {
                conn.execute_batch("CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER)")
            })
            .expect("create the dictionaries table");
        conn
    }

    /// Stores `values` in a table `t` through `writer` and reads them back through `texts`.
    fn round_trip(conn: &Connection, writer: &mut TextWriter, values: &[String]) -> Vec<String> {
        conn.execute_batch("DROP TABLE IF EXISTS t; CREATE TABLE t (n INTEGER, v)")
            .expect("create t");
        for (n, text) in values.iter().enumerate() {
            let stored = writer.value(text).expect("encode");
            conn.execute(
                "INSERT INTO t VALUES (?1, ?2)",
                rusqlite::params![n as i64, stored],
            )
            .expect("insert");
        }
        let texts = Texts::default();
        let mut stmt = conn.prepare("SELECT v FROM t ORDER BY n").expect("prepare");
        stmt.query_map([], |row| texts.column(conn, row, 0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("decode")
    }

    /// Passages of documentation-like text, each different (`seed` picks the words).
    fn passages(n: usize, seed: u64) -> Vec<String> {
        let words = [
            "the",
            "index",
            "ledger",
            "chunk",
            "`--store`",
            "## Options",
            "run",
            "search",
            "groundidx",
            "café",
            "rotate",
            "signing",
            "key",
            "```sh",
            "- item",
            "über",
            "日本語",
        ];
        let mut state = seed;
        (0..n)
            .map(|i| {
                let mut text = format!("# Page {i}\n\n");
                for _ in 0..(60 + i % 90) {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    text.push_str(words[(state >> 33) as usize % words.len()]);
                    text.push(if state.is_multiple_of(11) { '\n' } else { ' ' });
                }
                text
            })
            .collect()
    }

    #[test]
    fn text_is_stored_compressed_and_read_back_exactly() {
        let conn = ledger();
        let values = passages(50, 1);
        let mut writer =
            TextWriter::for_transaction(&conn, None, values.iter().map(String::as_str))
                .expect("writer");
        // 50 passages are too few to train on: no dictionary.
        assert!(writer.dictionary.is_none());
        let stored = writer.value(&values[0]).expect("encode");
        let ToSqlOutput::Owned(Value::Blob(blob)) = stored else {
            panic!("a passage was not compressed: {stored:?}");
        };
        assert_eq!(blob[0], 0, "no dictionary named");
        assert!(blob.len() < values[0].len());
        assert_eq!(round_trip(&conn, &mut writer, &values), values);
    }

    #[test]
    fn a_value_compression_would_not_shrink_stays_text() {
        let conn = ledger();
        let mut writer =
            TextWriter::for_transaction(&conn, None, std::iter::empty()).expect("writer");
        for short in ["", "[]", "[\"Usage\"]", "é", "xyzzy"] {
            let stored = writer.value(short).expect("encode");
            assert_eq!(
                stored,
                ToSqlOutput::Borrowed(ValueRef::Text(short.as_bytes()))
            );
        }
        let values: Vec<String> = ["", "[\"Usage\"]", "é"].map(String::from).to_vec();
        assert_eq!(round_trip(&conn, &mut writer, &values), values);
    }

    #[test]
    fn a_large_batch_trains_the_dictionary_in_the_transaction_of_its_rows() {
        let mut conn = ledger();
        let values = passages(1500, 2);
        assert!(values.iter().map(String::len).sum::<usize>() >= TRAIN_FROM_BYTES);
        let count = |conn: &Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM text_dictionaries", [], |row| {
                row.get(0)
            })
            .expect("count")
        };
        // Rolled back, the dictionary goes with the rows.
        {
            let tx = conn.transaction().expect("begin");
            TextWriter::for_transaction(&tx, None, values.iter().map(String::as_str))
                .expect("writer");
            assert_eq!(count(&tx), 1);
        }
        assert_eq!(count(&conn), 0, "a rolled back dictionary stayed");
        let tx = conn.transaction().expect("begin");
        let mut writer = TextWriter::for_transaction(&tx, None, values.iter().map(String::as_str))
            .expect("writer");
        assert_eq!(writer.dictionary.as_ref().map(|d| d.id), Some(1));
        let with_dictionary = round_trip(&tx, &mut writer, &values);
        tx.commit().expect("commit");
        assert_eq!(with_dictionary, values);
        // Smaller with it than without.
        let sizes = |writer: &mut TextWriter| -> usize {
            values
                .iter()
                .map(|text| match writer.value(text).expect("encode") {
                    ToSqlOutput::Owned(Value::Blob(blob)) => blob.len(),
                    _ => text.len(),
                })
                .sum()
        };
        let plain = sizes(
            &mut TextWriter::for_transaction(&ledger(), None, std::iter::empty()).expect("writer"),
        );
        let trained = sizes(&mut writer);
        assert!(
            trained * 5 < plain * 4,
            "{trained} bytes with the dictionary, {plain} without"
        );
        // A later batch uses the dictionary the ledger has, and never trains another.
        let later =
            TextWriter::for_transaction(&conn, None, passages(1500, 3).iter().map(String::as_str))
                .expect("writer");
        assert_eq!(later.dictionary.as_ref().map(|d| d.id), Some(1));
        assert_eq!(count(&conn), 1);
    }

    #[test]
    fn a_damaged_value_is_an_error_never_a_panic() {
        let conn = ledger();
        let values = passages(3, 4);
        let mut writer =
            TextWriter::for_transaction(&conn, None, std::iter::empty()).expect("writer");
        let ToSqlOutput::Owned(Value::Blob(good)) = writer.value(&values[2]).expect("encode")
        else {
            panic!("not compressed");
        };
        let texts = Texts::default();
        let read = |blob: &[u8]| -> Result<String, String> {
            conn.query_row("SELECT ?1", [blob], |row| texts.column(&conn, row, 0))
                .map_err(|err| err.to_string())
        };
        assert_eq!(read(&good).as_deref(), Ok(values[2].as_str()));
        let mut damaged = vec![Vec::new(), vec![0], good[..good.len() / 2].to_vec()];
        // A dictionary the ledger does not hold.
        let mut other = good.clone();
        other[0] = 7;
        damaged.push(other);
        // A frame header that claims a huge text.
        let mut huge = vec![0u8];
        let frame = zstd::bulk::Compressor::new(3)
            .and_then(|mut c| c.compress(&vec![b'a'; 1 << 20]))
            .expect("compress");
        huge.extend_from_slice(&frame[MAGIC.len()..]);
        huge[2..10].copy_from_slice(&u64::MAX.to_le_bytes());
        damaged.push(huge);
        // Every byte flipped in turn.
        for at in 0..good.len() {
            let mut flipped = good.clone();
            flipped[at] ^= 0x5a;
            damaged.push(flipped);
        }
        // Every one is an error naming the damage (the frame's checksum catches a flip that
        // would decode to other text); none panics or allocates what the header claims.
        for blob in &damaged {
            let err = read(blob).expect_err(&format!("{blob:?} was read"));
            assert!(err.contains("stored chunk text is damaged"), "{err}");
        }
    }

    fn chunks(texts: &[String]) -> Vec<Chunk> {
        texts
            .iter()
            .enumerate()
            .map(|(ordinal, text)| Chunk {
                id: crate::ids::chunk_id(&["Guide".to_string()], text),
                heading_path: vec!["Guide".to_string(), format!("Part {ordinal}")],
                text: text.clone(),
                lines: (1, 1),
                ordinal: ordinal as u32,
                pages: None,
            })
            .collect()
    }

    #[test]
    fn compression_tables_are_made_only_when_a_value_is_compressed() {
        let conn = ledger();
        let texts = passages(1500, 8);
        let trained = Dictionary::train(texts.iter().map(String::as_str)).expect("trained");
        assert!(trained.encoder.get().is_none(), "training made the tables");
        let mut writer =
            TextWriter::for_transaction(&conn, Some(&Arc::new(trained)), std::iter::empty())
                .expect("writer");
        assert!(
            writer.packer.is_none(),
            "a writer made its compressor at once"
        );
        // The ledger's dictionary, read back (as a run does at every batch), makes none either.
        let held = Dictionary::of_ledger(&conn)
            .expect("read")
            .expect("the ledger holds the dictionary");
        assert!(
            held.encoder.get().is_none(),
            "reading the dictionary made the tables"
        );
        // Packers of a batch share the tables, made once; the writer makes its own when a
        // value reaches it unpacked, and the values read back as the text either way.
        let held = Arc::new(held);
        let chunks = chunks(&texts[..3]);
        let mut packer = Packer::new(Some(&held)).expect("packer");
        let packed = PackedTexts::of(&chunks, &mut packer, Some(&held)).expect("packed");
        let made = held.encoder.get().expect("the packer made the tables") as *const _;
        let _second = Packer::new(Some(&held)).expect("packer");
        assert!(std::ptr::eq(held.encoder.get().expect("tables"), made));
        assert!(
            packed.values[0][1].is_some(),
            "a passage was not compressed"
        );
        assert_eq!(round_trip(&conn, &mut writer, &texts[..3]), texts[..3]);
        assert!(writer.packer.is_some());
    }

    #[test]
    fn a_dictionary_zstd_cannot_load_is_a_damaged_ledger_when_first_used() {
        // A dictionary's magic number, then no valid tables.
        let mut bytes = 0xEC30_A437_u32.to_le_bytes().to_vec();
        bytes.extend([0u8; 64]);
        let damaged = Dictionary::new(3, bytes);
        let err = Packer::new(Some(&damaged))
            .err()
            .expect("a packer with a damaged dictionary");
        let message = err.to_string();
        assert!(
            message.contains("chunk text dictionary 3 cannot be loaded"),
            "{message}"
        );
    }

    #[test]
    fn values_packed_ahead_are_used_only_with_the_ledgers_own_dictionary() {
        let conn = ledger();
        let trained = |seed| {
            let texts = passages(1500, seed);
            Arc::new(Dictionary::train(texts.iter().map(String::as_str)).expect("trained"))
        };
        let (ours, other) = (trained(5), trained(6));
        assert!(!ours.is(&other), "two samples trained the same dictionary");
        let texts = passages(4, 7);
        let chunks = chunks(&texts);
        let pack = |dictionary: Option<&Arc<Dictionary>>| {
            let mut packer = Packer::new(dictionary.map(|d| &**d)).expect("packer");
            PackedTexts::of(&chunks, &mut packer, dictionary).expect("packed")
        };
        // The first batch offers the dictionary it was packed with: the ledger takes it.
        let writer =
            TextWriter::for_transaction(&conn, Some(&ours), std::iter::empty()).expect("writer");
        let heading = "[\"Guide\",\"Part 1\"]";
        let with_ours = pack(Some(&ours));
        let [_, text] = writer
            .packed(Some(&with_ours), 1, heading, &texts[1])
            .expect("values packed with the ledger's dictionary are used");
        assert_eq!(
            text,
            rusqlite::types::ToSqlOutput::Borrowed(ValueRef::Blob(
                with_ours.values[1][1].as_deref().expect("compressed"),
            ))
        );
        // Values packed with another dictionary, or none, are packed again.
        let writer =
            TextWriter::for_transaction(&conn, Some(&other), std::iter::empty()).expect("writer");
        assert!(writer.dictionary.as_ref().is_some_and(|d| d.is(&ours)));
        assert!(
            writer
                .packed(Some(&pack(Some(&other))), 1, heading, &texts[1])
                .is_none()
        );
        assert!(
            writer
                .packed(Some(&pack(None)), 1, heading, &texts[1])
                .is_none()
        );
        assert!(
            writer
                .packed(Some(&with_ours), 9, heading, &texts[1])
                .is_none()
        );
        // Whichever packed them, the values read back as the text.
        let texts_reader = Texts::default();
        for (ordinal, [stored_heading, stored_text]) in with_ours.values.iter().enumerate() {
            for (value, expected) in [
                (
                    stored_heading,
                    super::super::encode_heading(&chunks[ordinal].heading_path),
                ),
                (stored_text, texts[ordinal].clone()),
            ] {
                let read = match value {
                    Some(blob) => conn
                        .query_row("SELECT ?1", [blob], |row| {
                            texts_reader.column(&conn, row, 0)
                        })
                        .expect("decode"),
                    None => expected.clone(),
                };
                assert_eq!(read, expected);
            }
        }
    }
}
