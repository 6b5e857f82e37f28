//! Named crash points, for the crash tests.
//!
//! `crash_point("name")` aborts the process on the spot (a real process exit, as `kill -9`
//! would end it, with no destructors and no rollback in our code) when the environment variable
//! `GROUNDIDX_CRASH_AT` names it. `name:N` aborts at the N-th time the point is reached, to crash
//! between two batches of one run. Unset, a crash point costs one relaxed load.
//!
//! The library never exits otherwise; this is the one test hook that does, and every point is
//! listed in `CRASH_POINTS` so a test can visit them all.
//!
//! The same points can hold a process instead, for tests of races that must land on one side of
//! a step (a cancellation before or after a keyed call's commit): `GROUNDIDX_PAUSE_AT=name` and
//! `GROUNDIDX_PAUSE_DIR=DIR` make the first arrival at `name` create `DIR/name.reached` and wait
//! until `DIR/name.release` exists (at most a minute, then it goes on).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// The environment variable that arms a pause point.
pub const PAUSE_ENV: &str = "GROUNDIDX_PAUSE_AT";
/// The folder where a paused process reports `NAME.reached` and waits for `NAME.release`.
pub const PAUSE_DIR_ENV: &str = "GROUNDIDX_PAUSE_DIR";
/// How long a pause waits for its release before going on, so a lost test cannot hang a server.
const PAUSE_LIMIT: Duration = Duration::from_secs(60);

struct Pause {
    name: String,
    dir: PathBuf,
    done: AtomicBool,
}

static PAUSE: OnceLock<Option<Pause>> = OnceLock::new();

struct Armed {
    name: String,
    nth: u64,
    hits: AtomicU64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();

/// Aborts the process here if `GROUNDIDX_CRASH_AT` names this point; holds it here the first
/// time if `GROUNDIDX_PAUSE_AT` does.
pub fn crash_point(name: &str) {
    debug_assert!(CRASH_POINTS.contains(&name), "unlisted crash point {name}");
    pause_point(name);
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

fn pause_point(name: &str) {
    let pause = PAUSE.get_or_init(|| {
        Some(Pause {
            name: std::env::var(PAUSE_ENV).ok()?,
            dir: std::env::var_os(PAUSE_DIR_ENV).map(PathBuf::from)?,
            done: AtomicBool::new(false),
        })
    });
    let Some(pause) = pause else { return };
    if pause.name != name || pause.done.swap(true, Ordering::Relaxed) {
        return;
    }
    // A test hook: if the folder cannot be written the pause is skipped, never an error.
    let _ = std::fs::write(pause.dir.join(format!("{name}.reached")), b"");
    let release = pause.dir.join(format!("{name}.release"));
    let started = Instant::now();
    while !release.exists() && started.elapsed() < PAUSE_LIMIT {
        std::thread::sleep(Duration::from_millis(10));
    }
}
