//! Named crash points, for the crash tests, which are also pause points for the tests of
//! changes made to the tree during a run.
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
//!
//! `GROUNDIDX_PAUSE_AT=name@DIR` makes the point a pause instead, the first time it is reached:
//! the process creates `DIR/paused` (holding its pid) and waits until `DIR/resume` exists, so a
//! test can act at exactly that moment (change the tree between planning and reading, cancel a
//! keyed call before or after its commit). A pause that is never resumed aborts after
//! `PAUSE_LIMIT`, so a broken test cannot leave a process behind.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that arms a crash point.
pub const CRASH_ENV: &str = "GROUNDIDX_CRASH_AT";
/// The environment variable that arms a pause point: `name@DIR`.
pub const PAUSE_ENV: &str = "GROUNDIDX_PAUSE_AT";
/// How long a pause waits for `DIR/resume` before it aborts the process.
pub(crate) const PAUSE_LIMIT: Duration = Duration::from_secs(120);

/// Every crash point, in the order a run reaches them.
pub const CRASH_POINTS: &[&str] = &[
    "schema.before_commit",
    "plan.before_walk",
    "walk.first_entry",
    "ingest.after_plan",
    "lease.after_take",
    "replica.after_fetch",
    "replica.before_commit",
    "replica.after_commit",
    "bootstrap.before_commit",
    "bootstrap.after_commit",
    "spool.after_forward",
    "replica.before_progress",
    "shared.before_commit",
    "ledger.before_commit",
    "store.after_ledger_commit",
    "store.after_index_apply",
    "store.after_index_commit",
    "store.after_log_prune",
    "ingest.between_batches",
    "embed.before_commit",
    "embed.after_commit",
    "vectors.before_rename",
    "vectors.after_rename",
    "ingest.before_finish_run",
    "lease.before_release",
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

struct Pause {
    name: String,
    dir: PathBuf,
    done: AtomicBool,
}

static PAUSE: OnceLock<Option<Pause>> = OnceLock::new();

/// Aborts the process here if `GROUNDIDX_CRASH_AT` names this point, and waits here if
/// `GROUNDIDX_PAUSE_AT` does.
pub(crate) fn crash_point(name: &str) {
    pause_point(name);
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

/// Waits at this point, when `GROUNDIDX_PAUSE_AT` names it, until the test says go on.
fn pause_point(name: &str) {
    let pause = PAUSE.get_or_init(|| {
        let value = std::env::var(PAUSE_ENV).ok()?;
        let (name, dir) = value.split_once('@')?;
        Some(Pause {
            name: name.to_string(),
            dir: PathBuf::from(dir),
            done: AtomicBool::new(false),
        })
    });
    let Some(pause) = pause else {
        return;
    };
    // Only the first arrival pauses: a server goes on serving the calls after the one held.
    if pause.name != name || pause.done.swap(true, Ordering::Relaxed) {
        return;
    }
    if std::fs::write(pause.dir.join("paused"), std::process::id().to_string()).is_err() {
        std::process::abort();
    }
    let started = Instant::now();
    while !pause.dir.join("resume").exists() {
        if started.elapsed() > PAUSE_LIMIT {
            std::process::abort();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
