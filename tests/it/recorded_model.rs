//! A store that has an embedding model keeps using it: a relative `--embed-model` is recorded so
//! that `search` and `mcp` find it from any folder (an older store's relative path is found
//! beside the store), a later plain `ingest` and a plain `embed`
//! embed with the recorded model, and a recorded model folder that is gone makes the plain run
//! fail with a clear error after its lexical part committed, never leave chunks unembedded in
//! silence.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::embedding::active_model;
use crate::support::embed_server::model_dir;
use crate::support::mcp::Mcp;
use crate::support::{Env, assert_success};

/// A store of two short documents (few chunks: the real model is slow in a debug build).
pub fn small_env() -> Env {
    let env = Env::empty();
    env.write(
        "deploys.md",
        "# Deploys\n\nTo undo a release, redeploy the previous tag.\n",
    );
    env.write(
        "keys.md",
        "# Keys\n\nRotate the signing key every ninety days.\n",
    );
    env
}

/// A folder of its own that holds links to every file of the real model, so a test can move
/// or remove it without touching the shared one.
pub fn model_copy(env: &Env, real: &Path) -> PathBuf {
    let copy = env.tmp.path().join("model");
    std::fs::create_dir_all(&copy).expect("create the model folder");
    for entry in std::fs::read_dir(real).expect("read the model folder") {
        let entry = entry.expect("a model file");
        std::os::unix::fs::symlink(entry.path(), copy.join(entry.file_name()))
            .expect("link a model file");
    }
    copy
}

/// `groundidx --store STORE ARGS…` run from `cwd`.
fn run_in(env: &Env, cwd: &Path, args: &[&str]) -> Output {
    env.command(args)
        .current_dir(cwd)
        .output()
        .expect("run groundidx")
}

fn json_in(env: &Env, cwd: &Path, args: &[&str]) -> Value {
    let output = run_in(env, cwd, args);
    assert_success(&output, args);
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

/// The active model's coverage as `status --json` reports it: (vectors, chunks).
fn coverage(env: &Env) -> (u64, u64) {
    let (_, vectors, chunks) = active_model(env);
    (vectors, chunks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_model_path_is_found_from_any_folder() {
    let Some(real) = model_dir() else { return };
    let env = small_env();
    let docs = env.docs.to_str().expect("utf-8");
    model_copy(&env, &real);
    // As the README's first run does: the model named relative to the current folder.
    let first = json_in(
        &env,
        env.tmp.path(),
        &["ingest", docs, "--json", "--embed-model", "./model"],
    );
    assert_eq!(
        first["embedding"]["vectors"], first["embedding"]["chunks"],
        "{first}"
    );
    // Another current folder, as an MCP client starts the server from its own.
    let elsewhere = env.docs.clone();
    let answer = json_in(&env, &elsewhere, &["search", "undo a release", "--json"]);
    assert_eq!(answer["mode"], "hybrid", "{answer}");
    // The test process's own folder is not the one the model was named from either.
    let mcp = Mcp::start(&env, &[]).await;
    let called = mcp
        .search("k-relative", json!({"query": "undo a release"}))
        .await;
    assert_eq!(called.structured["mode"], "hybrid", "{}", called.raw);
    mcp.stop().await;
}

#[test]
fn a_plain_ingest_and_embed_use_the_recorded_model_or_fail_clearly() {
    let Some(real) = model_dir() else { return };
    let env = small_env();
    let docs = env.docs.to_str().expect("utf-8");
    let model = model_copy(&env, &real);
    let model_arg = model.to_str().expect("utf-8");
    env.json(&["ingest", docs, "--json", "--embed-model", model_arg]);
    let (vectors, chunks) = coverage(&env);
    assert_eq!(vectors, chunks);

    // A plain ingest, as the README's cron line runs it, embeds the new chunk.
    env.write(
        "backups.md",
        "# Backups\n\nSnapshots are kept for a week.\n",
    );
    let plain = env.json(&["ingest", docs, "--json"]);
    assert_eq!(plain["embedding"]["embedded"], 1, "{plain}");
    assert_eq!(coverage(&env), (chunks + 1, chunks + 1));

    // The recorded folder gone: the plain run fails and says which folder and what to do,
    // after its lexical part committed (nothing is lost).
    let moved = env.tmp.path().join("moved");
    std::fs::rename(&model, &moved).expect("move the model");
    env.write("alerts.md", "# Alerts\n\nPage the on-call engineer.\n");
    let failed = env.run(&["ingest", docs, "--json"]);
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains(model_arg), "names the folder: {stderr}");
    assert!(
        stderr.contains("--embed-model"),
        "says what to do: {stderr}"
    );
    let lexical = env.json(&["search", "on-call", "--json", "--mode", "lexical"]);
    assert_eq!(
        lexical["hits"][0]["paths"][0], "alerts.md",
        "the lexical part committed: {lexical}"
    );
    assert_eq!(coverage(&env), (chunks + 1, chunks + 2));
    let verify = env.run(&["verify", "--json"]);
    let report: Value = serde_json::from_slice(&verify.stdout).expect("verify JSON");
    assert_eq!(report["ledger_chunks"], chunks + 2, "{report}");
    // `embed` with no flag fails the same way while the folder is gone.
    let refused = env.run(&["embed"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(model_arg),
        "{refused:?}"
    );

    // The folder back: `embed` with no flag embeds the missing chunk with the recorded model.
    std::fs::rename(&moved, &model).expect("move the model back");
    let embedded = env.json(&["embed", "--json"]);
    assert_eq!(embedded["embedded"], 1, "{embedded}");
    assert_eq!(coverage(&env), (chunks + 2, chunks + 2));
    env.assert_verified();
}

#[test]
fn an_older_stores_relative_model_path_is_found_beside_the_store() {
    let Some(real) = model_dir() else { return };
    let env = small_env();
    let docs = env.docs.to_str().expect("utf-8");
    let model = model_copy(&env, &real);
    env.json(&[
        "ingest",
        docs,
        "--json",
        "--embed-model",
        model.to_str().expect("utf-8"),
    ]);
    // An older groundidx recorded the folder as given, relative to the folder it ran in: here
    // the store's parent folder.
    let ledger = rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("open");
    let changed = ledger
        .execute(
            "UPDATE embedding_models SET description = json_set(description, '$.path', 'model')",
            [],
        )
        .expect("record a relative path");
    assert_eq!(changed, 1);
    drop(ledger);
    let answer = json_in(&env, &env.docs, &["search", "undo a release", "--json"]);
    assert_eq!(answer["mode"], "hybrid", "{answer}");
    env.write("alerts.md", "# Alerts\n\nPage the on-call engineer.\n");
    let plain = json_in(&env, &env.docs, &["ingest", docs, "--json"]);
    assert_eq!(plain["embedding"]["embedded"], 1, "{plain}");
    let (vectors, chunks) = coverage(&env);
    assert_eq!(vectors, chunks);
}
