//! Fuzz target `notebook`: see `groundidx_fuzz::notebook` for the properties it checks.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| groundidx_fuzz::notebook(data));
