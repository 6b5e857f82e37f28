//! Approximate nearest-neighbour (ANN) search for vector indexes too large to scan exactly on
//! every query: one sign bit per dimension of each vector (its difference from the set's mean),
//! held in memory beside the f32 rows, and a search that looks at every row cheaply and at few
//! rows closely.
//!
//! A search makes a shortlist in two passes, and the caller ranks the shortlist exactly:
//! 1. Every row's Hamming distance between its bits and the query's signs (6 words of
//!    XOR and popcount a row at 384 dimensions); the `coarse` nearest rows go on.
//! 2. Those rows scored by the query's own values against their signs (`Σ q_i · ±1`, through a
//!    table of 256 sums per code byte), which loses far less than comparing two sets of bits;
//!    the `fine` best go on.
//! 3. (The caller, `vectors`) the exact dot product of the shortlist's f32 rows with the query.
//!
//! Recall is set by the shortlist sizes, not by the shape of the data: `candidates` grows them
//! with the square root of the rows, which holds recall@10 at 0.95 or more against exact search
//! on random unit vectors (the hardest case: no clusters to exploit) from 100,000 to 1,000,000
//! rows (docs/BENCHMARKS.md, "Vector search"). Real embeddings, which cluster, do better.
//!
//! The codes are computed from the rows when the vector index is read (no file of their own,
//! so nothing to go stale, to damage or to heal), in about a second per million rows.
//! This module owns the codes, the shortlist and the SIMD kernels (`dots`, the Hamming scan),
//! which are compiled for AVX2/FMA/POPCNT and chosen at run time by `pulp`; it does not own
//! the rows, the exact ranking or when a search is approximate (`vectors`).

use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

/// Rows scanned per task in the parallel passes: large enough to amortise the task, small
/// enough that two cores share the work evenly.
const ROWS_PER_TASK: usize = 16_384;

/// How many rows each pass of a search keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidates {
    /// Rows kept by Hamming distance (pass 1).
    pub coarse: usize,
    /// Rows kept by the asymmetric score (pass 2), then ranked exactly.
    pub fine: usize,
}

/// The fewest rows pass 2 keeps (unless there are fewer): the deepest first pass of a paged
/// search, which asks for `2 × (search::MAX_PAGED_HITS + 1) + 8` hits.
pub(crate) const FINE_FLOOR: usize = 2_010;

/// The shortlist sizes for a search among `rows` rows: `coarse` 96·√rows and `fine` a sixth of
/// it, `fine` at least `FINE_FLOOR`, and neither more than `rows`.
///
/// Measured on random unit vectors of 384 dimensions (`benches/ann_recall.rs`), the
/// distribution where bits lose the most: recall@10 against exact search is 0.95 or more from
/// 100,000 to 1,000,000 rows. The sizes do not depend on how many hits are asked for, so every
/// search of one vector index ranks the same shortlist the same way: the pages of a search
/// follow each other without a gap or a repeat, and a hybrid leg's top 30 is the same on every
/// page.
pub fn candidates(rows: usize) -> Candidates {
    let root = (rows as f64).sqrt();
    let coarse = ((96.0 * root) as usize).max(4_096).min(rows);
    let fine = (coarse / 6).max(FINE_FLOOR).min(coarse);
    Candidates { coarse, fine }
}

/// The sign codes of a set of rows.
pub struct SignCodes {
    dims: usize,
    /// 64-bit words per row: `dims` bits, rounded up (the padding bits are 0 in every row and
    /// in every query, so they never count).
    words: usize,
    /// The mean of the rows, subtracted before taking signs, so that vectors which all lean one
    /// way (as real embeddings do) still split their bits evenly.
    mean: Vec<f32>,
    /// `rows × words`, row-major; bit `d % 64` of word `d / 64` is dimension `d`.
    codes: Vec<u64>,
}

impl std::fmt::Debug for SignCodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignCodes")
            .field("dims", &self.dims)
            .field("rows", &self.len())
            .finish()
    }
}

impl SignCodes {
    /// The codes of the rows of `data` (`dims` values each), on every core of the current
    /// rayon pool.
    ///
    /// Panics if `data` is not whole rows: the vector index checked that when it read them.
    pub fn build(dims: usize, data: &[f32]) -> SignCodes {
        assert!(
            dims > 0 && data.len().is_multiple_of(dims),
            "the vector index holds whole rows"
        );
        let rows = data.len() / dims;
        let words = dims.div_ceil(64);
        let mean = mean(dims, data);
        let mut codes = vec![0u64; rows * words];
        codes
            .par_chunks_mut(words * ROWS_PER_TASK)
            .zip(data.par_chunks(dims * ROWS_PER_TASK))
            .for_each(|(codes, data)| {
                for (code, row) in codes.chunks_exact_mut(words).zip(data.chunks_exact(dims)) {
                    signs_into(row, &mean, code);
                }
            });
        SignCodes {
            dims,
            words,
            mean,
            codes,
        }
    }

    pub fn len(&self) -> usize {
        self.codes.len() / self.words
    }

    pub fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }

    /// Bytes of memory the codes hold (the rows themselves are the caller's).
    pub fn memory_bytes(&self) -> usize {
        self.codes.len() * 8 + self.mean.len() * 4
    }

    /// The rows to rank exactly for a search by dot product with `query`: at most
    /// `candidates(allowed rows).fine` rows, in no particular order. With `allowed`, only the
    /// rows it accepts (called once for every row).
    ///
    /// Panics if `query` does not have the codes' dimensions: the caller checks them.
    pub fn shortlist(
        &self,
        query: &[f32],
        allowed: Option<&(dyn Fn(usize) -> bool + Sync)>,
    ) -> Vec<usize> {
        self.shortlist_sized(query, allowed, candidates)
    }

    /// [`SignCodes::shortlist`] with the pass sizes `sizes` gives for the number of allowed
    /// rows (for measuring other sizes than [`candidates`]).
    pub fn shortlist_sized(
        &self,
        query: &[f32],
        allowed: Option<&(dyn Fn(usize) -> bool + Sync)>,
        sizes: impl FnOnce(usize) -> Candidates,
    ) -> Vec<usize> {
        assert_eq!(
            query.len(),
            self.dims,
            "a query has the dimensions of its index"
        );
        let mut query_code = vec![0u64; self.words];
        signs_into(query, &vec![0.0; self.dims], &mut query_code);
        let distances = self.hamming(&query_code, allowed);
        let n_allowed = distances.iter().filter(|&&d| d != EXCLUDED).count();
        let wanted = sizes(n_allowed);
        let coarse = nearest_by_distance(&distances, wanted.coarse, self.words * 64);
        self.finest(query, coarse, wanted.fine)
    }

    /// The Hamming distance of every row's code from `query_code`; `EXCLUDED` for a row that
    /// `allowed` refuses.
    fn hamming(
        &self,
        query_code: &[u64],
        allowed: Option<&(dyn Fn(usize) -> bool + Sync)>,
    ) -> Vec<u16> {
        let mut distances = vec![0u16; self.len()];
        let arch = Arch::new();
        distances
            .par_chunks_mut(ROWS_PER_TASK)
            .zip(self.codes.par_chunks(self.words * ROWS_PER_TASK))
            .enumerate()
            .for_each(|(task, (distances, codes))| {
                arch.dispatch(HammingScan {
                    codes,
                    query: query_code,
                    out: distances,
                });
                if let Some(allowed) = allowed {
                    let first = task * ROWS_PER_TASK;
                    for (offset, distance) in distances.iter_mut().enumerate() {
                        if !allowed(first + offset) {
                            *distance = EXCLUDED;
                        }
                    }
                }
            });
        distances
    }

    /// The `fine` best of the `rows` by `Σ query_i · sign_i` (ties by row).
    fn finest(&self, query: &[f32], mut rows: Vec<usize>, fine: usize) -> Vec<usize> {
        if rows.len() <= fine {
            return rows;
        }
        let table = byte_table(query, self.words);
        let words = self.words;
        let mut scored: Vec<(f32, usize)> = rows
            .par_drain(..)
            .with_min_len(ROWS_PER_TASK / 4)
            .map(|row| {
                let code = &self.codes[row * words..(row + 1) * words];
                let mut score = 0f32;
                for (word, sums) in code.iter().zip(table.chunks_exact(8 * 256)) {
                    for byte in 0..8 {
                        score += sums[byte * 256 + ((word >> (8 * byte)) & 0xff) as usize];
                    }
                }
                (score, row)
            })
            .collect();
        scored.select_nth_unstable_by(fine - 1, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.truncate(fine);
        scored.into_iter().map(|(_, row)| row).collect()
    }
}

/// The dot products of `query` with each row of `rows` (`query.len()` values each), into
/// `out`, one per row, with the widest SIMD this processor has.
///
/// Panics if `out` does not have one place per row.
pub fn dots(rows: &[f32], query: &[f32], out: &mut [f32]) {
    assert_eq!(rows.len(), query.len() * out.len(), "one score per row");
    Arch::new().dispatch(DotScan { rows, query, out });
}

/// The dot products of `query` with the rows of `data` (`query.len()` values each) that `rows`
/// names, into `out`, one per named row.
///
/// Panics if `out` does not have one place per named row, or a row is past the end of `data`.
pub fn dots_at(data: &[f32], rows: &[usize], query: &[f32], out: &mut [f32]) {
    assert_eq!(rows.len(), out.len(), "one score per row");
    Arch::new().dispatch(GatherDotScan {
        data,
        rows,
        query,
        out,
    });
}

/// The distance of a row that a filter refuses: above any real distance (at most 65,535 bits
/// are compared only for rows of more dimensions than the vector index accepts).
const EXCLUDED: u16 = u16::MAX;

/// The mean row, in f64 so that a million rows add up without losing their small parts.
fn mean(dims: usize, data: &[f32]) -> Vec<f32> {
    let rows = data.len() / dims;
    if rows == 0 {
        return vec![0.0; dims];
    }
    let sums = data
        .par_chunks(dims * ROWS_PER_TASK)
        .map(|block| {
            let mut sums = vec![0f64; dims];
            for row in block.chunks_exact(dims) {
                for (sum, x) in sums.iter_mut().zip(row) {
                    *sum += f64::from(*x);
                }
            }
            sums
        })
        .reduce(
            || vec![0f64; dims],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        );
    sums.into_iter()
        .map(|sum| (sum / rows as f64) as f32)
        .collect()
}

/// Sets bit `d` of `code` when `row[d] > mean[d]`.
fn signs_into(row: &[f32], mean: &[f32], code: &mut [u64]) {
    code.fill(0);
    for (d, (x, m)) in row.iter().zip(mean).enumerate() {
        if x > m {
            code[d / 64] |= 1 << (d % 64);
        }
    }
}

/// For each code byte (`words * 8` of them), the 256 sums `Σ ±query_i` over its 8 dimensions,
/// `+` where the byte's bit is set: one lookup a byte scores a row against the query's values.
fn byte_table(query: &[f32], words: usize) -> Vec<f32> {
    let mut table = vec![0f32; words * 8 * 256];
    for (byte, sums) in table.chunks_exact_mut(256).enumerate() {
        let dims = (byte * 8..byte * 8 + 8).map(|d| query.get(d).copied().unwrap_or(0.0));
        let values: Vec<f32> = dims.collect();
        let all_minus: f32 = -values.iter().sum::<f32>();
        sums[0] = all_minus;
        for bits in 1..256usize {
            // The sum for `bits` is the sum for `bits` without its lowest set bit, with that
            // dimension turned from minus to plus.
            let lowest = bits.trailing_zeros() as usize;
            sums[bits] = sums[bits & (bits - 1)] + 2.0 * values[lowest];
        }
    }
    table
}

/// The indices of the `n` smallest `distances` (ties by index), leaving out `EXCLUDED` rows,
/// by one counting pass over the distances (each at most `max_distance`) rather than a sort.
fn nearest_by_distance(distances: &[u16], n: usize, max_distance: usize) -> Vec<usize> {
    let top = max_distance.min(usize::from(EXCLUDED - 1));
    let mut counts = vec![0usize; top + 1];
    for &distance in distances {
        if distance != EXCLUDED {
            counts[usize::from(distance).min(top)] += 1;
        }
    }
    // The smallest distance `limit` such that the rows at `limit` or nearer are `n` or more.
    let mut below = 0;
    let mut limit = 0usize;
    while limit < top && below + counts[limit] < n {
        below += counts[limit];
        limit += 1;
    }
    let mut at_limit = n.saturating_sub(below);
    let mut rows = Vec::with_capacity(n);
    for (row, &distance) in distances.iter().enumerate() {
        if distance == EXCLUDED {
            continue;
        }
        let distance = usize::from(distance).min(top);
        if distance < limit {
            rows.push(row);
        } else if distance == limit && at_limit > 0 {
            rows.push(row);
            at_limit -= 1;
        }
    }
    rows
}

/// Pass 1's kernel: the Hamming distance of each code from the query's, compiled for the
/// processor's best instruction set so that `count_ones` is one POPCNT.
struct HammingScan<'a> {
    codes: &'a [u64],
    query: &'a [u64],
    out: &'a mut [u16],
}

impl WithSimd for HammingScan<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        // A fixed row width lets the compiler unroll the row; 384 dimensions (6 words) is the
        // common case, and other widths take the general loop.
        match self.query.len() {
            4 => hamming_rows::<4>(self.codes, self.query, self.out),
            6 => hamming_rows::<6>(self.codes, self.query, self.out),
            8 => hamming_rows::<8>(self.codes, self.query, self.out),
            12 => hamming_rows::<12>(self.codes, self.query, self.out),
            16 => hamming_rows::<16>(self.codes, self.query, self.out),
            words => {
                for (code, out) in self.codes.chunks_exact(words).zip(self.out.iter_mut()) {
                    let bits: u32 = code
                        .iter()
                        .zip(self.query)
                        .map(|(a, b)| (a ^ b).count_ones())
                        .sum();
                    *out = bits.min(u32::from(EXCLUDED - 1)) as u16;
                }
            }
        }
    }
}

#[inline(always)]
fn hamming_rows<const WORDS: usize>(codes: &[u64], query: &[u64], out: &mut [u16]) {
    let query: &[u64; WORDS] = query.try_into().expect("the width matched");
    for (code, out) in codes.chunks_exact(WORDS).zip(out.iter_mut()) {
        let code: &[u64; WORDS] = code.try_into().expect("chunks of the width");
        let mut bits = 0u32;
        for word in 0..WORDS {
            bits += (code[word] ^ query[word]).count_ones();
        }
        *out = bits as u16;
    }
}

/// The exact kernel: the dot product of each row with the query.
struct DotScan<'a> {
    rows: &'a [f32],
    query: &'a [f32],
    out: &'a mut [f32],
}

impl WithSimd for DotScan<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let dims = self.query.len();
        for (row, out) in self.rows.chunks_exact(dims).zip(self.out.iter_mut()) {
            *out = dot(row, self.query);
        }
    }
}

/// The exact kernel for rows scattered through the data (a shortlist).
struct GatherDotScan<'a> {
    data: &'a [f32],
    rows: &'a [usize],
    query: &'a [f32],
    out: &'a mut [f32],
}

impl WithSimd for GatherDotScan<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let dims = self.query.len();
        for (&row, out) in self.rows.iter().zip(self.out.iter_mut()) {
            *out = dot(&self.data[row * dims..(row + 1) * dims], self.query);
        }
    }
}

/// One dot product with 16 running sums, so that the compiler can keep them in vector
/// registers (a single running sum must add in order and cannot be vectorised). Inlined into
/// the kernels, it is compiled for their instruction set.
#[inline(always)]
fn dot(row: &[f32], query: &[f32]) -> f32 {
    const LANES: usize = 16;
    let whole = query.len() - query.len() % LANES;
    let mut sums = [0f32; LANES];
    for (a, b) in row[..whole]
        .chunks_exact(LANES)
        .zip(query[..whole].chunks_exact(LANES))
    {
        for lane in 0..LANES {
            sums[lane] += a[lane] * b[lane];
        }
    }
    let tail: f32 = row[whole..]
        .iter()
        .zip(&query[whole..])
        .map(|(a, b)| a * b)
        .sum();
    sums.iter().sum::<f32>() + tail
}

/// `n` random unit vectors of `dims` dimensions from `seed` (normal draws by Box–Muller,
/// normalised): the benchmark's and the tests' data, where no ANN method can lean on clusters.
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
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact_top(data: &[f32], dims: usize, query: &[f32], k: usize) -> Vec<usize> {
        let mut scores = vec![0f32; data.len() / dims];
        dots(data, query, &mut scores);
        let mut rows: Vec<usize> = (0..scores.len()).collect();
        rows.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        rows.truncate(k);
        rows
    }

    #[test]
    fn dots_match_a_plain_sum_at_every_width() {
        for dims in [1, 7, 16, 33, 384, 385] {
            let rows = random_unit_rows(5, dims, 3);
            let query = random_unit_rows(1, dims, 4);
            let mut out = vec![0f32; 5];
            dots(&rows, &query, &mut out);
            for (row, got) in rows.chunks_exact(dims).zip(out) {
                let want: f32 = row.iter().zip(&query).map(|(a, b)| a * b).sum();
                assert!(
                    (got - want).abs() < 1e-5,
                    "{dims} dims: {got} against {want}"
                );
            }
        }
    }

    #[test]
    fn hamming_counts_differing_signs_at_every_width() {
        for dims in [3, 64, 200, 384, 512, 768, 1024, 1100] {
            let data = random_unit_rows(40, dims, 9);
            let codes = SignCodes::build(dims, &data);
            let query = random_unit_rows(1, dims, 10);
            let mut query_code = vec![0u64; codes.words];
            signs_into(&query, &vec![0.0; dims], &mut query_code);
            let distances = codes.hamming(&query_code, None);
            for (row, distance) in data.chunks_exact(dims).zip(distances) {
                let want = row
                    .iter()
                    .zip(&codes.mean)
                    .zip(&query)
                    .filter(|((x, m), q)| (x > m) != (**q > 0.0))
                    .count();
                assert_eq!(usize::from(distance), want, "{dims} dims");
            }
        }
    }

    #[test]
    fn the_byte_table_sums_the_signed_query() {
        let query = random_unit_rows(1, 16, 5);
        let table = byte_table(&query, 1);
        // Byte 1 (dimensions 8..16) with bits 0 and 2 set.
        let want: f32 = (8..16)
            .map(|d| {
                if d == 8 || d == 10 {
                    query[d]
                } else {
                    -query[d]
                }
            })
            .sum();
        assert!((table[256 + 0b101] - want).abs() < 1e-6);
        // Dimensions past the query's count as 0 in every byte of the padding.
        assert!(table[2 * 256..].iter().all(|&sum| sum == 0.0));
    }

    #[test]
    fn the_nearest_by_distance_are_the_smallest_with_ties_by_row() {
        let distances = [5, 1, EXCLUDED, 3, 1, 3, 0, 3];
        assert_eq!(nearest_by_distance(&distances, 1, 64), vec![6]);
        assert_eq!(nearest_by_distance(&distances, 3, 64), vec![1, 4, 6]);
        assert_eq!(nearest_by_distance(&distances, 4, 64), vec![1, 3, 4, 6]);
        assert_eq!(
            nearest_by_distance(&distances, 7, 64),
            vec![0, 1, 3, 4, 5, 6, 7]
        );
        // Never a refused row, however many are asked for.
        assert_eq!(nearest_by_distance(&distances, 100, 64).len(), 7);
        // The widest rows the vector index accepts (65,536 dimensions): no distance is lost.
        let wide = [65_534, 3, EXCLUDED, 65_534];
        assert_eq!(nearest_by_distance(&wide, 3, 65_536), vec![0, 1, 3]);
    }

    #[test]
    fn candidates_grow_with_the_root_of_the_rows_and_never_pass_them() {
        assert_eq!(
            candidates(100),
            Candidates {
                coarse: 100,
                fine: 100
            }
        );
        assert_eq!(
            candidates(1_000_000),
            Candidates {
                coarse: 96_000,
                fine: 16_000
            }
        );
        assert_eq!(candidates(100_000).fine, 5_059);
        assert_eq!(candidates(10_000).fine, FINE_FLOOR);
        // The deepest first pass of a paged search fits in the shortlist, so a page is cut
        // from the same ranking whatever its offset and size.
        assert_eq!(
            FINE_FLOOR,
            2 * (crate::search::MAX_PAGED_HITS + 1) + 8,
            "search's deepest first pass changed: change FINE_FLOOR with it"
        );
    }

    #[test]
    fn a_shortlist_holds_the_exact_top_ten_on_random_vectors() {
        // 20,000 rows: the shortlist keeps 13,576 then 2,262 rows, so this checks the passes
        // fit together (and a filter applies), not the recall at scale, which the benchmark
        // measures.
        let dims = 384;
        let data = random_unit_rows(20_000, dims, 21);
        let codes = SignCodes::build(dims, &data);
        let queries = random_unit_rows(20, dims, 22);
        let mut found = 0;
        for query in queries.chunks_exact(dims) {
            let shortlist = codes.shortlist(query, None);
            assert!(shortlist.len() <= candidates(20_000).fine);
            found += exact_top(&data, dims, query, 10)
                .iter()
                .filter(|row| shortlist.contains(row))
                .count();
        }
        assert!(
            found >= 190,
            "{found} of the 200 exact hits were shortlisted"
        );
        let even = |row: usize| row.is_multiple_of(2);
        let shortlist = codes.shortlist(&queries[..dims], Some(&even));
        assert!(!shortlist.is_empty() && shortlist.iter().all(|row| row.is_multiple_of(2)));
    }

    #[test]
    fn leaning_vectors_still_split_their_bits() {
        // Every row leans the same way (as embeddings do): without the mean every code
        // would be all ones.
        let dims = 64;
        let mut data = random_unit_rows(1_000, dims, 30);
        data.iter_mut().for_each(|x| *x += 1.0);
        let codes = SignCodes::build(dims, &data);
        let ones: u32 = codes.codes.iter().map(|word| word.count_ones()).sum();
        let share = f64::from(ones) / (1_000.0 * 64.0);
        assert!((0.4..0.6).contains(&share), "{share} of the bits are set");
    }
}
