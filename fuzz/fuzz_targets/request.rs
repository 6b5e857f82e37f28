//! Fuzz target `request`: see `groundidx_fuzz::request` for the properties it checks.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| groundidx_fuzz::request(data));
