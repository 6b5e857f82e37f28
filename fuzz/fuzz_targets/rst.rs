//! Fuzz target `rst`: see `groundidx_fuzz::check_rst` for the properties it checks.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| groundidx_fuzz::check_rst(data));
