//! Fuzz target `normalise`: see `groundidx_fuzz::normalise` for the properties it checks.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| groundidx_fuzz::normalise(data));
