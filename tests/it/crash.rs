//! Invariant 2: a process aborted at any named crash point, then run again, leaves exactly the
//! chunks a clean ingest of the same folder holds, each once, and `verify` passes.
//!
//! Every point in `groundidx::crash::CRASH_POINTS` belongs to one group here, and each group's
//! test runs every point of it and demands that the process died *there* (it aborted, and its
//! last words name the point), so a point that is listed but never reached fails. The
//! `tantivy.*` points are inside Tantivy's commit and merges: a writer killed there leaves
//! files no commit references, which the next writer must remove.

use std::process::Output;

use groundidx::crash::{CRASH_ENV, CRASH_POINTS};

use crate::support::{Env, assert_no_leftovers, clean_export};

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
/// Points inside Tantivy, reached by the same ingest.
const TANTIVY_POINTS: &[&str] = &[
    // First: a killed commit's `.del` file once wedged every later writer.
    "tantivy.delete_file_created",
    "tantivy.segment_file_created",
    "tantivy.before_meta_save",
    "tantivy.after_meta_save",
];
/// Inside a Tantivy merge, reached by an ingest of many small batches.
const MERGE_POINTS: &[&str] = &["tantivy.merge_file_created"];
/// Points reached by `rebuild`, which builds in `index.new/` and swaps it in.
const REBUILD_POINTS: &[&str] = &[
    "rebuild.before_add",
    "rebuild.before_commit",
    "rebuild.after_commit",
    "swap.before_removing_old",
    "rebuild.after_swap",
];
/// Points on the agent path, tested with the keyed calls.
const KEYS_POINTS: &[&str] = &["keys.before_commit", "keys.after_commit"];

#[test]
fn every_crash_point_is_tested() {
    for point in CRASH_POINTS {
        assert!(
            [
                INGEST_POINTS,
                TANTIVY_POINTS,
                MERGE_POINTS,
                CATCH_UP_POINTS,
                REBUILD_POINTS,
                KEYS_POINTS,
                crate::embedding::EMBED_POINTS,
                crate::shared_ledger::SHARED_POINTS,
                crate::doc_links::SCHEMA_POINTS,
            ]
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

/// Runs a command with a crash point armed.
fn run_armed(env: &Env, args: &[String], point: &str) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.command(&args)
        .env(CRASH_ENV, point)
        .output()
        .expect("run groundidx")
}

/// Runs a command with a crash point armed and asserts it aborted at that point.
fn run_crashing(env: &Env, args: &[String], point: &str) -> Output {
    let output = run_armed(env, args, point);
    assert_crashed_at(&output, point);
    output
}

/// The process was aborted (SIGABRT), and by the crash point named, not by anything else.
pub fn assert_crashed_at(output: &Output, point: &str) {
    use std::os::unix::process::ExitStatusExt;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGABRT),
        "{CRASH_ENV}={point} did not abort the process: {:?}\n{stderr}",
        output.status,
    );
    let name = point.split(':').next().expect("a name");
    assert!(
        stderr.contains(&format!("groundidx: crash point {name} reached")),
        "the process aborted, but not at {point}:\n{stderr}"
    );
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
    assert_no_leftovers(&env.store);
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
fn crash_inside_tantivy_commits_heals_and_leaves_no_files_behind() {
    for point in TANTIVY_POINTS {
        let env = changed_env();
        run_crashing(&env, &ingest_args(&env), point);
        heal_and_compare(&env, point);
    }
}

#[test]
fn crash_inside_a_tantivy_merge_heals_and_leaves_no_files_behind() {
    for point in MERGE_POINTS {
        let env = Env::sample();
        env.ingest();
        // A run commits the index once (at its end), so each run that adds a file adds a
        // segment, and Tantivy merges once it has eight small ones: the run that merges, and
        // waits for its merge before it ends, must die inside it.
        let mut crashed = false;
        for i in 0..16 {
            env.write(
                &format!("many/page-{i}.md"),
                &format!("# Many {i}\n\nPage {i} of many small runs.\n"),
            );
            let output = run_armed(&env, &ingest_args(&env), point);
            if output.status.success() {
                continue;
            }
            assert_crashed_at(&output, point);
            crashed = true;
            break;
        }
        assert!(crashed, "no run of sixteen reached {point}");
        heal_and_compare(&env, point);
    }
}

/// The index's segments from its `meta.json`: the commit's opstamp, and each segment's number
/// of documents with the opstamp of its deletes, if it has any.
fn committed_segments(env: &Env) -> (u64, Vec<(u64, Option<u64>)>) {
    let path = env.store.join("index").join("meta.json");
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read meta.json")).expect("JSON");
    let segments = meta["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|segment| {
            (
                segment["max_doc"].as_u64().expect("max_doc"),
                segment["deletes"]["opstamp"].as_u64(),
            )
        })
        .collect();
    (meta["opstamp"].as_u64().expect("opstamp"), segments)
}

/// A merge that a killed writer left undone is begun again by the next writer, at its first
/// commit. Tantivy stamps that writer's first operation with the last commit's opstamp, which
/// is also the delete opstamp of the segment the last commit deleted from; the merge skips a
/// delete of that opstamp in that segment yet goes on past it. The next run's first delete
/// must still hold: the passage it replaced never comes back.
#[test]
fn a_merge_begun_again_after_a_kill_never_brings_back_a_replaced_passage() {
    let env = Env::empty();
    let note = |name: &str, version: u32| {
        env.write(
            &format!("{name}.md"),
            &format!(
                "# Note {name}\n\nThis is note {name}, version {version}. One short paragraph.\n"
            ),
        );
    };
    let args = ingest_args(&env);
    let ingest = || env.json(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // One passage a run, so one segment a commit: the eighth commit merges the eight segments
    // into one of eight passages, and six more runs leave seven segments.
    for i in 1..=14 {
        note(&format!("n{i}"), 1);
        ingest();
    }
    let (_, segments) = committed_segments(&env);
    assert_eq!(segments.len(), 7, "{segments:?}");
    assert!(segments.contains(&(8, None)), "{segments:?}");
    // Replacing a passage of the merged segment gives it a delete at this commit's opstamp, and
    // an eighth segment: the merge the commit begins is killed.
    note("n1", 2);
    run_crashing(&env, &args, "tantivy.merge_file_created");
    let (opstamp, segments) = committed_segments(&env);
    assert_eq!(segments.len(), 8, "{segments:?}");
    assert!(segments.contains(&(8, Some(opstamp))), "{segments:?}");
    // The next writer's first delete replaces another passage of that segment; its commit
    // begins the merge again.
    note("n2", 2);
    ingest();
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}

#[test]
fn crash_between_two_batches_keeps_the_batches_before_it() {
    let env = changed_env();
    run_crashing(&env, &ingest_args(&env), "ingest.between_batches:2");
    let new_pages = env
        .export()
        .values()
        .filter(|chunk| chunk.paths.iter().any(|p| p.starts_with("new/")))
        .count();
    assert!(new_pages > 0, "the committed batches were lost");
    assert!(new_pages < 14, "the run should have stopped half-way");
    // The index commits at most every 30 s and at the end of a run, so it may lag the batches
    // the ledger committed; a lag the log explains, healed by the next writer.
    let report = env.run(&["verify", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("verify JSON");
    assert!(
        report["identical"] == true || report["lag_only"] == true,
        "verify: {report}"
    );
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
        let before = env.export();
        run_crashing(&env, &["rebuild".to_string()], point);
        // The killed rebuild left the old index or the new one, whole, at `index/`.
        env.assert_verified();
        assert_eq!(env.export(), before, "after a crash at {point}");
        heal_and_compare(&env, point);
        for leftover in ["index.new", "index.old"] {
            assert!(
                !env.store.join(leftover).exists(),
                "{leftover} survived the next writer after a crash at {point}"
            );
        }
        let rebuilt = env.json(&["rebuild", "--json"]);
        assert!(rebuilt["chunks"].as_u64().expect("chunks") > 0);
        env.assert_verified();
    }
}
