//! Matrix products on Intel AMX tiles: bfloat16 inputs, float32 sums. The crate's one module
//! with `unsafe` code, kept here so the rest can forbid it.
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
//! - Each 32 × 32 block of the output is four 16 × 16 float32 tiles, accumulated over `k` in
//!   steps of 32 (two tiles of the activations, two of the weights, four tile products).
//!
//! Rounding each input to bfloat16 (8 bits of mantissa) and summing in float32 leaves the
//! model's vectors at a cosine above 0.999 to the float32 pass (the tests below and
//! docs/BENCHMARKS.md measure it), and retrieval within the goal of 0.005 nDCG.

#![allow(
    unsafe_code,
    reason = "the AMX system call and instructions; the crate's only unsafe code (see above)"
)]

use std::sync::OnceLock;

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
        let panel_len = (k_pad / 2) * TILE * 2;
        let mut panels = vec![0u16; (n_pad / TILE) * panel_len];
        for row in 0..k {
            for column in 0..n {
                let (panel, lane) = (column / TILE, column % TILE);
                let at = panel * panel_len + (row / 2) * TILE * 2 + lane * 2 + row % 2;
                panels[at] = bf16(weights[row * n + column]);
            }
        }
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

    /// Columns of the weights: the width of the product.
    pub(crate) fn outputs(&self) -> usize {
        self.n
    }
}

/// `activations` (`[m, k]` row-major float32) times `weights`: `[m, n]` row-major float32.
///
/// # Panics
/// When AMX is not [`available`], or `activations` is not `m` rows of the weights' `k`.
pub(crate) fn product(activations: &[f32], m: usize, weights: &PackedWeights) -> Vec<f32> {
    assert!(available(), "AMX tiles are not available on this CPU");
    let (k, n, k_pad, n_pad) = (weights.k, weights.n, weights.k_pad, weights.n_pad);
    assert_eq!(activations.len(), m * k, "activations of {m} × {k}");
    if k == 0 {
        return vec![0.0; m * n];
    }
    let m_pad = m.next_multiple_of(BLOCK);
    LHS.with_borrow_mut(|lhs| {
        // The rows past `m` may hold an earlier product's values: an output row depends on its
        // own input row alone, so they only make output rows that are never read. The columns
        // past `k` are zeroed, as they meet every row.
        lhs.resize(lhs.len().max(m_pad * k_pad), 0);
        let lhs = &mut lhs[..m_pad * k_pad];
        round_rows(activations, k, lhs, k_pad);
        // What every tile row reads or writes lies inside these buffers.
        assert!(m_pad.is_multiple_of(BLOCK) && k_pad.is_multiple_of(TILE_K));
        assert!(n_pad.is_multiple_of(BLOCK));
        assert_eq!(
            weights.panels.len(),
            (n_pad / TILE) * (k_pad / 2) * TILE * 2
        );
        if n_pad == n {
            // Straight into the answer: the tiles write every value of its `m_pad` rows, of
            // which the first `m` are kept.
            let mut out = Vec::with_capacity(m_pad * n);
            let spare = &mut out.spare_capacity_mut()[..m_pad * n];
            // SAFETY: `spare` is `m_pad × n_pad` writable floats; the sizes were checked above.
            unsafe {
                tiles::multiply(
                    lhs,
                    &weights.panels,
                    spare.as_mut_ptr().cast(),
                    m_pad,
                    k_pad,
                    n_pad,
                );
            }
            // SAFETY: `multiply` wrote all `m_pad × n_pad` values, a superset of the first
            // `m × n`.
            unsafe { out.set_len(m * n) };
            return out;
        }
        let mut padded = vec![0f32; m_pad * n_pad];
        // SAFETY: `padded` is `m_pad × n_pad` floats; the sizes were checked above.
        unsafe {
            tiles::multiply(
                lhs,
                &weights.panels,
                padded.as_mut_ptr(),
                m_pad,
                k_pad,
                n_pad,
            );
        }
        let mut out = Vec::with_capacity(m * n);
        for row in padded.chunks_exact(n_pad).take(m) {
            out.extend_from_slice(&row[..n]);
        }
        out
    })
}

thread_local! {
    /// The rounded activations of this thread's last product, kept to be written over.
    static LHS: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `from` (rows of `k` float32) rounded into `to` (rows of `k_pad`), the columns past `k` zero.
fn round_rows(from: &[f32], k: usize, to: &mut [u16], k_pad: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `available()` held, which asked for AVX-512 F, BW and VL.
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
    /// # Safety
    /// `out` must be valid for writing `m_pad × n_pad` float32s, and `available()` must have
    /// held. (The shapes and `lhs` and `panels` are checked here.)
    pub(super) unsafe fn multiply(
        lhs: &[u16],
        panels: &[u16],
        out: *mut f32,
        m_pad: usize,
        k_pad: usize,
        n_pad: usize,
    ) {
        // Whole 32 × 32 blocks only: the stores below write rows and columns in 32s.
        assert!(m_pad.is_multiple_of(BLOCK) && n_pad.is_multiple_of(BLOCK));
        assert!(k_pad.is_multiple_of(TILE_K));
        assert_eq!(lhs.len(), m_pad * k_pad);
        assert_eq!(panels.len(), (n_pad / TILE) * (k_pad / 2) * TILE * 2);
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
                // stride `n_pad`), inside its `m_pad × n_pad` values because `m_pad` and
                // `n_pad` are multiples of 32.
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
    pub(super) unsafe fn multiply(_: &[u16], _: &[u16], _: *mut f32, _: usize, _: usize, _: usize) {
        unreachable!("AMX is x86-64 only")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
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
        // No inputs: every sum is empty.
        assert_eq!(
            product(&[], 3, &PackedWeights::pack(&[], 0, 5)),
            vec![0.0; 15]
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
