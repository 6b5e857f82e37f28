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
//! Search is exact (a dot product with every vector; they are L2-normalised), unless
//! `GROUNDIDX_ANN_FROM` is set ([`ann_from`]): from that many vectors a writer also builds an
//! HNSW graph of the rows (`ann`),
//! `vectors.ann`, tagged with the marker of the `vectors.bin` it was built from and written
//! aside and renamed the same way; a reader uses it only when its tag and row count are those of
//! the `vectors.bin` it read, and otherwise searches exactly (right, only slower) until the next
//! writer builds it.

use std::collections::{BinaryHeap, HashSet};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::ann::{AnnConfig, AnnIndex};
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
/// The HNSW graph is built only when `GROUNDIDX_ANN_FROM` names a number of vectors: exact
/// search is the default at every size. Measured on 100,000 random 384-dimensional vectors, the
/// graph (M 32, ef_construction 128) took 347 s to build and reached recall@10 0.45 at
/// ef_search 256 in 7.9 ms, where an exact search on one core took 8.1 ms (docs/BENCHMARKS.md,
/// "Vector search"), so it is not turned on by itself.
pub const ANN_ENV: &str = "GROUNDIDX_ANN_FROM";
/// A filtered search allowing at most this many chunks is answered exactly even when there is a
/// graph: a graph search would walk through many disallowed nodes to find k allowed ones.
pub const EXACT_FILTER_LIMIT: usize = 10_000;

/// The number of vectors from which the ANN graph is built: `GROUNDIDX_ANN_FROM` when it is set
/// to a whole number, else never.
pub fn ann_from() -> usize {
    std::env::var(ANN_ENV)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(usize::MAX)
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
    /// The graph over the rows, when one was built for exactly these rows.
    ann: Option<AnnIndex>,
}

impl std::fmt::Debug for VectorSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorSet")
            .field("marker", &self.marker)
            .field("dims", &self.dims)
            .field("len", &self.ids.len())
            .field("ann", &self.ann.is_some())
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

/// The ANN graph's file beside the vector index file `path`.
pub fn ann_path(path: &Path) -> PathBuf {
    path.with_extension("ann")
}

fn ann_temporary(path: &Path) -> PathBuf {
    path.with_extension("ann.tmp")
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

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
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
        if let Some(ann) = &self.ann
            && allowed.is_none_or(|allowed| allowed.len() > exact_filter_limit)
        {
            let keys = &self.keys;
            let filter =
                |row: u64| allowed.is_none_or(|allowed| allowed.contains(&keys[row as usize]));
            let hits = match allowed {
                None => ann.search(query, k, None),
                Some(_) => ann.search(query, k, Some(&filter)),
            };
            // A filtered walk can end with fewer than k allowed rows while more exist: then
            // the exact search below answers.
            if hits.len() >= k.min(self.len()) || allowed.is_none() {
                return Ok(hits
                    .into_iter()
                    .map(|(row, score)| (self.ids[row as usize], score))
                    .collect());
            }
        }
        let top_of = |range: std::ops::Range<usize>| -> BinaryHeap<Scored> {
            let mut heap = BinaryHeap::with_capacity(k + 1);
            for i in range {
                if allowed.is_some_and(|allowed| !allowed.contains(&self.keys[i])) {
                    continue;
                }
                let score = dot(self.row(i), query);
                if heap.len() < k {
                    heap.push(Scored(score, i));
                } else if let Some(worst) = heap.peek()
                    && Scored(score, i) < *worst
                {
                    heap.pop();
                    heap.push(Scored(score, i));
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
        best.sort();
        best.truncate(k);
        Ok(best
            .into_iter()
            .map(|Scored(score, i)| (self.ids[i], score))
            .collect())
    }

    /// Whether searches go through an ANN graph.
    pub fn has_ann(&self) -> bool {
        self.ann.is_some()
    }

    /// Reads the vector index file, and the ANN graph beside it when that was built from this
    /// very file (a graph that is missing, stale or damaged is left out: searches are exact);
    /// `Ok(None)` when there is no vector index.
    pub fn read(path: &Path) -> Result<Option<VectorSet>> {
        let Some(mut set) = VectorSet::read_rows(path)? else {
            return Ok(None);
        };
        let ann = ann_path(path);
        if AnnIndex::read_tag(&ann)? == Some(set.marker.key()) {
            match AnnIndex::load(&ann) {
                Ok(graph) if graph.len() == set.len() && graph.dims() == set.dims => {
                    set.ann = Some(graph);
                }
                Ok(graph) => tracing::warn!(
                    path = %ann.display(),
                    rows = graph.len(),
                    expected = set.len(),
                    "the ANN graph does not match the vector index; searching exactly"
                ),
                Err(err) => {
                    tracing::warn!(error = %err, "the ANN graph cannot be used; searching exactly");
                }
            }
        }
        Ok(Some(set))
    }

    /// Whether the ANN graph file beside `path` was built for the vector index with `marker`
    /// (from its trailer alone), so that a reader holding a set without one should read again.
    pub fn ann_ready(path: &Path, marker: &Marker) -> Result<bool> {
        Ok(AnnIndex::read_tag(&ann_path(path))? == Some(marker.key()))
    }

    fn read_rows(path: &Path) -> Result<Option<VectorSet>> {
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
    pub fn read_marker(path: &Path) -> Result<Option<Marker>> {
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
        ann: None,
    })
}

/// Writes the vector index file from `rows` (chunk ID order), aside and then renamed into place.
/// `fill` is called with a sink that takes one row at a time.
pub fn write(
    path: &Path,
    marker: &Marker,
    dims: usize,
    fill: impl FnOnce(&mut dyn FnMut(&ChunkId, &[f32]) -> Result<()>) -> Result<()>,
) -> Result<u64> {
    let aside = temporary(path);
    let io = |what: &str| {
        let context = format!("{what} {}", aside.display());
        move |err| Error::io(context, err)
    };
    let file = std::fs::File::create(&aside).map_err(io("create"))?;
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
    drop(file);
    crash_point("vectors.before_rename");
    std::fs::rename(&aside, path)
        .map_err(|err| Error::io(format!("rename {} into place", aside.display()), err))?;
    if let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    crash_point("vectors.after_rename");
    Ok(count)
}

/// The row count recorded in the trailer of the vector index file (nothing else is checked);
/// `Ok(None)` when there is no file or it is too short to hold a trailer.
pub fn read_count(path: &Path) -> Result<Option<u64>> {
    use std::io::{Seek, SeekFrom};
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(Error::io(format!("open {}", path.display()), err)),
    };
    let len = file
        .metadata()
        .map_err(|err| Error::io(format!("stat {}", path.display()), err))?
        .len();
    if len < (HEADER_LEN + TRAILER_LEN) as u64 {
        return Ok(None);
    }
    let mut count = [0u8; 8];
    file.seek(SeekFrom::Start(len - TRAILER_LEN as u64))
        .and_then(|_| file.read_exact(&mut count))
        .map_err(|err| Error::io(format!("read {}", path.display()), err))?;
    Ok(Some(u64::from_le_bytes(count)))
}

/// Builds the ANN graph of `set`'s rows, tagged with its marker, and writes it beside the
/// vector index file `path`: aside, synced, then renamed into place.
pub fn write_ann(path: &Path, set: &VectorSet) -> Result<()> {
    let graph = AnnIndex::build(set.dims, &set.data, AnnConfig::default(), set.marker.key())?;
    let aside = ann_temporary(path);
    graph.save(&aside)?;
    crash_point("ann.before_rename");
    let target = ann_path(path);
    std::fs::rename(&aside, &target)
        .map_err(|err| Error::io(format!("rename {} into place", aside.display()), err))?;
    if let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    crash_point("ann.after_rename");
    Ok(())
}

/// Removes the ANN graph beside the vector index file `path` and what a killed write left.
pub fn remove_ann(path: &Path) -> Result<()> {
    for file in [ann_path(path), ann_temporary(path)] {
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::io(format!("remove {}", file.display()), err)),
        }
    }
    Ok(())
}

/// Removes the vector index and what a killed write left beside it.
pub fn remove(path: &Path) -> Result<()> {
    remove_ann(path)?;
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
        let vectors = crate::ann::random_unit_rows(n as usize, dims, 17);
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
        let allowed: HashSet<u64> = rows[..5].iter().map(|(id, _)| id.short()).collect();
        let top = set.search(&rows[40].1, 10, Some(&allowed)).expect("search");
        assert_eq!(top.len(), 5);
        assert!(top.iter().all(|(id, _)| allowed.contains(&id.short())));
    }

    #[test]
    fn the_graph_answers_as_exact_search_with_and_without_a_filter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, rows) = written(dir.path(), 600, 32);
        let exact = VectorSet::read(&file).expect("read").expect("present");
        assert!(!exact.has_ann());
        write_ann(&file, &exact).expect("write the graph");
        assert!(VectorSet::ann_ready(&file, &exact.marker).expect("tag"));
        let graph = VectorSet::read(&file).expect("read").expect("present");
        assert!(graph.has_ann());
        let every_third: HashSet<u64> = rows.iter().step_by(3).map(|(id, _)| id.short()).collect();
        let three: HashSet<u64> = rows[..3].iter().map(|(id, _)| id.short()).collect();
        let (mut found, mut found_filtered, mut asked) = (0, 0, 0);
        for (id, v) in rows.iter().step_by(37) {
            let by_graph = graph.search_with(v, 10, None, 0).expect("search");
            assert_eq!(by_graph[0].0, *id);
            // The graph is approximate: its answers are counted against exact search.
            let overlap = |a: &[(ChunkId, f32)], b: &[(ChunkId, f32)]| {
                a.iter()
                    .filter(|(id, _)| b.iter().any(|(other, _)| other == id))
                    .count()
            };
            found += overlap(
                &by_graph,
                &exact.search_with(v, 10, None, 0).expect("search"),
            );
            // A filter walked through the graph keeps to the allowed chunks, k of them.
            let filtered = graph
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
            // Fewer allowed than asked for: the exact search finds every one of them.
            let few = graph.search_with(v, 10, Some(&three), 0).expect("search");
            assert_eq!(few.len(), 3);
        }
        assert!(found * 100 >= asked * 95, "recall {found} of {asked}");
        assert!(
            found_filtered * 100 >= asked * 95,
            "filtered recall {found_filtered} of {asked}"
        );
        // A vector index of other rows under the same marker: the tag matches, the row count
        // does not, and the graph is not used.
        let (file, _) = written(dir.path(), 601, 32);
        assert!(VectorSet::ann_ready(&file, &marker()).expect("tag"));
        let set = VectorSet::read(&file).expect("read").expect("present");
        assert_eq!(set.len(), 601);
        assert!(!set.has_ann(), "a graph of 600 rows was used for 601");
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
