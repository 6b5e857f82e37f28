//! An approximate nearest-neighbour (ANN) index over L2-normalised vectors, for stores too large
//! for exact search: an HNSW graph (usearch) over the rows of the vector index, keyed by row
//! number, with inner-product similarity.
//!
//! This module owns the graph, its parameters, filtered search and the graph's file (usearch's
//! bytes followed by a trailer of our own: format version, parameters, length, a tag naming what
//! it was built from, and a checksum). It does not own which vectors exist or when the graph is
//! built: the vector projection (`src/vectors.rs`) builds it from its rows, saves it to a
//! temporary path and renames it in. The graph is rebuild-only: nothing is added to or removed
//! from a built one.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Condvar, Mutex, PoisonError};

use rayon::prelude::{IndexedParallelIterator, ParallelIterator, ParallelSlice};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use crate::error::{Error, Result};
use crate::ids::{StreamHash, VECTORS_VERSION};

/// The parameters of the HNSW graph.
///
/// The defaults are a starting point: `benches/ann_recall.rs` measures recall@10 against exact
/// search and latency for any of them (docs/BENCHMARKS.md, "Vector search"). Random vectors are
/// the hard case; real embeddings, which cluster, need less.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnConfig {
    /// Neighbours kept per node and graph layer (HNSW's M; layer 0 keeps twice as many).
    /// More costs memory (about 8·M bytes a vector) and build time, and raises recall.
    /// Default 32.
    pub connectivity: usize,
    /// Candidates considered when a node is linked in (HNSW's efConstruction).
    /// More costs build time and gives a better graph. Default 128.
    pub ef_construction: usize,
    /// Candidates kept while searching (HNSW's ef); a search for k > ef keeps k.
    /// More costs latency and raises recall. Default 256.
    pub ef_search: usize,
}

impl Default for AnnConfig {
    fn default() -> AnnConfig {
        AnnConfig {
            connectivity: 32,
            ef_construction: 128,
            ef_search: 256,
        }
    }
}

/// An HNSW index of (chunk key, vector) rows; similarity is the dot product.
pub struct AnnIndex {
    index: Index,
    config: AnnConfig,
    /// What the index was built from, recorded in its file (the vector index's marker key).
    tag: u64,
    /// Free usearch thread contexts: a search takes one, so no more searches run at once than
    /// usearch has contexts for (it fails a search that finds none).
    slots: Slots,
}

impl AnnIndex {
    /// Builds an index of the rows of `data` (`dims` values each, L2-normalised), row `i`
    /// keyed `i`, on every core of the current rayon pool.
    /// `tag` is kept with the index and in its file: what it was built from.
    pub fn build(dims: usize, data: &[f32], config: AnnConfig, tag: u64) -> Result<AnnIndex> {
        if dims == 0 || !data.len().is_multiple_of(dims) {
            return Err(Error::Inconsistent(format!(
                "{} values do not make rows of {dims} dimensions for the ANN index",
                data.len()
            )));
        }
        let index = new_index(dims, &config).map_err(|e| foreign("creating an ANN index", &e))?;
        let rows = data.len() / dims;
        let threads = rayon::current_num_threads().max(1);
        index
            .reserve_capacity_and_threads(rows.max(1), threads)
            .map_err(|e| reserve_failed(rows, &e.to_string()))?;
        data.par_chunks_exact(dims)
            .enumerate()
            .try_for_each(|(row, vector)| {
                index.add(row as u64, vector).map_err(|e| {
                    Error::Inconsistent(format!(
                        "the ANN index refused the vector of row {row}: {e}"
                    ))
                })
            })?;
        AnnIndex::ready(index, config, tag)
    }

    /// At most `k` rows most similar to `query` by the graph, best first (ties by row), as
    /// (row, dot product); with `allowed`, only rows it accepts (the search walks on through
    /// the others, so it may still find fewer than `k`: the caller then searches exactly).
    ///
    /// Panics if `query` does not have the index's dimensions: the caller checks them.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        allowed: Option<&(dyn Fn(u64) -> bool + Sync)>,
    ) -> Vec<(u64, f32)> {
        assert_eq!(
            query.len(),
            self.dims(),
            "a query has the dimensions of the index it searches"
        );
        if k == 0 || self.is_empty() {
            return Vec::new();
        }
        let _slot = self.slots.take();
        let matches = match allowed {
            None => self.index.search(query, k),
            Some(allowed) => self.index.filtered_search(query, k, allowed),
        };
        // usearch fails a search only when it finds no free thread context, which `slots`
        // prevents, or when it cannot allocate.
        let matches = matches.expect("a search holding a free usearch context succeeds");
        let mut hits: Vec<(u64, f32)> = matches
            .keys
            .into_iter()
            .zip(matches.distances)
            .map(|(row, distance)| (row, 1.0 - distance))
            .collect();
        hits.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits
    }

    /// Writes the index to `path` (created or truncated). The caller writes to a temporary
    /// path and renames it in, so a reader never sees half a file.
    pub fn save(&self, path: &Path) -> Result<()> {
        let context = || format!("writing the ANN index {}", path.display());
        self.index
            .save(utf8(path)?)
            .map_err(|e| Error::io(context(), std::io::Error::other(e.to_string())))?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::io(context(), e))?;
        let payload_len = file.metadata().map_err(|e| Error::io(context(), e))?.len();
        let mut trailer = Trailer {
            dims: self.dims() as u64,
            len: self.len() as u64,
            connectivity: self.config.connectivity as u64,
            ef_construction: self.config.ef_construction as u64,
            ef_search: self.config.ef_search as u64,
            payload_len,
            tag: self.tag,
            checksum: [0; 32],
        };
        trailer.checksum = checksum(&mut file, &trailer).map_err(|e| Error::io(context(), e))?;
        file.write_all(&trailer.encode())
            .and_then(|()| file.sync_all())
            .map_err(|e| Error::io(context(), e))
    }

    /// Reads an index [`AnnIndex::save`] wrote. A file that is truncated, damaged or not an
    /// index of ours is `Error::IndexUnusable` naming it (its bytes never reach usearch unless
    /// their checksum matches); an I/O failure is `Error::Io`.
    pub fn load(path: &Path) -> Result<AnnIndex> {
        let unusable = |reason: String| Error::IndexUnusable {
            path: path.to_path_buf(),
            reason,
        };
        let context = || format!("reading the ANN index {}", path.display());
        let mut file = File::open(path).map_err(|e| Error::io(context(), e))?;
        let file_len = file.metadata().map_err(|e| Error::io(context(), e))?.len();
        let Some(payload_len) = file_len.checked_sub(TRAILER_LEN as u64) else {
            return Err(unusable(format!(
                "it has {file_len} bytes, too few for a groundidx ANN index: it is truncated or another program's file"
            )));
        };
        let mut bytes = [0; TRAILER_LEN];
        file.seek(SeekFrom::Start(payload_len))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(|e| Error::io(context(), e))?;
        let trailer = Trailer::decode(&bytes).map_err(unusable)?;
        if trailer.payload_len != payload_len {
            return Err(unusable(format!(
                "its trailer records {} bytes of graph, the file holds {payload_len}: it is truncated or was appended to",
                trailer.payload_len
            )));
        }
        if checksum(&mut file, &trailer).map_err(|e| Error::io(context(), e))? != trailer.checksum {
            return Err(unusable(
                "its checksum does not match its contents: the file is damaged".to_string(),
            ));
        }
        let config = AnnConfig {
            connectivity: field(trailer.connectivity, "connectivity").map_err(unusable)?,
            ef_construction: field(trailer.ef_construction, "ef_construction").map_err(unusable)?,
            ef_search: field(trailer.ef_search, "ef_search").map_err(unusable)?,
        };
        let dims = field(trailer.dims, "dimensions").map_err(unusable)?;
        let index = new_index(dims, &config).map_err(|e| foreign("creating an ANN index", &e))?;
        index
            .load(utf8(path)?)
            .map_err(|e| unusable(format!("usearch cannot read it: {e}")))?;
        if index.size() as u64 != trailer.len || index.dimensions() != dims {
            return Err(unusable(format!(
                "it holds {} vectors of {} dimensions, its trailer records {} of {dims}",
                index.size(),
                index.dimensions(),
                trailer.len
            )));
        }
        AnnIndex::ready(index, config, trailer.tag)
    }

    /// The tag recorded in the trailer of the index file at `path`, read from the trailer
    /// alone (nothing is checked but its magic): `Ok(None)` when there is no such file or it
    /// does not end with a trailer.
    pub fn read_tag(path: &Path) -> Result<Option<u64>> {
        let context = || format!("reading the ANN index {}", path.display());
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(Error::io(context(), err)),
        };
        let file_len = file.metadata().map_err(|e| Error::io(context(), e))?.len();
        let Some(at) = file_len.checked_sub(TRAILER_LEN as u64) else {
            return Ok(None);
        };
        let mut bytes = [0; TRAILER_LEN];
        file.seek(SeekFrom::Start(at))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(|e| Error::io(context(), e))?;
        Ok(Trailer::decode(&bytes).ok().map(|trailer| trailer.tag))
    }

    /// What the index was built from (given to [`AnnIndex::build`], kept in its file).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The number of vectors in the index.
    pub fn len(&self) -> usize {
        self.index.size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dimensions of every vector in the index.
    pub fn dims(&self) -> usize {
        self.index.dimensions()
    }

    /// The parameters the index was built with (and searches with).
    pub fn config(&self) -> AnnConfig {
        self.config
    }

    /// Changes the number of candidates kept while searching (the only parameter that can
    /// change after the build); `save` records it.
    pub fn set_ef_search(&mut self, ef_search: usize) {
        self.config.ef_search = ef_search.max(1);
        self.index.change_expansion_search(self.config.ef_search);
    }

    /// Sets the search parameters and the search contexts of a built or loaded index.
    fn ready(index: Index, config: AnnConfig, tag: u64) -> Result<AnnIndex> {
        let slots = std::thread::available_parallelism().map_or(1, usize::from);
        index.change_expansion_search(config.ef_search.max(1));
        index
            .reserve_capacity_and_threads(index.size(), slots)
            .map_err(|e| reserve_failed(index.size(), &e.to_string()))?;
        Ok(AnnIndex {
            index,
            config,
            tag,
            slots: Slots::new(slots),
        })
    }
}

/// The dot product of two vectors of equal length, in eight lanes so the compiler vectorises it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks
        .remainder()
        .iter()
        .zip(b_chunks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

fn new_index(dims: usize, config: &AnnConfig) -> Result<Index, String> {
    Index::new(&IndexOptions {
        dimensions: dims,
        metric: MetricKind::IP,
        quantization: ScalarKind::F32,
        connectivity: config.connectivity,
        expansion_add: config.ef_construction,
        expansion_search: config.ef_search,
        multi: false,
    })
    .map_err(|e| e.to_string())
}

fn foreign(context: &str, message: &str) -> Error {
    Error::io(context, std::io::Error::other(message.to_string()))
}

fn reserve_failed(capacity: usize, message: &str) -> Error {
    foreign(
        &format!("reserving room for {capacity} vectors in the ANN index"),
        message,
    )
}

fn utf8(path: &Path) -> Result<&str> {
    path.to_str().ok_or_else(|| {
        Error::io(
            format!("opening the ANN index {}", path.display()),
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "usearch takes UTF-8 paths only\nhint: use a --store path that is valid UTF-8",
            ),
        )
    })
}

fn field(value: u64, name: &str) -> Result<usize, String> {
    usize::try_from(value)
        .ok()
        .filter(|value| (1..=1 << 20).contains(value))
        .ok_or_else(|| format!("its trailer records {name} {value}, out of range"))
}

/// Marks the end of every index file, after usearch's bytes.
const MAGIC: &[u8; 16] = b"groundidx-ann\0v1";
/// Magic, seven u64 fields, the checksum.
const TRAILER_LEN: usize = 16 + FIELDS * 8 + 32;
const FIELDS: usize = 7;

/// The last bytes of an index file; every integer little-endian.
struct Trailer {
    dims: u64,
    len: u64,
    connectivity: u64,
    ef_construction: u64,
    ef_search: u64,
    payload_len: u64,
    tag: u64,
    /// `StreamHash(VECTORS_VERSION)` over "ann", the fields above and the payload.
    checksum: [u8; 32],
}

impl Trailer {
    fn fields(&self) -> [u64; FIELDS] {
        [
            self.dims,
            self.len,
            self.connectivity,
            self.ef_construction,
            self.ef_search,
            self.payload_len,
            self.tag,
        ]
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(TRAILER_LEN);
        bytes.extend_from_slice(MAGIC);
        for value in self.fields() {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        bytes.extend_from_slice(&self.checksum);
        bytes
    }

    fn decode(bytes: &[u8; TRAILER_LEN]) -> Result<Trailer, String> {
        let (magic, rest) = bytes.split_at(MAGIC.len());
        if magic != MAGIC {
            return Err(
                "it does not end with a groundidx ANN index trailer: it is truncated, of another format version, or another program's file"
                    .to_string(),
            );
        }
        let (numbers, checksum) = rest.split_at(FIELDS * 8);
        let value =
            |i: usize| u64::from_le_bytes(numbers[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Ok(Trailer {
            dims: value(0),
            len: value(1),
            connectivity: value(2),
            ef_construction: value(3),
            ef_search: value(4),
            payload_len: value(5),
            tag: value(6),
            checksum: checksum.try_into().expect("the trailer ends with 32 bytes"),
        })
    }
}

/// The checksum of the trailer's fields and the first `payload_len` bytes of `file`.
fn checksum(file: &mut File, trailer: &Trailer) -> std::io::Result<[u8; 32]> {
    let mut hash = StreamHash::new(VECTORS_VERSION);
    hash.part(b"ann");
    for value in trailer.fields() {
        hash.raw(&value.to_le_bytes());
    }
    file.seek(SeekFrom::Start(0))?;
    let mut reader = file.take(trailer.payload_len);
    let mut buffer = vec![0; 1 << 20];
    let mut read = 0u64;
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hash.raw(&buffer[..n]);
        read += n as u64;
    }
    if read != trailer.payload_len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "the file ended after {read} of {} bytes",
                trailer.payload_len
            ),
        ));
    }
    Ok(hash.finish())
}

/// A counting semaphore over usearch's thread contexts.
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

struct Slot<'a>(&'a Slots);

impl Slots {
    fn new(n: usize) -> Slots {
        Slots {
            free: Mutex::new(n),
            freed: Condvar::new(),
        }
    }

    fn take(&self) -> Slot<'_> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

/// `n` seeded pseudo-random vectors uniform on the unit sphere, one after another (SplitMix64
/// and the Box–Muller transform), for the tests and the recall benchmark.
pub fn random_unit_rows(n: usize, dims: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        // 53 bits in (0, 1].
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64 + f64::EPSILON
    };
    let mut rows = Vec::with_capacity(n * dims);
    for _ in 0..n {
        let start = rows.len();
        while rows.len() < start + dims {
            let (u, v) = (next(), next());
            let radius = (-2.0 * u.ln()).sqrt();
            let angle = std::f64::consts::TAU * v;
            rows.push((radius * angle.cos()) as f32);
            if rows.len() < start + dims {
                rows.push((radius * angle.sin()) as f32);
            }
        }
        let row = &mut rows[start..];
        let norm = dot(row, row).sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    rows
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Path;

    use super::{AnnConfig, AnnIndex, dot, random_unit_rows};
    use crate::error::Error;

    fn random_rows(n: usize, dims: usize, seed: u64) -> Vec<f32> {
        random_unit_rows(n, dims, seed)
    }

    /// Queries: rows of another seed.
    fn queries(n: usize, dims: usize, seed: u64) -> Vec<Vec<f32>> {
        random_unit_rows(n, dims, seed)
            .chunks_exact(dims)
            .map(<[f32]>::to_vec)
            .collect()
    }

    fn build(dims: usize, data: &[f32]) -> AnnIndex {
        AnnIndex::build(dims, data, AnnConfig::default(), 7).expect("build")
    }

    /// The exact top k rows, best first, ties by row.
    fn brute_force(data: &[f32], dims: usize, query: &[f32], k: usize) -> Vec<u64> {
        let mut hits: Vec<(u64, f32)> = data
            .chunks_exact(dims)
            .enumerate()
            .map(|(row, vector)| (row as u64, dot(query, vector)))
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.into_iter().take(k).map(|(row, _)| row).collect()
    }

    fn rows(hits: &[(u64, f32)]) -> Vec<u64> {
        hits.iter().map(|(row, _)| *row).collect()
    }

    fn assert_unusable(path: &Path, what: &str) {
        match AnnIndex::load(path) {
            Err(error @ Error::IndexUnusable { .. }) => {
                let message = error.to_string();
                assert!(
                    message.contains(&path.display().to_string()),
                    "{what}: the error names the file: {message}"
                );
            }
            Err(other) => panic!("{what}: expected IndexUnusable, got {other}"),
            Ok(_) => panic!("{what}: a damaged file was loaded"),
        }
    }

    #[test]
    fn recall_at_10_against_exact_search_is_at_least_095() {
        let data = random_rows(4_000, 384, 1);
        let index = build(384, &data);
        assert_eq!(index.len(), 4_000);
        let n_queries = 100;
        let mut found = 0;
        for query in queries(n_queries, 384, 2) {
            let exact: HashSet<u64> = brute_force(&data, 384, &query, 10).into_iter().collect();
            let hits = index.search(&query, 10, None);
            assert_eq!(hits.len(), 10);
            assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
            found += hits.iter().filter(|(row, _)| exact.contains(row)).count();
        }
        let recall = found as f64 / (10 * n_queries) as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
    }

    #[test]
    fn similarity_is_the_dot_product() {
        let data = random_rows(500, 32, 3);
        let index = build(32, &data);
        let query = &data[17 * 32..18 * 32];
        let hits = index.search(query, 3, None);
        assert_eq!(hits[0].0, 17, "a stored vector is its own best match");
        for (row, similarity) in hits {
            let vector = &data[row as usize * 32..(row as usize + 1) * 32];
            assert!((similarity - dot(query, vector)).abs() < 1e-4);
        }
    }

    #[test]
    fn a_filtered_search_returns_allowed_rows_only_and_k_of_them() {
        let data = random_rows(6_000, 16, 7);
        let index = build(16, &data);
        let allowed = |row: u64| row % 3 == 1;
        for (k, query) in [1, 10, 100].into_iter().zip(queries(3, 16, 8)) {
            let hits = index.search(&query, k, Some(&allowed));
            assert_eq!(hits.len(), k);
            assert!(hits.iter().all(|(row, _)| allowed(*row)));
            let distinct: HashSet<u64> = rows(&hits).into_iter().collect();
            assert_eq!(distinct.len(), k, "no row twice");
        }
        let none = |_: u64| false;
        assert!(index.search(&data[..16], 10, Some(&none)).is_empty());
    }

    #[test]
    fn searches_on_more_threads_than_usearch_contexts_all_answer() {
        let data = random_rows(2_000, 32, 9);
        let index = build(32, &data);
        let queries: Vec<&[f32]> = data.chunks_exact(32).take(16).collect();
        let expected: Vec<Vec<u64>> = queries
            .iter()
            .map(|query| rows(&index.search(query, 5, None)))
            .collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = queries
                .iter()
                .map(|query| scope.spawn(|| rows(&index.search(query, 5, None))))
                .collect();
            let answers: Vec<Vec<u64>> = handles
                .into_iter()
                .map(|handle| handle.join().expect("a search thread"))
                .collect();
            assert_eq!(answers, expected);
        });
    }

    #[test]
    fn save_then_load_gives_the_same_answers_and_tag() {
        let data = random_rows(3_000, 64, 10);
        let config = AnnConfig {
            connectivity: 12,
            ef_construction: 64,
            ef_search: 40,
        };
        let index = AnnIndex::build(64, &data, config, 0xfeed).expect("build");
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ann");
        index.save(&path).expect("save");
        assert_eq!(AnnIndex::read_tag(&path).expect("tag"), Some(0xfeed));
        let loaded = AnnIndex::load(&path).expect("load");
        assert_eq!(loaded.len(), index.len());
        assert_eq!(loaded.dims(), 64);
        assert_eq!(loaded.config(), config);
        assert_eq!(loaded.tag(), 0xfeed);
        let allowed = |row: u64| row.is_multiple_of(5);
        for query in queries(50, 64, 11) {
            assert_eq!(
                loaded.search(&query, 10, None),
                index.search(&query, 10, None)
            );
            assert_eq!(
                loaded.search(&query, 10, Some(&allowed)),
                index.search(&query, 10, Some(&allowed))
            );
        }
        assert_eq!(
            AnnIndex::read_tag(&dir.path().join("none")).expect("tag"),
            None
        );
    }

    #[test]
    fn an_empty_index_answers_nothing_and_survives_a_save() {
        let index = build(8, &[]);
        assert!(index.is_empty());
        assert!(index.search(&[0.0; 8], 10, None).is_empty());
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ann");
        index.save(&path).expect("save");
        let loaded = AnnIndex::load(&path).expect("load");
        assert!(loaded.is_empty());
        assert_eq!(loaded.dims(), 8);
    }

    #[test]
    fn a_damaged_or_foreign_file_is_refused_with_its_path() {
        let index = build(16, &random_rows(500, 16, 12));
        let dir = tempfile::tempdir().expect("temp dir");
        let good = dir.path().join("good");
        index.save(&good).expect("save");
        let bytes = std::fs::read(&good).expect("read");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("ten bytes", bytes[..10].to_vec()),
            ("without its last byte", bytes[..bytes.len() - 1].to_vec()),
            ("without its trailer", bytes[..bytes.len() - 104].to_vec()),
            ("half", bytes[..bytes.len() / 2].to_vec()),
            ("appended to", [bytes.as_slice(), b"x"].concat()),
            ("a byte flipped in the graph", {
                let mut bytes = bytes.clone();
                let at = bytes.len() / 3;
                bytes[at] ^= 0x40;
                bytes
            }),
            ("a byte flipped in the trailer", {
                let mut bytes = bytes.clone();
                let at = bytes.len() - 40;
                bytes[at] ^= 1;
                bytes
            }),
            (
                "another program's file",
                b"# notes\nnot an index at all\n".repeat(20),
            ),
        ];
        for (what, bytes) in cases {
            let path = dir.path().join(what.replace(' ', "-"));
            std::fs::write(&path, bytes).expect("write");
            assert_unusable(&path, what);
        }
        let missing = dir.path().join("missing");
        match AnnIndex::load(&missing) {
            Err(error @ Error::Io { .. }) => {
                assert!(error.to_string().contains(&missing.display().to_string()));
            }
            other => panic!("a missing file is an I/O error, got {:?}", other.err()),
        }
    }

    #[test]
    fn rows_of_the_wrong_length_are_refused() {
        let error = AnnIndex::build(8, &[0.5; 12], AnnConfig::default(), 0)
            .err()
            .expect("12 values are not rows of 8");
        assert!(error.to_string().contains("12 values"), "{error}");
    }

    #[test]
    fn random_rows_are_unit_vectors_and_differ_by_seed() {
        let rows = random_unit_rows(50, 24, 1);
        assert_eq!(rows.len(), 50 * 24);
        for row in rows.chunks_exact(24) {
            assert!((dot(row, row) - 1.0).abs() < 1e-4);
        }
        assert_eq!(rows, random_unit_rows(50, 24, 1));
        assert_ne!(rows, random_unit_rows(50, 24, 2));
        // Roughly centred: the mean of every coordinate is near 0.
        let mean: f32 = rows.iter().sum::<f32>() / rows.len() as f32;
        assert!(mean.abs() < 0.05, "{mean}");
    }
}
