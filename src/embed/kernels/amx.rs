//! Matrix products on Intel AMX tiles: bfloat16 inputs, float32 sums: a layer's weight
//! products, and a text's attention.
//!
//! What needs `unsafe`, and why it holds:
//! - Asking Linux for the tile registers (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), once per process,
//!   a plain system call with two integers.
//! - The AMX instructions themselves, through `asm!` (Rust has no stable AMX intrinsics). They
//!   are run only after the CPU (CPUID) and the kernel (the call above) both said yes. Every
//!   tile load and store reads or writes 16 rows of 64 bytes from a base and a row stride; the
//!   buffers are sized and padded before the first instruction so that every such row lies
//!   inside them: `multiply` asserts the shapes, and each load's operand is a slice that ends
//!   where its tile's last row ends, so indexing checks every read, in release builds too.
//! - The tile registers hold their values from one `asm!` block to the next (the compiler never
//!   allocates them: it is not given the AMX target features).
//!
//! The layout:
//! - The weights `[k, n]` are converted once, at load, to bfloat16 in AMX's pair layout:
//!   panels of 16 columns, each row of a panel two consecutive `k` for the 16 columns
//!   (`[k/2][16][2]`), `k` padded with zeros to a multiple of 32 and `n` to a multiple of 32.
//! - The activations `[m, k]` are rounded to bfloat16 per product, `m` padded to 32 rows.
//! - Attention, per text and head: the query's rows are the left operand of the scores, the
//!   key packed as the right one (`kᵀ`); the probabilities, rounded, are the left operand of the
//!   context, the value packed as the right one. Each is rounded once per text, in one pass.
//! - Each 32 × 32 block of the output is four 16 × 16 float32 tiles, accumulated over `k` in
//!   steps of 32 (two tiles of the activations, two of the weights, four tile products).
//!
//! Rounding each input to bfloat16 (8 bits of mantissa) and summing in float32 leaves the
//! model's vectors at a cosine above 0.999 to the float32 pass (the tests below and
//! docs/BENCHMARKS.md measure it), and retrieval within the goal of 0.005 nDCG.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

use super::release_if_large;

/// Rows of a tile, and rows (and columns) of a product's block per tile.
const TILE: usize = 16;
/// bfloat16 values in a tile row (64 bytes): the `k` step of one tile product.
const TILE_K: usize = 32;
/// Output rows and columns computed together: 2 × 2 tiles.
const BLOCK: usize = 2 * TILE;

/// Whether this CPU has AMX tiles with bfloat16 products and the kernel lets this process use
/// them. Asked once per process.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| cpu_has_amx_bf16() && avx512_for_rounding() && kernel_grants_tiles())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn cpu_has_amx_bf16() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID.(EAX=7, ECX=0):EDX bit 22 is AMX-BF16, bit 24 AMX-TILE.
    if __cpuid(0).eax < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    edx & (1 << 22) != 0 && edx & (1 << 24) != 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn cpu_has_amx_bf16() -> bool {
    false
}

/// The rounding of the activations is compiled for AVX-512, which every AMX CPU has; asked
/// anyway, so that `round_rows` can rely on it.
#[cfg(target_arch = "x86_64")]
fn avx512_for_rounding() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_for_rounding() -> bool {
    false
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn kernel_grants_tiles() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a system call with two integer arguments; it changes only which register state
    // the kernel saves for this process, and fails (non-zero) where tiles are not supported.
    let granted = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    granted == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn kernel_grants_tiles() -> bool {
    false
}

/// A float32 rounded to bfloat16, to nearest, ties to even (NaN stays a quiet NaN).
#[inline(always)]
pub(crate) fn bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

/// A weight matrix `[k, n]` in bfloat16, laid out for the tile products (see the module).
pub(crate) struct PackedWeights {
    k: usize,
    n: usize,
    k_pad: usize,
    n_pad: usize,
    /// `n_pad / 16` panels of `k_pad / 2` rows of 16 column pairs.
    panels: Vec<u16>,
}

impl PackedWeights {
    /// Packs `weights`, `[k, n]` row-major.
    pub(crate) fn pack(weights: &[f32], k: usize, n: usize) -> PackedWeights {
        assert_eq!(weights.len(), k * n, "weights of {k} × {n}");
        let k_pad = k.next_multiple_of(TILE_K);
        let n_pad = n.next_multiple_of(BLOCK);
        let mut panels = vec![0u16; (n_pad / TILE) * (k_pad / 2) * TILE * 2];
        pack_into(&mut panels, (k, n), (k_pad, n_pad), false, |row, column| {
            bf16(weights[row * n + column])
        });
        PackedWeights {
            k,
            n,
            k_pad,
            n_pad,
            panels,
        }
    }

    /// Rows of the weights: the width of the activations they multiply.
    pub(crate) fn inputs(&self) -> usize {
        self.k
    }
}

/// `activations` (`[m, k]` row-major float32) times `weights`: `[m, n]` row-major float32,
/// written into `out`, whose earlier values are dropped and whose memory is reused.
///
/// The product runs 32 rows at a time: each block's activations are rounded just before its
/// tiles read them, and `finish(rows, first)` is called on the block's output rows (`first` is
/// the first one's index) as soon as they are written, while they are still in the core's
/// caches: a bias, an activation or a layer norm applied there costs no pass over memory.
///
/// # Panics
/// When AMX is not [`available`], or `activations` is not `m` rows of the weights' `k`.
pub(crate) fn product_into(
    activations: &[f32],
    m: usize,
    weights: &PackedWeights,
    out: &mut Vec<f32>,
    mut finish: impl FnMut(&mut [f32], usize),
) {
    assert!(available(), "AMX tiles are not available on this CPU");
    let (k, n, k_pad, n_pad) = (weights.k, weights.n, weights.k_pad, weights.n_pad);
    assert_eq!(
        Some(activations.len()),
        m.checked_mul(k),
        "activations of {m} × {k}"
    );
    out.clear();
    if k == 0 {
        // Every sum is empty; the rows are finished in blocks all the same.
        for first in (0..m).step_by(BLOCK) {
            out.resize((first + BLOCK).min(m) * n, 0.0);
            finish(&mut out[first * n..], first);
        }
        return;
    }
    // What every tile row reads or writes lies inside these buffers.
    assert!(k_pad.is_multiple_of(TILE_K) && n_pad.is_multiple_of(BLOCK));
    assert_eq!(
        weights.panels.len(),
        (n_pad / TILE) * (k_pad / 2) * TILE * 2
    );
    PRODUCT.with_borrow_mut(|buffers| {
        let lhs = scratch(&mut buffers.lhs, BLOCK * k_pad);
        // Where a block is written when its rows are wider than the answer's.
        let padded = scratch(
            &mut buffers.padded,
            if n_pad == n { 0 } else { BLOCK * n_pad },
        );
        out.reserve(m.next_multiple_of(BLOCK) * n);
        for first in (0..m).step_by(BLOCK) {
            let last = (first + BLOCK).min(m);
            // In the last block the rows past `m` may hold an earlier block's values: an
            // output row depends on its own input row alone, so they only make output rows
            // that are never read. The columns past `k` are zeroed, as they meet every row.
            round_rows(
                &activations[first * k..last * k],
                k,
                &mut lhs[..(last - first) * k_pad],
                k_pad,
            );
            if n_pad == n {
                // Straight into the answer: the tiles write all 32 rows of the block after the
                // `first` rows written so far, of which the first `last - first` are kept.
                let spare = &mut out.spare_capacity_mut()[..BLOCK * n];
                // SAFETY: `available()` held (above); `multiply` checks every size.
                unsafe { tiles::multiply(lhs, &weights.panels, spare, BLOCK, k_pad, n_pad) };
                // SAFETY: `multiply` wrote all of `spare`, a superset of the rows kept.
                unsafe { out.set_len(last * n) };
            } else {
                // SAFETY: `available()` held (above); `multiply` checks every size.
                unsafe {
                    tiles::multiply(lhs, &weights.panels, uninit(padded), BLOCK, k_pad, n_pad);
                }
                for row in padded.chunks_exact(n_pad).take(last - first) {
                    out.extend_from_slice(&row[..n]);
                }
            }
            finish(&mut out[first * n..], first);
        }
        release_if_large(&mut buffers.lhs);
        release_if_large(&mut buffers.padded);
    });
}

thread_local! {
    /// This thread's buffers for `product_into`, kept to be written over.
    static PRODUCT: std::cell::RefCell<ProductBuffers> =
        const { std::cell::RefCell::new(ProductBuffers { lhs: Vec::new(), padded: Vec::new() }) };
    /// This thread's buffers for `attention`, kept to be written over.
    static ATTENTION: std::cell::RefCell<AttentionBuffers> =
        const { std::cell::RefCell::new(AttentionBuffers::new()) };
}

/// A block's rounded activations, and its output where the weights' columns were padded.
struct ProductBuffers {
    lhs: Vec<u16>,
    padded: Vec<f32>,
}

/// The rounded and packed operands of one head's two products, and their float32 outputs.
struct AttentionBuffers {
    rounded: Vec<u16>,
    lhs: Vec<u16>,
    panels: Vec<u16>,
    scores: Vec<f32>,
    out: Vec<f32>,
}

impl AttentionBuffers {
    /// Frees what one long text grew past [`super::KEPT_BYTES`].
    fn trim(&mut self) {
        release_if_large(&mut self.rounded);
        release_if_large(&mut self.lhs);
        release_if_large(&mut self.panels);
        release_if_large(&mut self.scores);
        release_if_large(&mut self.out);
    }

    const fn new() -> AttentionBuffers {
        AttentionBuffers {
            rounded: Vec::new(),
            lhs: Vec::new(),
            panels: Vec::new(),
            scores: Vec::new(),
            out: Vec::new(),
        }
    }
}

/// `values` as memory the tiles write: they store float32 values only, so what they leave is
/// as initialised as before.
fn uninit(values: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout; the only writer, `tiles::multiply`, writes
    // float32 values, never uninitialised memory, so `values` stays initialised.
    unsafe { &mut *(std::ptr::from_mut(values) as *mut [MaybeUninit<f32>]) }
}

/// Grows `buffer` to at least `len` values and gives back its first `len`, which may hold an
/// earlier use's values.
fn scratch<T: Copy + Default>(buffer: &mut Vec<T>, len: usize) -> &mut [T] {
    if buffer.len() < len {
        buffer.resize(len, T::default());
    }
    &mut buffer[..len]
}

/// Packs `k × n` bfloat16 values, `value(row, column)`, into `panels` in the tiles' pair
/// layout (see the module), padded with zeros to `k_pad` rows and `n_pad` columns. `columns_outer` picks
/// the order the values are read in: whichever reads the source's memory in order.
#[inline(always)]
fn pack_into(
    panels: &mut [u16],
    (k, n): (usize, usize),
    (k_pad, n_pad): (usize, usize),
    columns_outer: bool,
    value: impl Fn(usize, usize) -> u16,
) {
    let panel_len = (k_pad / 2) * TILE * 2;
    assert!(k <= k_pad && n <= n_pad && k_pad.is_multiple_of(2) && n_pad.is_multiple_of(TILE));
    assert_eq!(panels.len(), (n_pad / TILE) * panel_len);
    panels.fill(0);
    let at = |row: usize, column: usize| {
        (column / TILE) * panel_len + (row / 2) * TILE * 2 + (column % TILE) * 2 + row % 2
    };
    if columns_outer {
        for column in 0..n {
            for row in 0..k {
                panels[at(row, column)] = value(row, column);
            }
        }
    } else {
        for row in 0..k {
            for column in 0..n {
                panels[at(row, column)] = value(row, column);
            }
        }
    }
}

/// One text's self-attention on tiles, head by head: the scores `q · kᵀ` (bfloat16 inputs,
/// float32 sums), made probabilities by `softmax`, then the context `scores · v` the same way.
///
/// - `qkv` is the text's `len` rows of `[3, heads, width]`: query (already scaled), key and
///   value, each head's `width` values side by side.
/// - `softmax(scores, len, stride)` turns each of `scores`' rows (`len` scores, then padding
///   up to `stride`) into probabilities, in place; it must leave the padding alone.
/// - `context` receives the text's `len` rows of `[heads, width]`.
///
/// # Panics
/// When AMX is not [`available`], or the slices are not of those shapes.
pub(crate) fn attention(
    qkv: &[f32],
    len: usize,
    heads: usize,
    width: usize,
    softmax: impl Fn(&mut [f32], usize, usize),
    context: &mut [f32],
) {
    assert!(available(), "AMX tiles are not available on this CPU");
    let hidden = heads.checked_mul(width).expect("heads × width overflows");
    assert_eq!(
        Some(qkv.len()),
        len.checked_mul(3 * hidden),
        "{len} rows of query, key and value"
    );
    assert_eq!(context.len(), len * hidden, "{len} rows of context");
    if len == 0 || hidden == 0 {
        return;
    }
    // Scores: `[len, width] × [width, len]`; context: `[len, len] × [len, width]`.
    let rows = len.next_multiple_of(BLOCK);
    // Every buffer below is at most `rows × rows` or `rows × 3 × hidden` values.
    assert!(
        rows.checked_mul(rows.max(3 * hidden)).is_some(),
        "a text of {len} tokens is too long to attend to"
    );
    let width_k = width.next_multiple_of(TILE_K);
    let width_n = width.next_multiple_of(BLOCK);
    let at = |token: usize, part: usize, head: usize| (token * 3 + part) * hidden + head * width;
    ATTENTION.with_borrow_mut(|buffers| {
        // Every query, key and value rounded once, in one pass; the heads' operands are then
        // copied from these.
        let rounded = scratch(&mut buffers.rounded, len * 3 * hidden);
        round_rows(qkv, 3 * hidden, rounded, 3 * hidden);
        let rounded = &*rounded;
        for head in 0..heads {
            // The query's rows; the rows past `len` only make score rows never read.
            let lhs = scratch(&mut buffers.lhs, rows * width_k);
            for (token, to) in lhs.chunks_exact_mut(width_k).take(len).enumerate() {
                let (values, pad) = to.split_at_mut(width);
                values.copy_from_slice(&rounded[at(token, 0, head)..][..width]);
                pad.fill(0);
            }
            // kᵀ: row `d`, column `token` is the key's value `d` of that token.
            let panels = scratch(
                &mut buffers.panels,
                (rows / TILE) * (width_k / 2) * TILE * 2,
            );
            pack_into(panels, (width, len), (width_k, rows), true, |d, token| {
                rounded[at(token, 1, head) + d]
            });
            let scores = scratch(&mut buffers.scores, rows * rows);
            // SAFETY: `available()` held (above); `multiply` checks every size.
            unsafe { tiles::multiply(lhs, panels, uninit(scores), rows, width_k, rows) };
            softmax(&mut scores[..len * rows], len, rows);

            // The probabilities, rounded; the columns past `len` are zero, as they meet every
            // row (the padded scores are never read).
            let lhs = scratch(&mut buffers.lhs, rows * rows);
            round_rows_strided(
                &scores[..len * rows],
                len,
                rows,
                &mut lhs[..len * rows],
                rows,
            );
            let panels = scratch(
                &mut buffers.panels,
                (width_n / TILE) * (rows / 2) * TILE * 2,
            );
            pack_into(panels, (len, width), (rows, width_n), false, |token, d| {
                rounded[at(token, 2, head) + d]
            });
            let out = scratch(&mut buffers.out, rows * width_n);
            // SAFETY: `available()` held (above); `multiply` checks every size.
            unsafe { tiles::multiply(lhs, panels, uninit(out), rows, rows, width_n) };
            for (token, from) in out.chunks_exact(width_n).take(len).enumerate() {
                context[token * hidden + head * width..][..width].copy_from_slice(&from[..width]);
            }
        }
        buffers.trim();
    });
}

/// `from` (rows of `k` float32) rounded into `to` (rows of `k_pad`), the columns past `k` zero.
fn round_rows(from: &[f32], k: usize, to: &mut [u16], k_pad: usize) {
    debug_assert!(available());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the callers checked `available()`, which asked for AVX-512 F, BW and VL.
    unsafe {
        round_rows_avx512(from, k, to, k_pad);
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!(
        "AMX is x86-64 only ({k}, {}, {}, {k_pad})",
        from.len(),
        to.len()
    );
}

/// `from` (rows of `stride` float32, of which the first `k` are values) rounded into `to`
/// (rows of `k_pad`), the columns past `k` zero.
fn round_rows_strided(from: &[f32], k: usize, stride: usize, to: &mut [u16], k_pad: usize) {
    debug_assert!(available());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the callers checked `available()`, which asked for AVX-512 F, BW and VL.
    unsafe {
        round_rows_strided_avx512(from, k, stride, to, k_pad);
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!(
        "AMX is x86-64 only ({k}, {stride}, {}, {}, {k_pad})",
        from.len(),
        to.len()
    );
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn round_rows_strided_avx512(from: &[f32], k: usize, stride: usize, to: &mut [u16], k_pad: usize) {
    for (to, from) in to.chunks_exact_mut(k_pad).zip(from.chunks_exact(stride)) {
        let (values, pad) = to.split_at_mut(k);
        for (to, &from) in values.iter_mut().zip(&from[..k]) {
            *to = bf16(from);
        }
        pad.fill(0);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn round_rows_avx512(from: &[f32], k: usize, to: &mut [u16], k_pad: usize) {
    for (to, from) in to.chunks_exact_mut(k_pad).zip(from.chunks_exact(k)) {
        let (values, pad) = to.split_at_mut(k);
        for (to, &from) in values.iter_mut().zip(from) {
            *to = bf16(from);
        }
        pad.fill(0);
    }
}

/// The tile instructions. Callers have checked `available()` and the buffer sizes.
#[cfg(target_arch = "x86_64")]
mod tiles {
    use std::arch::asm;

    use std::mem::MaybeUninit;

    use super::{BLOCK, TILE, TILE_K};

    /// The tile configuration: palette 1, tiles 0 to 7 each 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    const CONFIG: Config = {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        let mut tile = 0;
        while tile < 8 {
            bytes[16 + 2 * tile] = 64;
            bytes[48 + tile] = TILE as u8;
            tile += 1;
        }
        Config(bytes)
    };

    /// `out[m_pad, n_pad] = lhs[m_pad, k_pad] × panels`, all padded as `product` pads them.
    ///
    /// Every value of `out` is written, with float32 values.
    ///
    /// # Safety
    /// `available()` must have held: the CPU has the instructions and the kernel granted the
    /// tiles. (Every size is checked here.)
    pub(super) unsafe fn multiply(
        lhs: &[u16],
        panels: &[u16],
        out: &mut [MaybeUninit<f32>],
        m_pad: usize,
        k_pad: usize,
        n_pad: usize,
    ) {
        // Whole 32 × 32 blocks only: the stores below write rows and columns in 32s.
        assert!(m_pad.is_multiple_of(BLOCK) && n_pad.is_multiple_of(BLOCK));
        assert!(k_pad.is_multiple_of(TILE_K));
        assert_eq!(Some(lhs.len()), m_pad.checked_mul(k_pad));
        assert_eq!(
            Some(panels.len()),
            (n_pad / TILE)
                .checked_mul(k_pad)
                .and_then(|len| len.checked_mul(TILE))
        );
        assert_eq!(Some(out.len()), m_pad.checked_mul(n_pad));
        let out = out.as_mut_ptr().cast::<f32>();
        let lhs_stride = k_pad * 2;
        let panel_stride = TILE * 2 * 2;
        let out_stride = n_pad * 4;
        let panel_len = (k_pad / 2) * TILE * 2;
        // SAFETY: `available()` was checked by the caller (the CPU has the instructions and
        // the kernel granted the tile state). The configuration is 64 aligned bytes.
        unsafe {
            asm!("ldtilecfg [{config}]", config = in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
        }
        for row in (0..m_pad).step_by(BLOCK) {
            for column in (0..n_pad).step_by(BLOCK) {
                // Tiles 0–3 hold the block's four 16 × 16 sums.
                // SAFETY: tile instructions only, on tiles configured above.
                unsafe {
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nostack, nomem)
                    );
                }
                let left = &panels[(column / TILE) * panel_len..][..panel_len];
                let right = &panels[(column / TILE + 1) * panel_len..][..panel_len];
                for step in (0..k_pad).step_by(TILE_K) {
                    // Each load reads 16 rows of 64 bytes (32 values): `top` and `bottom` rows
                    // `row..row + 32` of `lhs` (row stride `k_pad`) from column `step`; `left`
                    // and `right` 16 consecutive rows of their panels. Each slice ends where
                    // its tile's last row ends, so indexing checks every read, in release
                    // builds too.
                    let tile_span = (TILE - 1) * k_pad + TILE_K;
                    let top = &lhs[row * k_pad + step..][..tile_span];
                    let bottom = &lhs[(row + TILE) * k_pad + step..][..tile_span];
                    let left = &left[(step / 2) * TILE * 2..][..TILE * TILE * 2];
                    let right = &right[(step / 2) * TILE * 2..][..TILE * TILE * 2];
                    // SAFETY: every row read lies inside the slices (above).
                    unsafe {
                        asm!(
                            "tileloadd tmm4, [{top} + {lhs_stride}*1]",
                            "tileloadd tmm5, [{bottom} + {lhs_stride}*1]",
                            "tileloadd tmm6, [{left} + {panel_stride}*1]",
                            "tileloadd tmm7, [{right} + {panel_stride}*1]",
                            "tdpbf16ps tmm0, tmm4, tmm6",
                            "tdpbf16ps tmm1, tmm4, tmm7",
                            "tdpbf16ps tmm2, tmm5, tmm6",
                            "tdpbf16ps tmm3, tmm5, tmm7",
                            top = in(reg) top.as_ptr(),
                            bottom = in(reg) bottom.as_ptr(),
                            left = in(reg) left.as_ptr(),
                            right = in(reg) right.as_ptr(),
                            lhs_stride = in(reg) lhs_stride,
                            panel_stride = in(reg) panel_stride,
                            options(nostack, readonly)
                        );
                    }
                }
                // SAFETY: rows `row..row + 32`, columns `column..column + 32` of `out` (row
                // stride `n_pad`), inside its `m_pad × n_pad` values (checked above) because
                // `m_pad` and `n_pad` are multiples of 32.
                unsafe {
                    let top = out.add(row * n_pad + column);
                    let bottom = top.add(TILE * n_pad);
                    asm!(
                        "tilestored [{top} + {stride}*1], tmm0",
                        "tilestored [{top16} + {stride}*1], tmm1",
                        "tilestored [{bottom} + {stride}*1], tmm2",
                        "tilestored [{bottom16} + {stride}*1], tmm3",
                        top = in(reg) top,
                        top16 = in(reg) top.add(TILE),
                        bottom = in(reg) bottom,
                        bottom16 = in(reg) bottom.add(TILE),
                        stride = in(reg) out_stride,
                        options(nostack)
                    );
                }
            }
        }
        // SAFETY: returns the tile state to its initial one; no operands.
        unsafe {
            asm!("tilerelease", options(nostack, nomem));
        }
    }
}

/// AMX is x86-64 only: `available()` is false elsewhere, so nothing calls this.
#[cfg(not(target_arch = "x86_64"))]
mod tiles {
    use std::mem::MaybeUninit;

    pub(super) unsafe fn multiply(
        _: &[u16],
        _: &[u16],
        _: &mut [MaybeUninit<f32>],
        _: usize,
        _: usize,
        _: usize,
    ) {
        unreachable!("AMX is x86-64 only")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::kernels::{KEPT_BYTES, values};

    fn reference(a: &[f32], m: usize, w: &[f32], k: usize, n: usize, round: bool) -> Vec<f32> {
        let r = |x: f32| {
            if round {
                f32::from_bits(u32::from(bf16(x)) << 16)
            } else {
                x
            }
        };
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| r(a[i * k + p]) * r(w[p * n + j])).sum();
            }
        }
        out
    }

    fn product(activations: &[f32], m: usize, weights: &PackedWeights) -> Vec<f32> {
        // A buffer that held something else before: none of it may show through.
        let mut out = vec![f32::NAN; 7];
        // Every row is finished once, in order, in blocks of at most 32 whole rows.
        let mut finished = 0;
        product_into(activations, m, weights, &mut out, |rows, first| {
            assert_eq!(first, finished, "blocks out of order");
            assert!(rows.len() % weights.n.max(1) == 0 && rows.len() <= BLOCK * weights.n);
            finished += rows.len() / weights.n.max(1);
        });
        assert!(
            weights.n == 0 || finished == m,
            "{finished} of {m} rows finished"
        );
        out
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16(1.0), 0x3f80);
        assert_eq!(bf16(-2.0), 0xc000);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even (1.0).
        assert_eq!(bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // Just above halfway rounds up.
        assert_eq!(bf16(1.0 + 1.0 / 256.0 + 1.0 / 65536.0), 0x3f81);
        assert_eq!(bf16(f32::INFINITY), 0x7f80);
        assert!(f32::from_bits(u32::from(bf16(f32::NAN)) << 16).is_nan());
    }

    #[test]
    fn packing_puts_each_weight_where_the_tiles_read_it() {
        let (k, n) = (3, 18);
        let w: Vec<f32> = (0..k * n).map(|i| i as f32).collect();
        let packed = PackedWeights::pack(&w, k, n);
        assert_eq!((packed.k_pad, packed.n_pad), (32, 32));
        let panel_len = 16 * 16 * 2;
        let at = |row: usize, column: usize| {
            (column / 16) * panel_len + (row / 2) * 32 + (column % 16) * 2 + row % 2
        };
        for row in 0..k {
            for column in 0..n {
                assert_eq!(packed.panels[at(row, column)], bf16(w[row * n + column]));
            }
        }
        // Padding is zero.
        assert_eq!(packed.panels[at(3, 0)], 0);
        assert_eq!(packed.panels[at(0, 20)], 0);
    }

    /// What /proc/cpuinfo says of AMX (tiles and bfloat16 products), read independently of
    /// CPUID.
    fn cpuinfo_has_amx_bf16() -> bool {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        info.lines()
            .find(|line| line.starts_with("flags"))
            .is_some_and(|flags| {
                let flags: Vec<&str> = flags.split_whitespace().collect();
                flags.contains(&"amx_tile") && flags.contains(&"amx_bf16")
            })
    }

    #[test]
    fn amx_is_used_exactly_where_the_cpu_has_it() {
        // On Linux the kernel lists AMX in /proc/cpuinfo only when it supports its state, so
        // the two must agree: a CPU with AMX that `available` refuses is a bug, not a skip.
        if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            assert_eq!(available(), cpuinfo_has_amx_bf16());
        } else {
            assert!(!available());
        }
    }

    /// A plain softmax over each row's first `len` scores.
    fn softmax_rows(scores: &mut [f32], len: usize, stride: usize) {
        for row in scores.chunks_mut(stride) {
            let row = &mut row[..len];
            let top = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let total: f32 = row
                .iter_mut()
                .map(|x| {
                    *x = (*x - top).exp();
                    *x
                })
                .sum();
            row.iter_mut().for_each(|x| *x /= total);
        }
    }

    /// The tile attention equals attention computed plainly from the same rounded inputs (the
    /// query, key and value, and the probabilities), for lengths and head widths that need
    /// every kind of padding; every context value is written. Where the CPU has no AMX it
    /// must refuse.
    #[test]
    fn the_tile_attention_is_attention_of_the_rounded_inputs() {
        let r = |x: f32| f32::from_bits(u32::from(bf16(x)) << 16);
        if !available() {
            let refused = std::panic::catch_unwind(|| {
                attention(&values(96, 1), 1, 1, 32, softmax_rows, &mut [0.0; 32]);
            });
            assert!(refused.is_err(), "tile attention ran without AMX");
            return;
        }
        for (len, heads, width) in [
            (1, 1, 32),
            (17, 3, 32),
            (45, 2, 64),
            (200, 2, 24),
            (33, 1, 40),
        ] {
            let hidden = heads * width;
            let qkv = values(len * 3 * hidden, (len * 13 + width) as u64);
            // NaN in every value: one that is left unwritten shows.
            let mut got = vec![f32::NAN; len * hidden];
            attention(&qkv, len, heads, width, softmax_rows, &mut got);
            let at = |token: usize, part: usize, head: usize, d: usize| {
                qkv[(token * 3 + part) * hidden + head * width + d]
            };
            for head in 0..heads {
                let mut scores = vec![0f32; len * len];
                for i in 0..len {
                    for j in 0..len {
                        scores[i * len + j] = (0..width)
                            .map(|d| r(at(i, 0, head, d)) * r(at(j, 1, head, d)))
                            .sum();
                    }
                }
                softmax_rows(&mut scores, len, len);
                for i in 0..len {
                    for d in 0..width {
                        let want: f32 = (0..len)
                            .map(|j| r(scores[i * len + j]) * r(at(j, 2, head, d)))
                            .sum();
                        let got = got[i * hidden + head * width + d];
                        assert!(
                            (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                            "len {len}, head {head}/{heads}, width {width}: row {i}, value {d}: tiles {got}, reference {want}"
                        );
                    }
                }
            }
        }
        // No heads, no width or no tokens: nothing to attend to, and nothing written.
        attention(&[], 5, 0, 64, softmax_rows, &mut []);
        attention(&[], 5, 2, 0, softmax_rows, &mut []);
        attention(&[], 0, 2, 32, softmax_rows, &mut []);

        // A short text's buffers are kept for the next; one long enough that its scores pass
        // `KEPT_BYTES` leaves none behind.
        let kept = |len: usize| {
            let qkv = values(len * 3 * 32, 5);
            let mut context = vec![0.0; len * 32];
            attention(&qkv, len, 1, 32, softmax_rows, &mut context);
            assert!(context.iter().all(|value| value.is_finite()));
            ATTENTION.with_borrow(|buffers| buffers.scores.capacity())
        };
        assert!(kept(100) >= 100 * 100);
        let long = (KEPT_BYTES / 4).isqrt() + 1;
        assert_eq!(
            kept(long),
            0,
            "a text of {long} tokens left its scores behind"
        );
    }

    /// The tile product equals a plain product of the rounded inputs (to float32 summation
    /// order), for shapes that need every kind of padding, and no rows give no output. Run
    /// where the CPU has AMX (`amx_is_used_exactly_where_the_cpu_has_it` holds that to
    /// /proc/cpuinfo); elsewhere `product` must refuse.
    #[test]
    fn the_tile_product_is_the_product_of_the_rounded_inputs() {
        if !available() {
            let packed = PackedWeights::pack(&values(64 * 32, 1), 64, 32);
            let refused = std::panic::catch_unwind(|| product(&values(64, 2), 1, &packed));
            assert!(refused.is_err(), "a tile product ran without AMX");
            return;
        }
        let packed = PackedWeights::pack(&values(64 * 32, 1), 64, 32);
        assert!(product(&[], 0, &packed).is_empty());
        // No inputs: every sum is empty, and the rows are still finished in blocks.
        assert_eq!(
            product(&[], 3, &PackedWeights::pack(&[], 0, 5)),
            vec![0.0; 15]
        );
        assert_eq!(
            product(&[], 40, &PackedWeights::pack(&[], 0, 2)),
            vec![0.0; 80]
        );
        for (m, k, n) in [
            (1, 1, 1),
            (17, 40, 33),
            (32, 384, 1152),
            (45, 1536, 384),
            (3, 64, 32),
        ] {
            let a = values(m * k, (m * 31 + k) as u64);
            let w = values(k * n, (k * 7 + n) as u64);
            let packed = PackedWeights::pack(&w, k, n);
            let got = product(&a, m, &packed);
            let want = reference(&a, m, &w, k, n, true);
            assert_eq!(got.len(), m * n);
            for (index, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
                    "{m}×{k}×{n}: element {index}: tiles {g}, reference {w}"
                );
            }
        }
    }
}
