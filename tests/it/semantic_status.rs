//! Every answer says the mode it used and why: when a store that has an embedding model answers
//! by words only, or with some chunks not embedded, `semantic.reason` names why with one code of
//! a closed set (`model_missing`, `model_changed`, `model_unreadable`, `embedding_incomplete`,
//! …) on every surface: `search --json` (with one warning line on stderr), MCP `search_docs`,
//! the HTTP JSON API, `/health` and `status --json`. A running server's `/health` follows the
//! model the store makes active.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::recorded_model::{model_copy, small_env};
use crate::support::embed_server::model_dir;
use crate::support::http::serve;
use crate::support::mcp::Mcp;
use crate::support::{Env, assert_success};

/// A small store ingested with a copy of the real model (links to its files), and the copy.
fn embedded_store() -> Option<(Env, std::path::PathBuf)> {
    let real = model_dir()?;
    let env = small_env();
    let model = model_copy(&env, &real);
    let docs = env.docs.to_str().expect("utf-8");
    env.json(&[
        "ingest",
        docs,
        "--json",
        "--embed-model",
        model.to_str().expect("utf-8"),
    ]);
    Some((env, model))
}

/// Replaces a linked file of the model copy with a file of its own holding `bytes`.
fn replace_model_file(model: &Path, name: &str, bytes: &[u8]) {
    let path = model.join(name);
    std::fs::remove_file(&path).expect("remove the link");
    std::fs::write(&path, bytes).expect("write the model file");
}

/// `search --json` answers by words only with this reason, says so in one warning line on
/// stderr (the mode, why, the coverage and a hint), and `status --json`, MCP `search_docs`,
/// the HTTP API and `/health` carry the same reason.
async fn assert_reason_everywhere(env: &Env, state: &str, reason: &str, mode: &str) {
    let args = ["search", "undo a release", "--json"];
    let output = env.run(&args);
    assert_success(&output, &args);
    let answer: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(answer["mode"], mode, "{answer}");
    assert_eq!(answer["semantic"]["state"], state, "{answer}");
    assert_eq!(answer["semantic"]["reason"], reason, "{answer}");
    assert!(answer["semantic"]["message"].is_string(), "{answer}");
    assert!(answer["semantic"]["hint"].is_string(), "{answer}");
    assert_eq!(answer["semantic"]["coverage"], answer["semantic_coverage"]);
    assert!(
        !answer["hits"].as_array().expect("hits").is_empty(),
        "{answer}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one warning line: {stderr}");
    let coverage = format!(
        "({} of {} chunks embedded)",
        answer["semantic_coverage"]["vectors"], answer["semantic_coverage"]["chunks"]
    );
    assert!(
        lines[0].starts_with("warning: ")
            && lines[0].contains(&coverage)
            && lines[0].contains("; hint: "),
        "{stderr}"
    );

    let status = env.json(&["status", "--json"]);
    assert_eq!(status["semantic"]["reason"], reason, "{status}");
    assert_eq!(status["semantic"]["state"], state, "{status}");
    assert_eq!(status["mode"], mode, "{status}");

    let mcp = Mcp::start(env, &[]).await;
    let called = mcp
        .search("k-reason", json!({"query": "undo a release"}))
        .await;
    called.assert_fresh();
    assert_eq!(called.structured["mode"], mode, "{}", called.raw);
    assert_eq!(
        called.structured["semantic"]["reason"], reason,
        "{}",
        called.raw
    );
    mcp.stop().await;

    let server = serve(env, &[]);
    let health = server.get("/health");
    assert_eq!(health.status, 200, "{health}");
    let health = health.json();
    assert_eq!(health["mode"], mode, "{health}");
    assert_eq!(health["semantic"]["reason"], reason, "{health}");
    let answer = server
        .search(None, &json!({"query": "undo a release"}).to_string())
        .json();
    assert_eq!(answer["semantic"]["reason"], reason, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_model_folder_is_model_missing() {
    let Some((env, model)) = embedded_store() else {
        return;
    };
    std::fs::rename(&model, env.tmp.path().join("moved")).expect("move the model");
    assert_reason_everywhere(&env, "off", "model_missing", "lexical").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_models_files_in_its_place_are_model_changed() {
    let Some((env, model)) = embedded_store() else {
        return;
    };
    // Another model's configuration: the folder still loads, as another model.
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(model.join("config.json")).expect("read config"))
            .expect("config.json is JSON");
    config["_name_or_path"] = json!("another-model");
    replace_model_file(&model, "config.json", config.to_string().as_bytes());
    assert_reason_everywhere(&env, "off", "model_changed", "lexical").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_weights_file_is_model_unreadable() {
    let Some((env, model)) = embedded_store() else {
        return;
    };
    // A download cut short: the first megabyte of the weights.
    let weights = std::fs::read(model.join("model.safetensors")).expect("read the weights");
    replace_model_file(&model, "model.safetensors", &weights[..1 << 20]);
    assert_reason_everywhere(&env, "off", "model_unreadable", "lexical").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_ingest_that_could_not_embed_is_embedding_incomplete() {
    let Some((env, model)) = embedded_store() else {
        return;
    };
    // The model away while a plain ingest runs: its lexical part commits, a chunk stays
    // without a vector; then the model is back.
    let moved = env.tmp.path().join("moved");
    std::fs::rename(&model, &moved).expect("move the model");
    env.write("alerts.md", "# Alerts\n\nPage the on-call engineer.\n");
    let failed = env.run(&["ingest", env.docs.to_str().expect("utf-8"), "--quiet"]);
    assert_eq!(failed.status.code(), Some(1), "{failed:?}");
    std::fs::rename(&moved, &model).expect("move the model back");
    assert_reason_everywhere(&env, "partial", "embedding_incomplete", "hybrid").await;
}

#[test]
fn a_full_hybrid_search_prints_nothing_and_lexical_asked_is_no_warning() {
    let Some((env, _model)) = embedded_store() else {
        return;
    };
    let full = env.run(&["search", "undo a release", "--json"]);
    assert_success(&full, &["search"]);
    assert!(full.stderr.is_empty(), "{full:?}");
    let answer: Value = serde_json::from_slice(&full.stdout).expect("JSON");
    assert_eq!(answer["semantic"]["state"], "on", "{answer}");
    assert_eq!(answer["semantic"]["reason"], Value::Null, "{answer}");
    let lexical = env.run(&["search", "undo a release", "--json", "--mode", "lexical"]);
    assert!(lexical.stderr.is_empty(), "{lexical:?}");
    let answer: Value = serde_json::from_slice(&lexical.stdout).expect("JSON");
    assert_eq!(answer["semantic"]["reason"], "lexical_asked", "{answer}");
}

#[test]
fn health_follows_the_model_the_store_makes_active() {
    let Some((env, model)) = embedded_store() else {
        return;
    };
    let server = serve(&env, &[]);
    let health = server.get("/health").json();
    assert_eq!(health["mode"], "hybrid", "{health}");
    assert_eq!(health["semantic"]["state"], "on", "{health}");

    // Another model becomes active: the server loads it, and /health names it.
    let other = env.tmp.path().join("other-model");
    std::fs::create_dir(&other).expect("create the other model");
    for entry in std::fs::read_dir(&model).expect("read the model copy") {
        let entry = entry.expect("a model file");
        let target = std::fs::read_link(entry.path()).expect("a link");
        std::os::unix::fs::symlink(target, other.join(entry.file_name())).expect("link");
    }
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(other.join("config.json")).expect("read config"))
            .expect("config.json is JSON");
    config["_name_or_path"] = json!("another-model");
    replace_model_file(&other, "config.json", config.to_string().as_bytes());
    let embedded = env.json(&[
        "embed",
        "--json",
        "--embed-model",
        other.to_str().expect("utf-8"),
    ]);
    assert_eq!(embedded["active"], true, "{embedded}");
    let other_path = other.canonicalize().expect("canonical");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = server.get("/health").json();
        if health["semantic"]["model"] == other_path.to_str().expect("utf-8") {
            assert_eq!(health["mode"], "hybrid", "{health}");
            assert_eq!(health["semantic"]["state"], "on", "{health}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/health still names the old model: {health}\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Its folder gone, the server still embeds queries with the model it holds: hybrid, and
    // /health says so; a server started now cannot load it, and its /health says why.
    std::fs::rename(&other, env.tmp.path().join("gone")).expect("move the model");
    let health = server.get("/health").json();
    assert_eq!(health["semantic"]["state"], "on", "{health}");
    let answer = server
        .search(None, &json!({"query": "undo a release"}).to_string())
        .json();
    assert_eq!(answer["mode"], "hybrid", "{answer}");
    let restarted = serve(&env, &[]);
    let health = restarted.get("/health").json();
    assert_eq!(health["mode"], "lexical", "{health}");
    assert_eq!(health["semantic"]["reason"], "model_missing", "{health}");
}
