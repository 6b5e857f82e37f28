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
