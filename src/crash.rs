//! Named crash points, for the crash tests.
//!
//! `crash_point("name")` aborts the process on the spot (a real process exit, as `kill -9`
//! would end it, with no destructors and no rollback in our code) when the environment variable
//! `GROUNDIDX_CRASH_AT` names it. `name:N` aborts at the N-th time the point is reached, to crash
//! between two batches of one run. Unset, a crash point costs one relaxed load.
//!
//! Before aborting it writes `groundidx: crash point NAME reached` to stderr, so a test can tell
//! that the process died at that point and not anywhere else. The `tantivy.*` points sit inside
//! Tantivy's commit and merges (in `index::directory`), the `rebuild.*` and `swap.*` ones around
//! the swap of a rebuilt index.
//!
//! The library never prints or exits otherwise; this is the one test hook that does, and every
//! point is listed in `CRASH_POINTS` so a test can visit them all.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a crash point.
pub const CRASH_ENV: &str = "GROUNDIDX_CRASH_AT";

/// Every crash point, in the order a run reaches them.
pub const CRASH_POINTS: &[&str] = &[
    "ingest.after_plan",
    "ledger.before_commit",
    "store.after_ledger_commit",
    "store.after_index_apply",
    "store.after_index_commit",
    "store.after_log_prune",
    "ingest.between_batches",
    "ingest.before_finish_run",
    "catch_up.before_apply",
    "catch_up.before_commit",
    "catch_up.after_commit",
    "tantivy.segment_file_created",
    "tantivy.delete_file_created",
    "tantivy.merge_file_created",
    "tantivy.before_meta_save",
    "tantivy.after_meta_save",
    "rebuild.before_add",
    "rebuild.before_commit",
    "rebuild.after_commit",
    "swap.before_removing_old",
    "rebuild.after_swap",
    "keys.before_commit",
    "keys.after_commit",
];

struct Armed {
    name: String,
    nth: u64,
    hits: AtomicU64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();

/// Aborts the process here if `GROUNDIDX_CRASH_AT` names this point.
pub fn crash_point(name: &str) {
    debug_assert!(CRASH_POINTS.contains(&name), "unlisted crash point {name}");
    let armed = ARMED.get_or_init(|| {
        let value = std::env::var(CRASH_ENV).ok()?;
        let (name, nth) = match value.rsplit_once(':') {
            Some((name, nth)) => (name.to_string(), nth.parse().unwrap_or(1)),
            None => (value, 1),
        };
        Some(Armed {
            name,
            nth,
            hits: AtomicU64::new(0),
        })
    });
    if let Some(armed) = armed
        && armed.name == name
        && armed.hits.fetch_add(1, Ordering::Relaxed) + 1 == armed.nth
    {
        use std::io::Write;
        // The one line the library writes itself: proof for a test of where the process died.
        let _ = writeln!(std::io::stderr(), "groundidx: crash point {name} reached");
        std::process::abort();
    }
}
