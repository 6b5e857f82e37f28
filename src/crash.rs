//! Named crash points, for the crash tests.
//!
//! `crash_point("name")` aborts the process on the spot (a real process exit, as `kill -9`
//! would end it, with no destructors and no rollback in our code) when the environment variable
//! `GROUNDIDX_CRASH_AT` names it. `name:N` aborts at the N-th time the point is reached, to crash
//! between two batches of one run. Unset, a crash point costs one relaxed load.
//!
//! `pause_point("name", resume)` holds a run at a named point while a test acts on it
//! (`GROUNDIDX_PAUSE_AT`).
//!
//! The library never exits otherwise; this is the one test hook that does, and every point is
//! listed in `CRASH_POINTS` so a test can visit them all.

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
    "rebuild.after_clear",
    "rebuild.before_commit",
    "rebuild.after_commit",
    "keys.before_commit",
    "keys.after_commit",
];

struct Armed {
    name: String,
    nth: u64,
    hits: AtomicU64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();

/// The environment variable that arms a pause point.
pub const PAUSE_ENV: &str = "GROUNDIDX_PAUSE_AT";

/// Waits here, once, if `GROUNDIDX_PAUSE_AT` names this point: says so on the log (a warning),
/// then waits until `resume()` is true (or 60 s pass), so a test can act (send a signal) at a
/// known moment of a run instead of guessing one. Unset, it costs one load.
pub fn pause_point(name: &str, resume: impl Fn() -> bool) {
    static PAUSE: OnceLock<Option<String>> = OnceLock::new();
    static PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let armed = PAUSE.get_or_init(|| std::env::var(PAUSE_ENV).ok());
    if armed.as_deref() != Some(name) || PAUSED.swap(true, Ordering::Relaxed) {
        return;
    }
    tracing::warn!("paused at {name} ({PAUSE_ENV})");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !resume() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

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
        std::process::abort();
    }
}
