//! Fuzz target `front_matter`: see `groundidx_fuzz::front_matter` for the properties it checks.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| groundidx_fuzz::front_matter(data));
