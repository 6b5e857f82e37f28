//! Fuzz target `pdf`: see `groundidx_fuzz::check_pdf` for the properties it checks.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| groundidx_fuzz::check_pdf(data));
