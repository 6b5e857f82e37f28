//! Fuzz target `query`: see `groundidx_fuzz::query` for the properties it checks. The store is
//! built once per process and searched by every input.

#![no_main]

use groundidx_fuzz::QueryFixture;
use libfuzzer_sys::fuzz_target;

thread_local! {
    // A store reader holds a SQLite connection, which is not `Sync`.
    static FIXTURE: QueryFixture = QueryFixture::new();
}

fuzz_target!(|data: &[u8]| FIXTURE.with(|fixture| groundidx_fuzz::query(fixture, data)));
