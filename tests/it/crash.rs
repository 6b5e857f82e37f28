//! Invariant 2: a process aborted at any named crash point, then run again, leaves exactly the
//! chunks a clean ingest of the same folder holds, each once, and `verify` passes.
//!
//! Every point in `groundidx::crash::CRASH_POINTS` must be visited by one scenario here, so a
//! new crash point without a test fails `every_crash_point_is_tested`.

use std::process::Output;

use groundidx::crash::{CRASH_ENV, CRASH_POINTS};

use crate::support::{Env, clean_export};

/// Points reached by an ingest that adds, changes and removes documents over several batches.
const INGEST_POINTS: &[&str] = &[
    "plan.before_walk",
    "walk.first_entry",
    "ingest.after_plan",
    "ledger.before_commit",
    "store.after_ledger_commit",
    "store.after_index_apply",
    "store.after_index_commit",
    "store.after_log_prune",
    "ingest.between_batches",
    "ingest.before_finish_run",
];
/// Points reached by the replay of a writer that finds the index behind.
const CATCH_UP_POINTS: &[&str] = &[
    "catch_up.before_apply",
    "catch_up.before_commit",
    "catch_up.after_commit",
];
/// Points reached by `rebuild`.
const REBUILD_POINTS: &[&str] = &[
    "rebuild.after_clear",
    "rebuild.before_commit",
    "rebuild.after_commit",
];
/// Points on the agent path, tested with the keyed calls.
const KEYS_POINTS: &[&str] = &["keys.before_commit", "keys.after_commit"];

#[test]
fn every_crash_point_is_tested() {
    for point in CRASH_POINTS {
        assert!(
            [INGEST_POINTS, CATCH_UP_POINTS, REBUILD_POINTS, KEYS_POINTS]
                .iter()
                .any(|group| group.contains(point)),
            "crash point {point} has no crash test"
        );
    }
}

/// A store with a first version of the documents, and a folder changed since: one edit, one
/// deletion, one rename and several new files, so the next run has work in several batches.
fn changed_env() -> Env {
    let env = Env::sample();
    env.ingest();
    let key_rotation = env.docs.join("handbook/key-rotation.md");
    let text = std::fs::read_to_string(&key_rotation).expect("read");
    std::fs::write(&key_rotation, text.replace("90 days", "30 days")).expect("edit");
    std::fs::remove_file(env.docs.join("handbook/backups.md")).expect("delete");
    std::fs::rename(env.docs.join("notes/faq.md"), env.docs.join("faq.md")).expect("rename");
    for i in 0..7 {
        env.write(
            &format!("new/page-{i}.md"),
            &format!(
                "# Page {i}\n\nNew page number {i} about topic {i}.\n\n## Details\n\nMore on {i}.\n"
            ),
        );
    }
    env
}

fn ingest_args(env: &Env) -> Vec<String> {
    vec![
        "ingest".into(),
        env.docs.to_str().expect("utf-8").into(),
        "--json".into(),
        "--batch-files".into(),
        "3".into(),
    ]
}

/// Runs a command with a crash point armed and asserts it aborted.
fn run_crashing(env: &Env, args: &[String], point: &str) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = env
        .command(&args)
        .env(CRASH_ENV, point)
        .output()
        .expect("run groundidx");
    assert_eq!(
        output.status.code(),
        None,
        "groundidx {args:?} with {CRASH_ENV}={point} did not abort: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Re-runs ingest to completion and compares the store with a clean ingest.
fn heal_and_compare(env: &Env, point: &str) {
    let args = ingest_args(env);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let healed = env.json(&args);
    assert!(
        healed["warnings"].as_array().expect("warnings").is_empty(),
        "{healed}"
    );
    env.assert_verified();
    assert_eq!(
        env.export(),
        clean_export(&env.docs),
        "after a crash at {point}"
    );
    let again = env.json(&args);
    assert_eq!(
        again["chunks"]["added"], 0,
        "after healing from {point}: {again}"
    );
}

#[test]
fn crash_at_every_ingest_point_heals() {
    for point in INGEST_POINTS {
        let env = changed_env();
        run_crashing(&env, &ingest_args(&env), point);
        heal_and_compare(&env, point);
    }
}

#[test]
fn crash_between_two_batches_keeps_the_batches_before_it() {
    let env = changed_env();
    run_crashing(&env, &ingest_args(&env), "ingest.between_batches:2");
    let new_pages = env
        .export()
        .values()
        .filter(|paths| paths.iter().any(|p| p.starts_with("new/")))
        .count();
    assert!(new_pages > 0, "the committed batches were lost");
    assert!(new_pages < 14, "the run should have stopped half-way");
    env.assert_verified();
    heal_and_compare(&env, "ingest.between_batches:2");
}

#[test]
fn crash_inside_catch_up_heals() {
    for point in CATCH_UP_POINTS {
        let env = changed_env();
        // Leave the index behind the ledger, then crash the replay that heals it.
        run_crashing(&env, &ingest_args(&env), "store.after_index_apply");
        let status = env.json(&["status", "--json"]);
        assert!(
            status["index_generation"].as_u64() < status["generation"].as_u64(),
            "the index should lag: {status}"
        );
        let lag = env.run(&["verify", "--json"]);
        assert_eq!(
            lag.status.code(),
            Some(1),
            "verify must fail while the index lags"
        );
        let report: serde_json::Value = serde_json::from_slice(&lag.stdout).expect("json");
        assert_eq!(report["lag_only"], true, "{report}");
        run_crashing(&env, &ingest_args(&env), point);
        heal_and_compare(&env, point);
    }
}

#[test]
fn crash_inside_rebuild_keeps_the_old_index() {
    for point in REBUILD_POINTS {
        let env = Env::sample();
        env.ingest();
        run_crashing(&env, &["rebuild".to_string()], point);
        env.assert_verified();
        heal_and_compare(&env, point);
        let rebuilt = env.json(&["rebuild", "--json"]);
        assert!(rebuilt["chunks"].as_u64().expect("chunks") > 0);
        env.assert_verified();
    }
}
