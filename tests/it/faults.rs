//! Resource faults: a full disk (the ledger's side, the index's side and the vector index's),
//! an unwritable or read-only store, and a ledger locked by another connection. A run that meets
//! one fails with an error naming the store and the cause and an exit status from README.md's
//! table, never a panic; the store stays consistent (`verify` passes, or reports a lag the next
//! writer heals); once the fault is gone the next run completes, equals a clean ingest and a
//! re-run writes nothing. A store on a read-only mount is read by every read command and the
//! agent path, never refused for want of a file SQLite or Tantivy would create.
//!
//! The disk tests mount a tmpfs, which needs root: without it they say so and skip.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Env, clean_export, is_root, prerequisite_missing, tree_bytes};

/// The exit statuses README.md documents.
const DOCUMENTED: [i32; 5] = [0, 1, 2, 3, 75];

// ---------------------------------------------------------------------------------------------
// Helpers.

/// A tmpfs mounted for one test, unmounted (lazily, so nothing can keep it busy) on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `dir`; `None`, after saying why, when mounting is not
    /// permitted here.
    fn mount(dir: &Path, bytes: u64, test: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).expect("create the mount point");
        if !is_root() {
            prerequisite_missing(&format!("{test}: mounting a tmpfs needs root"));
            return None;
        }
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir)
            .output();
        match output {
            Ok(output) if output.status.success() => Some(Tmpfs {
                dir: dir.to_path_buf(),
            }),
            Ok(output) => {
                let stderr = String::from_utf8_lossy(&output.stderr).to_lowercase();
                let refused = [
                    "permission denied",
                    "not permitted",
                    "superuser",
                    "only root",
                ]
                .iter()
                .any(|phrase| stderr.contains(phrase));
                assert!(refused, "mount -t tmpfs failed: {stderr}");
                prerequisite_missing(&format!(
                    "{test}: mounting a tmpfs is not permitted here: {stderr}"
                ));
                None
            }
            Err(err) => {
                prerequisite_missing(&format!("{test}: cannot run mount: {err}"));
                None
            }
        }
    }

    /// `mount -o remount,OPTIONS DIR`.
    fn remount(&self, options: &str) {
        let output = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .output()
            .expect("run mount");
        assert!(
            output.status.success(),
            "remount,{options}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Writes `count` Markdown files of about 8 KB of varied words (a vocabulary of some 30,000
/// words, so the index has real term dictionaries and postings), the same every time.
fn generate_corpus(docs: &Path, count: usize) {
    const SYLLABLES: [&str; 32] = [
        "ka", "lo", "mir", "tes", "van", "qu", "ber", "nid", "os", "tra", "pel", "gim", "zu",
        "rok", "sha", "fen", "dal", "wic", "ny", "hup", "ex", "bri", "cor", "lum", "tav", "jo",
        "sid", "mek", "ul", "prin", "gos", "vey",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for file in 0..count {
        let mut text = format!("# Topic {file}\n\n");
        for section in 0..6 {
            text.push_str(&format!("## Section {section} of topic {file}\n\n"));
            for _ in 0..3 {
                for _ in 0..60 {
                    for _ in 0..(2 + next() % 2) {
                        text.push_str(SYLLABLES[(next() % 32) as usize]);
                    }
                    text.push(' ');
                }
                text.push_str("\n\n");
            }
        }
        let path = docs.join(format!("part-{}/doc-{file:04}.md", file / 50));
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create folders");
        std::fs::write(path, text).expect("write a document");
    }
}

/// Fills `path` with `bytes` of zeros (really written: a sparse file takes no space).
fn fill(path: &Path, bytes: u64) {
    let mut file = std::fs::File::create(path).expect("create the filler");
    let block = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        file.write_all(&block[..n]).expect("write the filler");
        left -= n as u64;
    }
    file.sync_all().expect("sync the filler");
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ingest_args<'a>(env: &'a Env, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["ingest", env.docs.to_str().expect("utf-8"), "--json"];
    args.extend_from_slice(extra);
    args
}

/// Asserts a failed run that says what happened: a documented non-zero status, an `error:`
/// line naming the store and containing one of `causes`, and no panic.
fn assert_clear_failure(output: &Output, store: &Path, causes: &[&str]) -> String {
    let stderr = text(&output.stderr);
    let code = output.status.code();
    assert!(
        code.is_some_and(|c| c != 0 && DOCUMENTED.contains(&c)),
        "exit status {code:?} is not a documented failure status; stderr: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "the run panicked: {stderr}"
    );
    // Warnings may come first (a full disk can also stop the tidying of a killed writer's files).
    assert!(
        stderr.lines().any(|line| line.starts_with("error: ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(store.to_str().expect("utf-8")),
        "the error must name the store {}: {stderr}",
        store.display()
    );
    let lower = stderr.to_lowercase();
    assert!(
        causes.iter().any(|cause| lower.contains(cause)),
        "the error must give the cause (one of {causes:?}): {stderr}"
    );
    stderr
}

const NO_SPACE: &[&str] = &["no space left on device", "disk is full"];

/// What `verify` makes of a store after a failed run: identical, or behind by a lag the next
/// writer replays, or (when the ledger never got its schema) no store at all. Returns which.
fn assert_consistent(env: &Env) -> &'static str {
    let output = env.run(&["verify", "--json"]);
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("panicked"), "verify panicked: {stderr}");
    match serde_json::from_slice::<Value>(&output.stdout) {
        Ok(report) if report["identical"] == true => {
            assert_eq!(output.status.code(), Some(0), "{report}");
            "identical"
        }
        Ok(report) => {
            assert_eq!(
                report["lag_only"], true,
                "after a failed run the store differs beyond a lag: {report}"
            );
            assert!(
                report["extra_in_index"]
                    .as_array()
                    .is_some_and(std::vec::Vec::is_empty),
                "{report}"
            );
            "lag"
        }
        Err(_) => {
            assert!(
                stderr.contains("no groundidx store"),
                "verify neither reported nor said there is no store: {stderr}"
            );
            "no store"
        }
    }
}

/// After the fault is gone: the next run completes, verify passes, the store equals a clean
/// ingest, and a re-run writes nothing.
fn assert_heals(env: &Env, extra: &[&str], clean: &BTreeMap<String, crate::support::Exported>) {
    let output = env.run(&ingest_args(env, extra));
    assert_eq!(
        output.status.code(),
        Some(0),
        "the run after the fault failed: {}",
        text(&output.stderr)
    );
    env.assert_verified();
    assert!(
        &env.export() == clean,
        "the healed store differs from a clean ingest"
    );
    let again: Value = env.json(&ingest_args(env, extra));
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["chunks"]["removed"], 0, "{again}");
}

// ---------------------------------------------------------------------------------------------
// A full disk.

#[test]
fn a_disk_filling_up_during_a_cold_ingest_fails_clearly_and_heals_when_given_space() {
    let mut env = Env::empty();
    generate_corpus(&env.docs, 200);
    // How much a finished store of this corpus takes.
    let clean = Env::empty();
    let clean_docs = clean.docs.to_str().expect("utf-8");
    crate::support::copy_tree(&env.docs, &clean.docs);
    clean.json(&["ingest", clean_docs, "--json"]);
    let needed = tree_bytes(&clean.store);

    let disk = env.tmp.path().join("disk");
    env.store = disk.join("store");
    let small = (needed / 2) & !4095;
    let Some(tmpfs) = Tmpfs::mount(&disk, small, "the cold-ingest ENOSPC test") else {
        return;
    };
    let output = env.run(&ingest_args(&env, &[]));
    assert_clear_failure(&output, &env.store, NO_SPACE);
    assert_consistent(&env);

    tmpfs.remount(&format!("size={}", needed * 4));
    assert_heals(&env, &[], &clean_export(&env.docs));
}

#[test]
fn enospc_at_any_moment_on_either_store_leaves_a_store_the_next_run_heals() {
    let mut env = Env::empty();
    generate_corpus(&env.docs, 120);
    let clean = Env::empty();
    crate::support::copy_tree(&env.docs, &clean.docs);
    clean.json(&["ingest", clean.docs.to_str().expect("utf-8"), "--json"]);
    let needed = tree_bytes(&clean.store);
    let reference = clean.export();
    drop(clean);

    let disk = env.tmp.path().join("disk");
    let size = (needed * 3) & !4095;
    let Some(_tmpfs) = Tmpfs::mount(&disk, size, "the ENOSPC-at-any-moment test") else {
        return;
    };
    // Batches of 30 files: the disk fills in the first batch or in a later one, in the
    // ledger's transaction or in the index's commit.
    let batches = ["--batch-files", "30"];
    let mut sides = Vec::new();
    for eighths in [0, 1, 3, 6, 8, 10, 12, 14] {
        let free = needed * eighths / 8;
        let filler = disk.join("filler");
        fill(&filler, size.saturating_sub(free + 64 * 1024));
        env.store = disk.join(format!("store-{eighths}"));

        let output = env.run(&ingest_args(&env, &batches));
        if output.status.success() {
            sides.push((free, "done", "identical"));
        } else {
            let stderr = assert_clear_failure(&output, &env.store, NO_SPACE);
            let side = if stderr.starts_with("error: index") {
                "index"
            } else if stderr.contains("ledger") {
                "ledger"
            } else {
                "elsewhere"
            };
            let state = assert_consistent(&env);
            sides.push((free, side, state));
            // Still no space: the next writer's replay (or its first batch) fails the same way.
            let output = env.run(&ingest_args(&env, &batches));
            if !output.status.success() {
                assert_clear_failure(&output, &env.store, NO_SPACE);
            }
            assert_consistent(&env);
        }
        std::fs::remove_file(&filler).expect("free the space");
        assert_heals(&env, &batches, &reference);
        std::fs::remove_dir_all(&env.store).expect("remove the store");
    }
    eprintln!("free bytes, where the disk filled, what verify said: {sides:?}");
    assert!(
        sides.iter().any(|(_, side, _)| *side == "ledger"),
        "no run ran out of space in the ledger: {sides:?}"
    );
    assert!(
        sides.iter().any(|(_, side, _)| *side == "index"),
        "no run ran out of space in the index: {sides:?}"
    );
}

#[test]
fn a_disk_filling_up_during_the_first_embedding_leaves_no_temporary_file_and_heals() {
    let mut env = Env::empty();
    generate_corpus(&env.docs, 40);
    let server = crate::support::embed_server::EmbedServer::start(
        crate::support::embed_server::Vectors::Words,
    );
    let flags = server.flags("words");
    let embed: Vec<&str> = flags.iter().map(String::as_str).collect();
    // What the embedding adds to a store: the ledger's vectors and the vector index.
    let clean = Env::empty();
    crate::support::copy_tree(&env.docs, &clean.docs);
    clean.ingest();
    let lexical = tree_bytes(&clean.store);
    clean.json(&ingest_args(&clean, &embed));
    let embedding = tree_bytes(&clean.store)
        .saturating_sub(lexical)
        .max(64 << 10);
    let reference = clean.export();
    drop(clean);

    let disk = env.tmp.path().join("disk");
    let size = ((lexical + embedding) * 4) & !4095;
    let Some(_tmpfs) = Tmpfs::mount(&disk, size, "the first-embedding ENOSPC test") else {
        return;
    };
    let mut outcomes = Vec::new();
    for eighths in [2, 6, 9, 10, 12] {
        env.store = disk.join(format!("store-{eighths}"));
        env.ingest();
        // Opening the ledger needs room for its `-shm` file: a disk full before the embedding
        // is the other tests' case.
        let free = embedding * eighths / 8 + (64 << 10);
        let filler = disk.join("filler");
        fill(&filler, size.saturating_sub(tree_bytes(&disk) + free));

        let output = env.run(&ingest_args(&env, &embed));
        let outcome = if output.status.success() {
            "done"
        } else {
            let stderr = assert_clear_failure(&output, &env.store, NO_SPACE);
            let error = stderr
                .lines()
                .find(|line| line.starts_with("error: "))
                .expect("an error line");
            if error.contains("vectors.bin") {
                "vector index"
            } else {
                "ledger"
            }
        };
        let leftover = env.store.join("vectors.bin.tmp");
        assert!(
            !leftover.exists(),
            "{} was left behind ({outcome}): {}",
            leftover.display(),
            text(&output.stderr)
        );
        let state = assert_consistent(&env);
        outcomes.push((free, outcome, state));

        std::fs::remove_file(&filler).expect("free the space");
        env.json(&ingest_args(&env, &embed));
        let report = env.json(&["verify", "--json"]);
        assert_eq!(report["identical"], true, "{report}");
        assert_eq!(report["vectors"]["identical"], true, "{report}");
        assert_eq!(env.export(), reference);
        std::fs::remove_dir_all(&env.store).expect("remove the store");
    }
    eprintln!("free bytes, what failed, what verify said: {outcomes:?}");
    assert!(
        outcomes
            .iter()
            .any(|(_, outcome, _)| *outcome == "vector index"),
        "no run ran out of space writing the vector index: {outcomes:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// An unwritable store.

/// Runs the command as an unprivileged user when the suite runs as root, so that permissions
/// bite.
fn unprivileged(mut command: Command) -> Output {
    if is_root() {
        command.uid(65534).gid(65534);
    }
    command.output().expect("run groundidx")
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Sets the mode of the store folder and everything in it.
fn chmod_store(store: &Path, dirs: u32, files: u32) {
    for entry in walkdir::WalkDir::new(store) {
        let entry = entry.expect("walk the store");
        let mode = if entry.file_type().is_dir() {
            dirs
        } else {
            files
        };
        chmod(entry.path(), mode);
    }
}

/// `groundidx ARGS…` as the unprivileged user; every command on a store that user writes runs
/// as that user, since a reader run as root would leave root's `-shm` file behind.
fn as_user(env: &Env, args: &[&str]) -> Output {
    unprivileged(env.command(args))
}

/// `export` as the unprivileged user: chunk ID to sorted paths.
fn user_export(env: &Env) -> BTreeMap<String, crate::support::Exported> {
    let output = as_user(env, &["export"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    crate::support::parse_export(&text(&output.stdout))
}

fn user_json(env: &Env, args: &[&str]) -> Value {
    let output = as_user(env, args);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "groundidx {args:?} printed no JSON ({err}): {}",
            text(&output.stderr)
        )
    })
}

#[test]
fn an_unwritable_store_folder_fails_clearly_and_the_store_heals() {
    let mut env = Env::sample();
    chmod(env.tmp.path(), 0o777);
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let args = ["ingest", docs.as_str(), "--json"];

    // A new store in a folder this user cannot write to.
    let parent = env.tmp.path().join("read-only-parent");
    std::fs::create_dir(&parent).expect("mkdir");
    chmod(&parent, 0o555);
    env.store = parent.join("store");
    let output = as_user(&env, &args);
    let stderr = assert_clear_failure(&output, &env.store, &["permission denied"]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        !env.store.exists(),
        "a store appeared in an unwritable folder"
    );
    chmod(&parent, 0o777);
    let output = as_user(&env, &args);
    assert!(output.status.success(), "{}", text(&output.stderr));

    // An existing store whose folder and files become unwritable, with a document to add.
    env.write(
        "new/added.md",
        "# Added\n\nA document added while the store is locked down.\n",
    );
    let before = user_export(&env);
    chmod_store(&env.store, 0o555, 0o444);
    let output = as_user(&env, &args);
    let stderr = assert_clear_failure(
        &output,
        &env.store,
        &["readonly", "read-only", "permission denied"],
    );
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    chmod_store(&env.store, 0o755, 0o644);
    let report = user_json(&env, &["verify", "--json"]);
    assert_eq!(report["identical"], true, "{report}");
    assert_eq!(
        user_export(&env),
        before,
        "the refused run changed the store"
    );

    let report = user_json(&env, &args);
    assert_eq!(report["documents"]["added"], 1, "{report}");
    assert_eq!(user_export(&env), clean_export(&env.docs));
    let again = user_json(&env, &args);
    assert_eq!(again["chunks"]["added"], 0, "{again}");
    assert_eq!(again["chunks"]["removed"], 0, "{again}");
}

#[test]
fn a_read_only_mount_refuses_writes_clearly_and_the_store_heals() {
    let mut env = Env::sample();
    let disk = env.tmp.path().join("disk");
    let Some(tmpfs) = Tmpfs::mount(&disk, 64 << 20, "the read-only mount test") else {
        return;
    };
    env.store = disk.join("store");
    env.ingest();
    env.write(
        "new/added.md",
        "# Added\n\nA document added while the disk is read-only.\n",
    );
    let before = env.export();

    tmpfs.remount("ro");
    let output = env.run(&ingest_args(&env, &[]));
    let stderr = assert_clear_failure(&output, &env.store, &["read-only file system"]);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let output = env.run(&["rebuild"]);
    assert_clear_failure(&output, &env.store, &["read-only file system"]);

    tmpfs.remount("rw");
    env.assert_verified();
    assert_eq!(env.export(), before, "the refused run changed the store");
    assert_heals(&env, &[], &clean_export(&env.docs));
}

// ---------------------------------------------------------------------------------------------
// A store on a read-only mount: read, never refused.

/// The chunk IDs of `search QUERY --json`, in rank order, and the command's stderr.
fn search_ids(env: &Env, query: &str) -> (Vec<String>, String) {
    let output = env.run(&["search", query, "--json", "--top-k", "5"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "search failed: {stderr}");
    let response: Value = serde_json::from_slice(&output.stdout).expect("search JSON");
    let ids = response["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits in {response}"))
        .iter()
        .map(|hit| hit["chunk_id"].as_str().expect("a chunk ID").to_string())
        .collect();
    (ids, stderr)
}

/// Asserts a read command that worked: exit `code`, and none of SQLite's bare refusal.
fn assert_read(output: &Output, args: &[&str], code: i32) {
    let stderr = text(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(code),
        "groundidx {args:?} on a read-only mount: {stderr}"
    );
    assert!(
        !stderr.contains("unable to open database file"),
        "groundidx {args:?}: {stderr}"
    );
}

#[tokio::test]
async fn a_store_on_a_read_only_mount_answers_every_read_command() {
    let mut env = Env::sample();
    let disk = env.tmp.path().join("disk");
    let Some(tmpfs) = Tmpfs::mount(&disk, 64 << 20, "the read-only store test") else {
        return;
    };
    // Characters that mean something in an SQLite URI: the immutable ledger is opened by one.
    env.store = disk.join("store ?mode=rw#%41");
    env.ingest();
    // A writer that closed cleanly leaves no write-ahead log (a reader would leave an empty
    // one): on the read-only mount the ledger is opened immutable. What the reads must give is
    // read from a copy of the store.
    assert!(!env.store.join("ledger.sqlite-wal").exists());
    let copy = Env {
        tmp: tempfile::tempdir().expect("temp dir"),
        docs: env.docs.clone(),
        store: env.tmp.path().join("copy"),
    };
    crate::support::copy_tree(&env.store, &copy.store);
    let exported = copy.export();
    let (hits, _) = search_ids(&copy, "signing key");
    assert!(!hits.is_empty(), "the query finds nothing to compare");

    tmpfs.remount("ro");
    assert_eq!(search_ids(&env, "signing key").0, hits);
    let status = env.run(&["status", "--json"]);
    assert_read(&status, &["status"], 0);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(status["generation"], status["index_generation"], "{status}");
    let verify = env.run(&["verify", "--json"]);
    assert_read(&verify, &["verify"], 0);
    let report: Value = serde_json::from_slice(&verify.stdout).expect("verify JSON");
    assert_eq!(report["identical"], true, "{report}");
    let export = env.run(&["export"]);
    assert_read(&export, &["export"], 0);
    assert_eq!(
        crate::support::parse_export(&text(&export.stdout)),
        exported
    );

    // The agent path answers, and records nothing it cannot: an unkeyed call is answered and
    // marked read-only, a call with a new key is refused with the reason.
    let mcp = crate::support::mcp::Mcp::start(&env, &[]).await;
    let arguments = serde_json::json!({"query": "signing key", "top_k": 5});
    let answer = mcp
        .call("search_docs", arguments.clone(), Value::Null)
        .await;
    assert!(!answer.is_error, "{}", answer.raw);
    let served: Vec<&str> = answer.structured["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits: {}", answer.raw))
        .iter()
        .map(|hit| hit["chunk_id"].as_str().expect("a chunk ID"))
        .collect();
    assert_eq!(served, hits, "{}", answer.raw);
    assert_eq!(answer.meta["groundidx/readOnly"], true, "{}", answer.raw);
    let keyed = mcp.search("ro/1", arguments.clone()).await;
    keyed.assert_error("unavailable");
    assert!(
        keyed.text.contains("read-only file system"),
        "the refusal must say why: {}",
        keyed.raw
    );
    mcp.stop().await;
    let server = crate::support::http::serve(&env, &[]);
    let reply = server.search(None, &arguments.to_string());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.header("groundidx-read-only"),
        Some("1"),
        "{}",
        reply.body
    );
    let served: Vec<String> = reply.json()["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits: {}", reply.body))
        .iter()
        .map(|hit| hit["chunk_id"].as_str().expect("a chunk ID").to_string())
        .collect();
    assert_eq!(served, hits, "{}", reply.body);
    drop(server);

    tmpfs.remount("rw");
    let counts = env.json(&["status", "--json"]);
    assert_eq!(counts["audit_events"], 0, "{counts}");
    assert_eq!(counts["usage_units"], 0, "{counts}");
    env.assert_verified();
}

#[test]
fn a_read_only_mount_with_a_write_ahead_log_reads_it_and_says_the_index_lags() {
    let mut env = Env::sample();
    let disk = env.tmp.path().join("disk");
    let Some(tmpfs) = Tmpfs::mount(&disk, 64 << 20, "the read-only log test") else {
        return;
    };
    env.store = disk.join("store");
    env.ingest();
    // A writer killed after its ledger commit: the commit is in the write-ahead log only, and
    // the index lags it.
    env.write(
        "new/zebra.md",
        "# Zebra crossings\n\nA zebra crossing is striped so that drivers see it.\n",
    );
    let output = env
        .command(&ingest_args(&env, &[]))
        .env("GROUNDIDX_CRASH_AT", "store.after_ledger_commit")
        .output()
        .expect("run groundidx");
    crate::crash::assert_crashed_at(&output, "store.after_ledger_commit");
    assert!(env.store.join("ledger.sqlite-wal").exists());
    let clean = clean_export(&env.docs);

    tmpfs.remount("ro");
    let export = env.run(&["export"]);
    assert_read(&export, &["export"], 0);
    assert_eq!(
        crate::support::parse_export(&text(&export.stdout)),
        clean,
        "the export lacks the commit in the write-ahead log"
    );
    let status = env.run(&["status"]);
    assert_read(&status, &["status"], 0);
    assert!(
        text(&status.stdout).contains("behind"),
        "status must say the index lags: {}",
        text(&status.stdout)
    );
    let (_, stderr) = search_ids(&env, "zebra crossing");
    assert!(
        stderr.contains("behind the ledger"),
        "search must say the index lags: {stderr}"
    );
    let verify = env.run(&["verify", "--json"]);
    assert_read(&verify, &["verify"], 1);
    let report: Value = serde_json::from_slice(&verify.stdout).expect("verify JSON");
    assert_eq!(report["lag_only"], true, "{report}");

    // Without its `-shm` file the log cannot be read on a read-only mount: refused with the
    // cause and the fix, which works.
    tmpfs.remount("rw");
    std::fs::remove_file(env.store.join("ledger.sqlite-shm")).expect("remove the -shm file");
    tmpfs.remount("ro");
    let output = env.run(&["export"]);
    let stderr = assert_clear_failure(&output, &env.store, &["read-only file system"]);
    assert!(
        !stderr.contains("unable to open database file") && stderr.contains("hint: "),
        "{stderr}"
    );
    tmpfs.remount("rw");
    assert_read(&env.run(&["status"]), &["status"], 0);
    tmpfs.remount("ro");
    assert_eq!(env.export(), clean);

    tmpfs.remount("rw");
    assert_heals(&env, &[], &clean);
}

// ---------------------------------------------------------------------------------------------
// A ledger locked by another connection.

/// Another connection holding the ledger's write lock (`BEGIN EXCLUSIVE`) until dropped.
struct LedgerLock(rusqlite::Connection);

impl LedgerLock {
    fn take(store: &Path) -> LedgerLock {
        let conn = rusqlite::Connection::open(store.join("ledger.sqlite")).expect("open");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("busy timeout");
        conn.execute_batch("BEGIN EXCLUSIVE")
            .expect("take the write lock");
        LedgerLock(conn)
    }
}

impl Drop for LedgerLock {
    fn drop(&mut self) {
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

#[test]
fn a_locked_ledger_makes_ingest_wait_or_fail_retryably_and_loses_nothing() {
    let env = Env::sample();
    env.ingest();
    env.write(
        "new/added.md",
        "# Added\n\nA document added while the ledger is locked.\n",
    );
    let before = env.export();

    // Locked for longer than the ingest waits: a retryable error, and nothing written.
    let lock = LedgerLock::take(&env.store);
    let output = env.run(&ingest_args(&env, &[]));
    drop(lock);
    let stderr = assert_clear_failure(&output, &env.store, &["busy"]);
    assert_eq!(
        output.status.code(),
        Some(75),
        "busy is retryable: {stderr}"
    );
    assert!(
        stderr.contains("retry"),
        "the error must say to retry: {stderr}"
    );
    env.assert_verified();
    assert_eq!(env.export(), before, "the refused run changed the store");

    // Locked for a moment: the ingest waits, then completes. "ingest planned" is logged just
    // before the run's first ledger write, which cannot finish while the lock is held.
    let lock = LedgerLock::take(&env.store);
    let mut child = env
        .command(&ingest_args(&env, &["-v"]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ingest");
    let stderr = crate::support::await_line(child.stderr.take().expect("stderr"), "ingest planned");
    let waiting = child.try_wait().expect("poll the ingest").is_none();
    drop(lock);
    let output = child.wait_with_output().expect("wait for the ingest");
    let stderr = stderr.join().expect("stderr reader");
    assert!(
        output.status.success(),
        "an ingest that met a briefly locked ledger failed: {stderr}"
    );
    assert!(
        waiting,
        "the ingest ended while the ledger was locked: {stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("ingest JSON");
    assert_eq!(report["documents"]["added"], 1, "{report}");
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
}

/// A read-only bind mount of a writable file system (`docker run -v DIR:DIR:ro`) can change
/// under a reader through its other mount: the ledger there is never opened as immutable (a
/// writer's checkpoint would give such a reader torn pages). With no write-ahead log to read
/// it by, a reader is refused with the cause and the fix, never "unable to open database file".
#[test]
fn a_read_only_bind_mount_of_a_writable_file_system_is_never_read_as_immutable() {
    let mut env = Env::sample();
    let disk = env.tmp.path().join("disk");
    let Some(_tmpfs) = Tmpfs::mount(&disk, 64 << 20, "the read-only bind mount test") else {
        return;
    };
    env.store = disk.join("store");
    env.ingest();
    let view = env.tmp.path().join("view");
    std::fs::create_dir_all(&view).expect("create the bind mount point");
    let bind = |args: &[&str]| {
        let output = Command::new("mount")
            .args(args)
            .output()
            .expect("run mount");
        assert!(
            output.status.success(),
            "mount {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let disk_arg = disk.to_str().expect("a UTF-8 temp path");
    let view_arg = view.to_str().expect("a UTF-8 temp path");
    bind(&["--bind", disk_arg, view_arg]);
    let _unmount = Unmount(view.clone());
    bind(&["-o", "remount,bind,ro", view_arg]);
    let reader = Env {
        tmp: tempfile::tempdir().expect("temp dir"),
        docs: env.docs.clone(),
        store: view.join("store"),
    };
    assert!(!env.store.join("ledger.sqlite-wal").exists());
    let refused = reader.run(&["search", "signing key", "--json"]);
    let stderr = text(&refused.stderr);
    assert_ne!(refused.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("bind mount") && stderr.contains("hint:"),
        "the refusal names the cause and the fix: {stderr}"
    );
    assert!(!stderr.contains("unable to open database file"), "{stderr}");
}

/// Unmounts a bind mount (lazily) when a test ends, however it ends.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
