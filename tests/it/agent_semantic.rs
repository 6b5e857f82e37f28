//! `search_docs` by meaning over both transports: `mode` in the arguments, `mode` and
//! `semantic_coverage` in every answer, the model loaded once per server (the embeddings server
//! counts the probe a load sends), a replay that embeds nothing, pages that continue in the
//! mode and on the vectors they began with, and clear refusals.

use serde_json::json;

use crate::support::Env;
use crate::support::embed_server::{EmbedServer, Vectors};
use crate::support::http::serve;
use crate::support::mcp::Mcp;

/// A sample store with every chunk embedded through `server` under model `words`.
fn embedded_store(server: &EmbedServer) -> Env {
    let env = Env::sample();
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let flags = server.flags("words");
    let mut args: Vec<&str> = vec!["ingest", &docs, "--json"];
    args.extend(flags.iter().map(String::as_str));
    env.json(&args);
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_searches_by_meaning_with_a_model_loaded_once() {
    let server = EmbedServer::start(Vectors::Words);
    let env = embedded_store(&server);
    let flags = server.flags("words");
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let before = server.inputs();
    let mcp = Mcp::start(&env, &args).await;
    for (i, mode) in ["semantic", "hybrid", "lexical"].iter().enumerate() {
        let called = mcp
            .search(
                &format!("k-{i}"),
                json!({"query": "rotate the signing key", "mode": mode, "top_k": 3}),
            )
            .await;
        called.assert_fresh();
        assert_eq!(called.structured["mode"], *mode, "{}", called.raw);
        let coverage = &called.structured["semantic_coverage"];
        assert_eq!(coverage["vectors"], coverage["chunks"], "{}", called.raw);
        assert!(
            !called.structured["hits"]
                .as_array()
                .expect("hits")
                .is_empty()
        );
    }
    // No mode: hybrid, since the store has vectors and the model is loaded.
    let default = mcp
        .search("k-default", json!({"query": "rotate the signing key"}))
        .await;
    assert_eq!(default.structured["mode"], "hybrid", "{}", default.raw);
    // One probe when the server loaded the model, then one query per semantic or hybrid call.
    assert_eq!(server.inputs() - before, 1 + 3);
    // A replay answers from the record: nothing reaches the model.
    let replay = mcp
        .search(
            "k-0",
            json!({"query": "rotate the signing key", "mode": "semantic", "top_k": 3}),
        )
        .await;
    assert_eq!(replay.replayed(), &json!(true), "{}", replay.raw);
    assert_eq!(server.inputs() - before, 1 + 3);
    let bad = mcp
        .search("k-bad", json!({"query": "keys", "mode": "fuzzy"}))
        .await;
    bad.assert_error("invalid_arguments");
    assert!(bad.text.contains("mode"), "{}", bad.raw);
    mcp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semantic_mode_on_a_store_without_vectors_is_refused_and_writes_nothing() {
    let env = Env::sample();
    env.ingest();
    let mcp = Mcp::start(&env, &[]).await;
    let refused = mcp
        .search("k-1", json!({"query": "keys", "mode": "semantic"}))
        .await;
    refused.assert_error("invalid_arguments");
    assert!(refused.text.contains("no vectors"), "{}", refused.raw);
    let lexical = mcp.search("k-2", json!({"query": "keys"})).await;
    lexical.assert_fresh();
    assert_eq!(lexical.structured["mode"], "lexical");
    assert_eq!(lexical.structured["semantic_coverage"]["vectors"], 0);
    mcp.stop().await;
    let status = env.json(&["status", "--json"]);
    assert_eq!(
        status["audit_events"], 1,
        "only the executed call is logged: {status}"
    );
    assert_eq!(status["usage_units"], 1, "{status}");
}

#[test]
fn http_pages_continue_in_the_mode_and_on_the_vectors_they_began_with() {
    let embedder = EmbedServer::start(Vectors::Words);
    let env = embedded_store(&embedder);
    let flags = embedder.flags("words");
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = serve(&env, &args);
    let first = server
        .search(
            Some("p-1"),
            r#"{"query": "keys deploys backups support", "mode": "hybrid", "top_k": 2}"#,
        )
        .json();
    assert_eq!(first["mode"], "hybrid", "{first}");
    let cursor = first["next_cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no next page: {first}"))
        .to_string();
    let body = json!({
        "query": "keys deploys backups support",
        "mode": "hybrid",
        "top_k": 2,
        "cursor": cursor
    })
    .to_string();
    let second = server.search(Some("p-2"), &body).json();
    assert_eq!(second["mode"], "hybrid", "{second}");
    let ids = |page: &serde_json::Value| -> Vec<String> {
        page["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["chunk_id"].as_str().expect("id").to_string())
            .collect()
    };
    let (a, b) = (ids(&first), ids(&second));
    assert!(!b.is_empty());
    assert!(
        a.iter().all(|id| !b.contains(id)),
        "a hit came back on the next page"
    );
    // The same pages as one search of four.
    let whole = server
        .search(
            Some("p-3"),
            r#"{"query": "keys deploys backups support", "mode": "hybrid", "top_k": 4}"#,
        )
        .json();
    let all: Vec<String> = a.into_iter().chain(b).collect();
    assert_eq!(ids(&whole), all);
}
