//! The vector index: the projection of the active model's vectors that semantic search reads,
//! one file in the store (`vectors.bin`), made from the ledger alone and never by the model.
//!
//! The file is a header (magic, format version, dimensions, the model's fingerprint, and the
//! marker: the ledger generation and `vector_seq` it was made at), then one row per chunk that
//! the ledger held with a vector at that moment (the chunk ID and its f32s, little-endian), then
//! the row count and a checksum of everything before it. It is written aside, synced and
//! renamed into place, so a reader (and a crash) sees the previous file or the next one whole.
//! A file whose marker differs from the ledger's is behind: searches still use it (hits of
//! chunks removed since are dropped by the ledger lookup that every hit goes through), and the
//! next writer makes it again.
//!
//! Search is exact (a dot product with every vector; they are L2-normalised) below
//! `ann_from` vectors (100,000 unless `GROUNDIDX_ANN_FROM` says otherwise). From there a
//! reader also computes the rows' sign codes (`ann`) when it reads the file, and a search ranks
//! exactly only the shortlist the codes give: approximate, with recall@10 measured at 0.95 or
//! more against exact search on random vectors. The codes have no file of their own, so there
//! is nothing for a crash to leave stale.

use std::collections::{BinaryHeap, HashSet};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

pub mod ann;

use self::ann::SignCodes;
use crate::crash::crash_point;
use crate::embed::Fingerprint;
use crate::error::{Error, Result};
use crate::ids::{self, ChunkId, Generation, StreamHash};

/// The file's name in the store folder.
pub const FILE_NAME: &str = "vectors.bin";
const MAGIC: &[u8; 8] = b"GIDXVEC\0";
const FORMAT: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 4 + 32 + 8 + 8;
const TRAILER_LEN: usize = 8 + 32;
/// Below this many vectors a search runs on one thread.
const PARALLEL_FROM: usize = 32_768;
/// The environment variable that sets [`ann_from`].
pub(crate) const ANN_ENV: &str = "GROUNDIDX_ANN_FROM";
/// Exact search up to this many vectors by default: at 100,000 vectors of 384 dimensions an
/// exact search reads 150 MB and takes a few milliseconds on two cores, and its recall is whole.
pub(crate) const DEFAULT_ANN_FROM: usize = 100_000;
/// A filtered search allowing at most this many chunks is answered exactly even when searches
/// are approximate: the exact search then scores only the allowed rows.
pub(crate) const EXACT_FILTER_LIMIT: usize = 10_000;
/// Rows scored per call of the SIMD kernel in an exact search.
const BLOCK_ROWS: usize = 1_024;

/// The number of vectors from which searches are approximate: `GROUNDIDX_ANN_FROM` when it is
/// set to a whole number, else [`DEFAULT_ANN_FROM`].
pub(crate) fn ann_from() -> usize {
    std::env::var(ANN_ENV)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(DEFAULT_ANN_FROM)
}

/// The state of the ledger a vector index was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    pub fingerprint: Fingerprint,
    pub generation: Generation,
    pub vector_seq: u64,
}

impl Marker {
    /// A 64-bit key of the marker, for page cursors.
    pub fn key(&self) -> u64 {
        let mut hash = StreamHash::new(ids::VECTORS_VERSION);
        hash.part(&self.fingerprint.0)
            .part(&self.generation.0.to_le_bytes())
            .part(&self.vector_seq.to_le_bytes());
        u64::from_le_bytes(hash.finish()[..8].try_into().expect("32 bytes"))
    }
}

/// The vector index in memory.
pub struct VectorSet {
    pub marker: Marker,
    pub dims: usize,
    ids: Vec<ChunkId>,
    keys: Vec<u64>,
    data: Vec<f32>,
    /// The rows' sign codes, when searches are approximate (`ann_from()` rows or more).
    codes: Option<SignCodes>,
}

impl std::fmt::Debug for VectorSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorSet")
            .field("marker", &self.marker)
            .field("dims", &self.dims)
            .field("len", &self.ids.len())
            .field("approximate", &self.codes.is_some())
            .finish()
    }
}

/// The file of the store in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

fn temporary(path: &Path) -> PathBuf {
    path.with_extension("bin.tmp")
}

/// The HNSW graph file that versions before sign codes kept beside the vector index, and what
/// a killed write of it left: writers remove both.
fn old_graph_files(path: &Path) -> [PathBuf; 2] {
    [path.with_extension("ann"), path.with_extension("ann.tmp")]
}

/// A score with its row, ordered so that a max-heap keeps the worst on top.
#[derive(PartialEq)]
struct Scored(f32, usize);

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: the heap's top is the lowest score (ties: the later row).
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

impl VectorSet {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every chunk ID in the index, sorted.
    pub fn ids(&self) -> &[ChunkId] {
        &self.ids
    }

    /// The cosine of chunk `id`'s vector and `query` (both are unit vectors, so their dot
    /// product); `None` when the set holds no vector of the chunk or `query` has other
    /// dimensions.
    pub fn similarity(&self, id: &ChunkId, query: &[f32]) -> Option<f32> {
        if query.len() != self.dims {
            return None;
        }
        let row = self.ids.binary_search(id).ok()?;
        let mut score = [0f32; 1];
        ann::dots(self.row(row), query, &mut score);
        Some(score[0])
    }

    fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dims..(i + 1) * self.dims]
    }

    /// The `k` chunks most similar to `query`, best first (ties by chunk ID), restricted to the
    /// chunks whose `ChunkId::short` `allowed` holds.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        allowed: Option<&HashSet<u64>>,
    ) -> Result<Vec<(ChunkId, f32)>> {
        self.search_with(query, k, allowed, EXACT_FILTER_LIMIT)
    }

    /// [`VectorSet::search`], answering a filter of at most `exact_filter_limit` chunks exactly.
    fn search_with(
        &self,
        query: &[f32],
        k: usize,
        allowed: Option<&HashSet<u64>>,
        exact_filter_limit: usize,
    ) -> Result<Vec<(ChunkId, f32)>> {
        if query.len() != self.dims {
            return Err(Error::Model {
                model: self.marker.fingerprint.to_hex(),
                message: format!(
                    "the query vector has {} dimensions, the store's vectors {}",
                    query.len(),
                    self.dims
                ),
            });
        }
        // Every vector stored is finite; a query that is not would rank by NaN.
        if query.iter().any(|x| !x.is_finite()) {
            return Err(Error::Model {
                model: self.marker.fingerprint.to_hex(),
                message: "the query vector holds values that are not finite numbers".into(),
            });
        }
        if let Some(codes) = &self.codes
            && allowed.is_none_or(|allowed| allowed.len() > exact_filter_limit)
        {
            let keys = &self.keys;
            let filter = |row: usize| allowed.is_none_or(|allowed| allowed.contains(&keys[row]));
            let shortlist = match allowed {
                None => codes.shortlist(query, None),
                Some(_) => codes.shortlist(query, Some(&filter)),
            };
            let mut best: Vec<Scored> = shortlist
                .par_chunks(BLOCK_ROWS)
                .flat_map_iter(|rows| {
                    let mut scores = vec![0f32; rows.len()];
                    ann::dots_at(&self.data, rows, query, &mut scores);
                    scores
                        .into_iter()
                        .zip(rows)
                        .map(|(score, &row)| Scored(score, row))
                })
                .collect();
            return Ok(self.best_of(&mut best, k));
        }
        let top_of = |range: std::ops::Range<usize>| -> BinaryHeap<Scored> {
            let mut heap = BinaryHeap::with_capacity(k + 1);
            let mut keep = |score: f32, i: usize| {
                if heap.len() < k {
                    heap.push(Scored(score, i));
                } else if let Some(worst) = heap.peek()
                    && Scored(score, i) < *worst
                {
                    heap.pop();
                    heap.push(Scored(score, i));
                }
            };
            let mut scores = [0f32; BLOCK_ROWS];
            match allowed {
                // A filter scores only the rows it allows.
                Some(allowed) => {
                    for i in range {
                        if allowed.contains(&self.keys[i]) {
                            ann::dots(self.row(i), query, &mut scores[..1]);
                            keep(scores[0], i);
                        }
                    }
                }
                None => {
                    for start in range.clone().step_by(BLOCK_ROWS) {
                        let end = (start + BLOCK_ROWS).min(range.end);
                        let scores = &mut scores[..end - start];
                        ann::dots(
                            &self.data[start * self.dims..end * self.dims],
                            query,
                            scores,
                        );
                        for (offset, &score) in scores.iter().enumerate() {
                            keep(score, start + offset);
                        }
                    }
                }
            }
            heap
        };
        let n = self.len();
        let mut best: Vec<Scored> = if n < PARALLEL_FROM {
            top_of(0..n).into_vec()
        } else {
            let step = n.div_ceil(rayon::current_num_threads().max(1) * 4);
            (0..n)
                .step_by(step)
                .collect::<Vec<_>>()
                .into_par_iter()
                .flat_map_iter(|start| top_of(start..(start + step).min(n)).into_vec())
                .collect()
        };
        Ok(self.best_of(&mut best, k))
    }

    /// The `k` best of `scored`, best first (ties by row, which is chunk ID order).
    fn best_of(&self, scored: &mut Vec<Scored>, k: usize) -> Vec<(ChunkId, f32)> {
        scored.sort();
        scored.truncate(k);
        scored
            .drain(..)
            .map(|Scored(score, i)| (self.ids[i], score))
            .collect()
    }

    /// Whether searches are approximate (through the rows' sign codes).
    #[cfg(test)]
    pub(crate) fn is_approximate(&self) -> bool {
        self.codes.is_some()
    }

    /// Bytes of memory the sign codes take beside the rows (0 when searches are exact).
    #[cfg(test)]
    pub(crate) fn codes_memory_bytes(&self) -> usize {
        self.codes.as_ref().map_or(0, SignCodes::memory_bytes)
    }

    /// Reads the vector index file, with the rows' sign codes when it has `ann_from()` rows or
    /// more; `Ok(None)` when there is no vector index.
    pub fn read(path: &Path) -> Result<Option<VectorSet>> {
        let Some(mut set) = VectorSet::read_rows(path)? else {
            return Ok(None);
        };
        if !set.is_empty() && set.len() >= ann_from() {
            set.codes = Some(SignCodes::build(set.dims, &set.data));
        }
        Ok(Some(set))
    }

    /// Reads the vector index file without computing the sign codes: for checking the rows
    /// (`verify`), never for searching a large set, which would then be exact.
    pub(crate) fn read_rows(path: &Path) -> Result<Option<VectorSet>> {
        let mut bytes = Vec::new();
        match std::fs::File::open(path) {
            Ok(mut file) => file
                .read_to_end(&mut bytes)
                .map_err(|err| Error::io(format!("read {}", path.display()), err))?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(Error::io(format!("open {}", path.display()), err)),
        };
        parse(&bytes)
            .map(Some)
            .map_err(|reason| Error::IndexUnusable {
                path: path.to_path_buf(),
                reason: format!("the vector index is damaged: {reason}"),
            })
    }

    /// The marker of the file, from its header alone; `Ok(None)` when there is none or it
    /// cannot be read (a writer makes it again).
    pub(crate) fn read_marker(path: &Path) -> Result<Option<Marker>> {
        let mut header = [0u8; HEADER_LEN];
        match std::fs::File::open(path) {
            Ok(mut file) => match file.read_exact(&mut header) {
                Ok(()) => Ok(parse_header(&header).ok().map(|(marker, _)| marker)),
                Err(_) => Ok(None),
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(Error::io(format!("open {}", path.display()), err)),
        }
    }
}

fn parse_header(bytes: &[u8]) -> std::result::Result<(Marker, usize), String> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err("not a groundidx vector index".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if u32_at(8) != FORMAT {
        return Err(format!("format {} (this build reads {FORMAT})", u32_at(8)));
    }
    let dims = u32_at(12) as usize;
    if dims == 0 || dims > 65_536 {
        return Err(format!("{dims} dimensions"));
    }
    let fingerprint = Fingerprint(bytes[16..48].try_into().expect("32 bytes"));
    Ok((
        Marker {
            fingerprint,
            generation: Generation(u64_at(48)),
            vector_seq: u64_at(56),
        },
        dims,
    ))
}

fn parse(bytes: &[u8]) -> std::result::Result<VectorSet, String> {
    let (marker, dims) = parse_header(bytes)?;
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err("truncated".into());
    }
    let body_end = bytes.len() - TRAILER_LEN;
    let mut hash = StreamHash::new(ids::VECTORS_VERSION);
    hash.raw(&bytes[..body_end + 8]);
    if hash.finish() != bytes[body_end + 8..] {
        return Err("its checksum does not match (truncated or overwritten)".into());
    }
    let count = u64::from_le_bytes(bytes[body_end..body_end + 8].try_into().expect("8 bytes"));
    let row_len = 32 + 4 * dims;
    if (body_end - HEADER_LEN) as u64 != count.saturating_mul(row_len as u64) {
        return Err(format!("{count} rows do not fill its body"));
    }
    let count = count as usize;
    let mut ids_out = Vec::with_capacity(count);
    let mut keys = Vec::with_capacity(count);
    let mut data = Vec::with_capacity(count * dims);
    for row in bytes[HEADER_LEN..body_end].chunks_exact(row_len) {
        let id = ChunkId::from_slice(&row[..32]).expect("32 bytes");
        keys.push(id.short());
        ids_out.push(id);
        data.extend(
            row[32..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))),
        );
    }
    Ok(VectorSet {
        marker,
        dims,
        ids: ids_out,
        keys,
        data,
        codes: None,
    })
}

/// Writes the vector index file from `rows` (chunk ID order), aside and then renamed into place.
/// `fill` is called with a sink that takes one row at a time. A write that fails (a full disk)
/// removes the file it wrote aside: the previous file, or none, stays as it was.
pub fn write(
    path: &Path,
    marker: &Marker,
    dims: usize,
    fill: impl FnOnce(&mut dyn FnMut(&ChunkId, &[f32]) -> Result<()>) -> Result<()>,
) -> Result<u64> {
    let aside = temporary(path);
    let written = write_aside(&aside, marker, dims, fill).and_then(|count| {
        crash_point("vectors.before_rename");
        std::fs::rename(&aside, path)
            .map_err(|err| Error::io(format!("rename {} into place", aside.display()), err))?;
        Ok(count)
    });
    let count = match written {
        Ok(count) => count,
        Err(err) => {
            let _ = std::fs::remove_file(&aside);
            return Err(err);
        }
    };
    if let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    crash_point("vectors.after_rename");
    Ok(count)
}

/// Writes the whole file at `aside` and syncs it; returns its row count.
fn write_aside(
    aside: &Path,
    marker: &Marker,
    dims: usize,
    fill: impl FnOnce(&mut dyn FnMut(&ChunkId, &[f32]) -> Result<()>) -> Result<()>,
) -> Result<u64> {
    let io = |what: &str| {
        let context = format!("{what} {}", aside.display());
        move |err| Error::io(context, err)
    };
    let file = std::fs::File::create(aside).map_err(io("create"))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut hash = StreamHash::new(ids::VECTORS_VERSION);
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FORMAT.to_le_bytes());
    header.extend_from_slice(&(dims as u32).to_le_bytes());
    header.extend_from_slice(&marker.fingerprint.0);
    header.extend_from_slice(&marker.generation.0.to_le_bytes());
    header.extend_from_slice(&marker.vector_seq.to_le_bytes());
    hash.raw(&header);
    out.write_all(&header).map_err(io("write"))?;
    let mut count = 0u64;
    let mut failed: Option<std::io::Error> = None;
    let mut row = Vec::with_capacity(32 + 4 * dims);
    fill(&mut |id: &ChunkId, vector: &[f32]| {
        if vector.len() != dims {
            return Err(Error::Inconsistent(format!(
                "the ledger holds a vector of {} dimensions for chunk {id}, not {dims}",
                vector.len()
            )));
        }
        row.clear();
        row.extend_from_slice(id.as_bytes());
        for x in vector {
            row.extend_from_slice(&x.to_le_bytes());
        }
        hash.raw(&row);
        if let Err(err) = out.write_all(&row) {
            failed.get_or_insert(err);
        }
        count += 1;
        Ok(())
    })?;
    if let Some(err) = failed {
        return Err(io("write")(err));
    }
    hash.raw(&count.to_le_bytes());
    out.write_all(&count.to_le_bytes()).map_err(io("write"))?;
    out.write_all(&hash.finish()).map_err(io("write"))?;
    let file = out
        .into_inner()
        .map_err(|err| io("write")(err.into_error()))?;
    file.sync_all().map_err(io("sync"))?;
    Ok(count)
}

/// Removes the HNSW graph files that versions before sign codes kept beside the vector index
/// file `path`; returns whether there was one.
pub(crate) fn remove_old_graph(path: &Path) -> Result<bool> {
    let mut removed = false;
    for file in old_graph_files(path) {
        match std::fs::remove_file(&file) {
            Ok(()) => removed = true,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::io(format!("remove {}", file.display()), err)),
        }
    }
    Ok(removed)
}

/// Removes the vector index and what a killed write left beside it.
pub fn remove(path: &Path) -> Result<()> {
    remove_old_graph(path)?;
    for file in [path.to_path_buf(), temporary(path)] {
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::io(format!("remove {}", file.display()), err)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker() -> Marker {
        Marker {
            fingerprint: Fingerprint([7; 32]),
            generation: Generation(3),
            vector_seq: 9,
        }
    }

    fn written(dir: &Path, n: u32, dims: usize) -> (PathBuf, Vec<(ChunkId, Vec<f32>)>) {
        let vectors = crate::vectors::ann::random_unit_rows(n as usize, dims, 17);
        let rows: Vec<(ChunkId, Vec<f32>)> = vectors
            .chunks_exact(dims)
            .enumerate()
            .map(|(i, v)| (ids::chunk_id(&[], &format!("chunk {i}")), v.to_vec()))
            .collect();
        let mut sorted = rows.clone();
        sorted.sort_by_key(|(id, _)| *id);
        let file = path(dir);
        write(&file, &marker(), dims, |sink| {
            for (id, v) in &sorted {
                sink(id, v)?;
            }
            Ok(())
        })
        .expect("write");
        (file, sorted)
    }

    #[test]
    fn a_written_index_reads_back_and_finds_each_vector_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, rows) = written(dir.path(), 50, 16);
        let set = VectorSet::read(&file).expect("read").expect("present");
        assert_eq!(set.marker, marker());
        assert_eq!(
            VectorSet::read_marker(&file).expect("marker"),
            Some(marker())
        );
        assert_eq!(set.len(), 50);
        for (id, v) in &rows {
            let top = set.search(v, 3, None).expect("search");
            assert_eq!(top[0].0, *id);
            assert!(top[0].1 >= top[1].1 && top[1].1 >= top[2].1);
        }
        let mut infinite = rows[0].1.clone();
        infinite[3] = f32::INFINITY;
        let err = set.search(&infinite, 3, None).expect_err("refused");
        assert!(err.to_string().contains("not finite"), "{err}");
        let allowed: HashSet<u64> = rows[..5].iter().map(|(id, _)| id.short()).collect();
        let top = set.search(&rows[40].1, 10, Some(&allowed)).expect("search");
        assert_eq!(top.len(), 5);
        assert!(top.iter().all(|(id, _)| allowed.contains(&id.short())));
    }

    #[test]
    fn approximate_search_finds_what_exact_search_finds_with_and_without_a_filter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, rows) = written(dir.path(), 6_000, 64);
        let exact = VectorSet::read(&file).expect("read").expect("present");
        assert!(!exact.is_approximate());
        let mut approximate = VectorSet::read(&file).expect("read").expect("present");
        approximate.codes = Some(SignCodes::build(approximate.dims, &approximate.data));
        assert!(approximate.is_approximate() && approximate.codes_memory_bytes() > 0);
        let every_third: HashSet<u64> = rows.iter().step_by(3).map(|(id, _)| id.short()).collect();
        let three: HashSet<u64> = rows[..3].iter().map(|(id, _)| id.short()).collect();
        let overlap = |a: &[(ChunkId, f32)], b: &[(ChunkId, f32)]| {
            a.iter()
                .filter(|(id, _)| b.iter().any(|(other, _)| other == id))
                .count()
        };
        let (mut found, mut found_filtered, mut asked) = (0, 0, 0);
        for (id, v) in rows.iter().step_by(97) {
            let by_codes = approximate.search_with(v, 10, None, 0).expect("search");
            assert_eq!(by_codes[0].0, *id, "a stored vector finds itself first");
            // However many hits are asked for, the ranking is the same: pages do not overlap.
            let deep = approximate.search_with(v, 1_000, None, 0).expect("search");
            assert_eq!(by_codes[..], deep[..10]);
            assert!(by_codes.windows(2).all(|pair| pair[0].1 >= pair[1].1));
            found += overlap(
                &by_codes,
                &exact.search_with(v, 10, None, 0).expect("search"),
            );
            let filtered = approximate
                .search_with(v, 10, Some(&every_third), 0)
                .expect("search");
            assert_eq!(filtered.len(), 10);
            assert!(
                filtered
                    .iter()
                    .all(|(id, _)| every_third.contains(&id.short()))
            );
            found_filtered += overlap(
                &filtered,
                &exact
                    .search_with(v, 10, Some(&every_third), 0)
                    .expect("search"),
            );
            asked += 10;
            // Fewer allowed than asked for: every one of them is found, by either path.
            let few = approximate
                .search_with(v, 10, Some(&three), 0)
                .expect("search");
            assert_eq!(few.len(), 3);
            let few = approximate.search(v, 10, Some(&three)).expect("search");
            assert_eq!(few.len(), 3);
        }
        assert!(found * 100 >= asked * 95, "recall {found} of {asked}");
        assert!(
            found_filtered * 100 >= asked * 95,
            "filtered recall {found_filtered} of {asked}"
        );
    }

    #[test]
    fn a_damaged_index_is_refused_with_its_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, _) = written(dir.path(), 10, 8);
        let mut bytes = std::fs::read(&file).expect("read");
        for damage in [
            |b: &mut Vec<u8>| b.truncate(b.len() - 7),
            |b: &mut Vec<u8>| b[HEADER_LEN + 40] ^= 1,
            |b: &mut Vec<u8>| b[0] = b'X',
        ] {
            let mut damaged = bytes.clone();
            damage(&mut damaged);
            std::fs::write(&file, &damaged).expect("write");
            let err = VectorSet::read(&file).expect_err("refused");
            assert!(
                err.to_string().contains(&file.display().to_string()),
                "{err}"
            );
        }
        bytes.truncate(3);
        std::fs::write(&file, &bytes).expect("write");
        assert_eq!(VectorSet::read_marker(&file).expect("marker"), None);
    }
}
