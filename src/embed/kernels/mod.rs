//! The forward pass's matrix products, chosen at run time by what the CPU offers: AMX tiles in
//! bfloat16 (`amx`) and float32 products by the `gemm` crate (`float32`). The crate's one place
//! with `unsafe` code, kept here so the rest can deny it: each module says what it needs
//! `unsafe` for and why that holds, and checks every size and stride before the first
//! instruction.

#![allow(
    unsafe_code,
    reason = "the AMX system call and instructions, and gemm's pointer-based entry point; the crate's only unsafe code (see each module)"
)]

pub(crate) mod amx;
pub(crate) mod float32;

/// The most bytes a per-thread scratch buffer keeps between calls. Buffers are reused so a
/// forward pass allocates (and the kernel zeroes fresh pages for) almost nothing, but one very
/// long text (the scores grow with the square of its length) must not leave a thread holding
/// hundreds of megabytes for the life of the process; a model's ordinary packs stay below it.
pub(crate) const KEPT_BYTES: usize = 32 << 20;

/// Frees `buffer` when it holds more than [`KEPT_BYTES`].
pub(crate) fn release_if_large<T>(buffer: &mut Vec<T>) {
    if buffer.capacity().saturating_mul(std::mem::size_of::<T>()) > KEPT_BYTES {
        *buffer = Vec::new();
    }
}

/// Test inputs: `len` values in [-1, 1) from a fixed sequence (a linear congruential generator,
/// so a failing shape fails the same way every run).
#[cfg(test)]
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
