//! The agent tool over MCP stdio (`groundidx mcp`), driven by the rmcp client and, where the
//! exact bytes on the wire matter, by a raw JSON-RPC line client: key intake (K1–K5, K7),
//! replays (R1, R2, R6), mismatches (M1–M3), busy and crashes (C3–C5), failures (E1, E2), the
//! quota (Q1, Q3), the MCP surface (P1–P3, P5) and the published key policy (T5).

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use serde_json::{Value, json};

use crate::support::Env;
use crate::support::ledger::{
    WriteLock, assert_executed_once, assert_nothing_for, counts, executed, key_row, ledger,
};
use crate::support::mcp::{
    Called, Mcp, RawMcp, backups, frozen_clock, key, read_lossy, sample_store, schema_errors,
    signing,
};

fn hits(called: &Called) -> &Vec<Value> {
    called.structured["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits array: {}", called.raw))
}

const SCOPE: &str = "local";

// ---------------------------------------------------------------------------------------------
// K: key intake.

#[tokio::test]
async fn k1_meta_key_executes_once_and_is_audited() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let arguments = json!({"query": "rotate the signing key", "top_k": 3});
    let result = mcp.search("r1/s1/c1", arguments.clone()).await;
    result.assert_fresh();
    assert_eq!(result.key(), "r1/s1/c1", "{}", result.raw);
    assert_eq!(
        result.meta["groundidx/keySource"], "caller",
        "{}",
        result.raw
    );
    assert!(!hits(&result).is_empty(), "{}", result.raw);
    mcp.stop().await;

    assert_executed_once(&env.store, SCOPE, "r1/s1/c1");
    assert_eq!(counts(&env.store), executed(1));
    let audit = env.json(&["audit", "--json"]);
    let events = audit["events"].as_array().expect("events");
    assert_eq!(events.len(), 1, "{audit}");
    let event = &events[0];
    assert_eq!(event["scope"], SCOPE, "{event}");
    assert_eq!(event["key"], "r1/s1/c1", "{event}");
    assert_eq!(event["key_source"], "caller", "{event}");
    assert_eq!(event["tool"], "search_docs", "{event}");
    assert_eq!(
        event["index_generation"], result.structured["generation"],
        "{event}"
    );
    let logged: Value =
        serde_json::from_str(event["arguments"].as_str().expect("arguments is a string"))
            .expect("arguments is canonical JSON");
    assert_eq!(logged, arguments, "{event}");
}

#[tokio::test]
async fn k2_run_id_and_step_make_the_key() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let meta = json!({"groundidx/runId": "r1", "groundidx/step": "s1/c1"});
    let first = mcp.call("search_docs", signing(), meta.clone()).await;
    first.assert_fresh();
    assert_eq!(first.key(), r#"["r1", "s1/c1"]"#, "{}", first.raw);
    let again = mcp.call("search_docs", signing(), meta).await;
    assert_eq!(again.replayed(), &json!(true), "{}", again.raw);
    assert_eq!(again.text, first.text);
    // The pair is not the direct key "r1/s1/c1": that one is a call of its own.
    let direct = mcp.search("r1/s1/c1", signing()).await;
    direct.assert_fresh();
    mcp.stop().await;
    assert_executed_once(&env.store, SCOPE, r#"["r1", "s1/c1"]"#);
    assert_executed_once(&env.store, SCOPE, "r1/s1/c1");
    assert_eq!(counts(&env.store), executed(2));
}

#[tokio::test]
async fn k3_run_id_or_step_alone_is_invalid() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    for meta in [
        json!({"groundidx/runId": "r1"}),
        json!({"groundidx/step": "s1/c1"}),
    ] {
        let result = mcp.call("search_docs", signing(), meta.clone()).await;
        result.assert_error("idempotency_key_invalid");
    }
    mcp.stop().await;
    assert_eq!(counts(&env.store), executed(0));
}

#[tokio::test]
async fn k4_bad_keys_are_refused_and_nothing_is_written() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let long = "k".repeat(256);
    for bad in [
        long.as_str(),
        "",
        "a b",
        "a\tb",
        "caf\u{e9}",
        "a\u{7f}",
        "nl\n",
    ] {
        let result = mcp.search(bad, signing()).await;
        result.assert_error("idempotency_key_invalid");
    }
    assert_eq!(
        counts(&env.store),
        executed(0),
        "a refused key wrote something"
    );
    // The limits themselves are valid: 255 characters, and every visible ASCII character.
    let longest = "k".repeat(255);
    mcp.search(&longest, signing()).await.assert_fresh();
    let visible: String = (0x21u8..=0x7e).map(char::from).collect();
    mcp.search(&visible, signing()).await.assert_fresh();
    mcp.stop().await;
    assert_executed_once(&env.store, SCOPE, &longest);
    assert_executed_once(&env.store, SCOPE, &visible);
}

#[tokio::test]
async fn k5_no_key_executes_under_a_server_key_every_time() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let first = mcp.call("search_docs", signing(), Value::Null).await;
    let second = mcp.call("search_docs", signing(), Value::Null).await;
    mcp.stop().await;
    let mut keys = Vec::new();
    for result in [&first, &second] {
        result.assert_fresh();
        assert_eq!(
            result.meta["groundidx/keySource"], "server",
            "{}",
            result.raw
        );
        let k = result.key().as_str().expect("a key").to_string();
        assert!(k.starts_with("srv-"), "{}", result.raw);
        keys.push(k);
    }
    assert_ne!(keys[0], keys[1], "each unkeyed call gets a fresh key");
    assert_eq!(first.structured, second.structured);
    assert_eq!(counts(&env.store), executed(2), "counted again");
    for k in &keys {
        assert_executed_once(&env.store, SCOPE, k);
        let source: String = ledger(&env.store)
            .query_row(
                "SELECT key_source FROM audit_events WHERE scope = ?1 AND key = ?2",
                [SCOPE, k.as_str()],
                |row| row.get(0),
            )
            .expect("audit row");
        assert_eq!(source, "server");
    }
}

#[tokio::test]
async fn k7_same_key_in_two_scopes_is_independent() {
    let env = sample_store();
    let a = Mcp::start(&env, &["--client-id", "client-a"]).await;
    let b = Mcp::start(&env, &["--client-id", "client-b"]).await;
    let from_a = a.search("shared/key", signing()).await;
    let from_b = b.search("shared/key", signing()).await;
    // Different arguments under the same key in a third scope: no mismatch across scopes.
    let c = Mcp::start(&env, &["--client-id", "client-c"]).await;
    let from_c = c.search("shared/key", backups()).await;
    a.stop().await;
    b.stop().await;
    c.stop().await;
    from_a.assert_fresh();
    from_b.assert_fresh();
    from_c.assert_fresh();
    for scope in ["client-a", "client-b", "client-c"] {
        assert_executed_once(&env.store, scope, "shared/key");
    }
    assert_eq!(counts(&env.store), executed(3));
}

// ---------------------------------------------------------------------------------------------
// R: replays.

#[tokio::test]
async fn r1_replay_returns_first_answer_and_writes_nothing() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let first = mcp.search("r1/s1/c1", signing()).await;
    first.assert_fresh();
    let replay = mcp.search("r1/s1/c1", signing()).await;
    mcp.stop().await;
    assert!(!replay.is_error, "{}", replay.raw);
    assert_eq!(replay.replayed(), &json!(true), "{}", replay.raw);
    assert_eq!(replay.key(), "r1/s1/c1");
    assert_eq!(replay.text, first.text, "content must be byte-identical");
    assert_eq!(replay.raw["content"], first.raw["content"]);
    assert_eq!(replay.structured, first.structured);
    assert_eq!(counts(&env.store), executed(1));
    let usage = env.json(&["usage", "--json"]);
    assert_eq!(usage["total_units"], 1, "{usage}");
}

#[tokio::test]
async fn r2_replay_keeps_its_generation_after_the_index_moves() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let first = mcp.search("r2", signing()).await;
    first.assert_fresh();
    let old = first.structured["generation"].as_u64().expect("generation");

    let path = env.docs.join("handbook/key-rotation.md");
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, text.replace("90 days", "45 days")).expect("edit");
    env.write(
        "new/rotation-notes.md",
        "# Rotation notes\n\nRotate the signing key with care.\n",
    );
    let report = env.ingest();
    let new = report["generation"].as_u64().expect("ingest generation");
    assert!(new > old, "{report}");

    // The server sees the new generation (fresh keys, so fresh searches)...
    let started = Instant::now();
    let mut seen = old;
    let mut i = 0;
    while seen != new && started.elapsed() < Duration::from_secs(5) {
        i += 1;
        let fresh = mcp.search(&format!("r2/poll/{i}"), signing()).await;
        fresh.assert_fresh();
        seen = fresh.structured["generation"].as_u64().expect("generation");
        if seen != new {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert_eq!(seen, new, "the server never saw the new generation");
    // ...but the replay is the stored first answer.
    let replay = mcp.search("r2", signing()).await;
    mcp.stop().await;
    assert_eq!(replay.replayed(), &json!(true), "{}", replay.raw);
    assert_eq!(replay.text, first.text);
    assert_eq!(replay.structured["generation"], old, "{}", replay.raw);
    let (_, _, _, generation, _, _) = key_row(&env.store, SCOPE, "r2").expect("key record");
    assert_eq!(generation as u64, old);
    assert_executed_once(&env.store, SCOPE, "r2");
}

#[tokio::test]
async fn r6_business_error_is_stored_and_replayed() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let unknown = json!({"chunk_id": "0".repeat(64)});
    let first = mcp.call("get_chunk", unknown.clone(), key("r6")).await;
    first.assert_error("not_found");
    assert_eq!(first.replayed(), &json!(false), "{}", first.raw);
    assert_eq!(
        counts(&env.store),
        executed(1),
        "an executed business error is counted"
    );
    let replay = mcp.call("get_chunk", unknown, key("r6")).await;
    mcp.stop().await;
    assert!(replay.is_error, "{}", replay.raw);
    assert_eq!(replay.replayed(), &json!(true), "{}", replay.raw);
    assert_eq!(replay.text, first.text);
    assert_eq!(replay.structured, first.structured);
    assert_eq!(counts(&env.store), executed(1), "not counted twice");
}

// ---------------------------------------------------------------------------------------------
// M: mismatches.

#[tokio::test]
async fn m1_same_key_other_query_is_refused_and_writes_nothing() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let k = "run-77/step-3/call-1";
    mcp.search(k, signing()).await.assert_fresh();
    let before = key_row(&env.store, SCOPE, k).expect("key record");
    let other = mcp.search(k, backups()).await;
    mcp.stop().await;
    other.assert_error("idempotency_key_reused");
    assert!(
        other.text.contains(k),
        "the text must name the key: {}",
        other.raw
    );
    assert_eq!(
        counts(&env.store),
        executed(1),
        "a mismatch wrote something"
    );
    assert_eq!(
        key_row(&env.store, SCOPE, k),
        Some(before),
        "the stored record changed"
    );
}

#[tokio::test]
async fn m2_same_key_other_tool_is_refused() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let first = mcp.search("m2", signing()).await;
    first.assert_fresh();
    let chunk_id = hits(&first)[0]["chunk_id"].clone();
    let other = mcp
        .call("get_chunk", json!({"chunk_id": chunk_id}), key("m2"))
        .await;
    mcp.stop().await;
    other.assert_error("idempotency_key_reused");
    assert!(other.text.contains("m2"), "{}", other.raw);
    assert_eq!(counts(&env.store), executed(1));
}

#[tokio::test]
async fn m3_mismatch_never_poisons_the_key() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let first = mcp.search("m3", signing()).await;
    first.assert_fresh();
    mcp.search("m3", backups())
        .await
        .assert_error("idempotency_key_reused");
    let again = mcp.search("m3", signing()).await;
    mcp.stop().await;
    assert!(!again.is_error, "{}", again.raw);
    assert_eq!(again.replayed(), &json!(true), "{}", again.raw);
    assert_eq!(again.text, first.text);
    assert_eq!(counts(&env.store), executed(1));
}

// ---------------------------------------------------------------------------------------------
// C: busy and crashes.

#[tokio::test]
async fn c3_busy_ledger_is_a_busy_tool_error_and_a_retry_executes() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let lock = WriteLock::take(&env.store);
    let started = Instant::now();
    let busy = mcp.search("c3", signing()).await;
    let waited = started.elapsed();
    drop(lock);
    busy.assert_error("busy");
    let retry_after = busy.structured["error"]["retry_after_seconds"]
        .as_u64()
        .unwrap_or_else(|| panic!("retry_after_seconds: {}", busy.raw));
    assert!(retry_after >= 1, "{}", busy.raw);
    assert!(waited < Duration::from_secs(15), "busy took {waited:?}");
    assert_nothing_for(&env.store, SCOPE, "c3");
    let retry = mcp.search("c3", signing()).await;
    mcp.stop().await;
    retry.assert_fresh();
    assert_executed_once(&env.store, SCOPE, "c3");
}

/// A call to a server armed to abort at `point` fails (the server is gone).
async fn call_into_crash(env: &Env, point: &str, k: &str) {
    let mcp = Mcp::start_crashing(env, &[], Some(point)).await;
    let outcome = mcp.try_call("search_docs", signing(), key(k)).await;
    assert!(
        outcome.is_err(),
        "the server should have aborted at {point}: {:?}",
        outcome.map(|r| Called::of(&r).raw)
    );
    // Died there, not anywhere else: a crash point says so on stderr before it aborts.
    let stderr = read_lossy(&mcp.stderr);
    assert!(
        stderr.contains(&format!("groundidx: crash point {point} reached")),
        "the server died, but not at {point}; stderr: {stderr}"
    );
    mcp.stop().await;
}

#[tokio::test]
async fn c4_crash_before_commit_leaves_nothing_and_a_retry_executes_once() {
    let env = sample_store();
    call_into_crash(&env, "keys.before_commit", "c4").await;
    assert_eq!(
        counts(&env.store),
        executed(0),
        "an aborted transaction left rows"
    );
    let mcp = Mcp::start(&env, &[]).await;
    let retry = mcp.search("c4", signing()).await;
    mcp.stop().await;
    retry.assert_fresh();
    assert_executed_once(&env.store, SCOPE, "c4");
    assert_eq!(counts(&env.store), executed(1));
}

#[tokio::test]
async fn c5_crash_after_commit_replays_on_retry() {
    let env = sample_store();
    call_into_crash(&env, "keys.after_commit", "c5").await;
    assert_eq!(
        counts(&env.store),
        executed(1),
        "the commit was made before the abort"
    );
    let mcp = Mcp::start(&env, &[]).await;
    let retry = mcp.search("c5", signing()).await;
    mcp.stop().await;
    assert!(!retry.is_error, "{}", retry.raw);
    assert_eq!(retry.replayed(), &json!(true), "{}", retry.raw);
    assert!(!hits(&retry).is_empty(), "{}", retry.raw);
    assert_executed_once(&env.store, SCOPE, "c5");
    assert_eq!(counts(&env.store), executed(1));
}

// ---------------------------------------------------------------------------------------------
// E: failures.

#[tokio::test]
async fn e1_invalid_arguments_are_a_tool_error_and_not_stored() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    for (tool, arguments) in [
        ("search_docs", json!({"query": "signing", "top_k": 0})),
        ("search_docs", json!({"query": "signing", "top_k": 101})),
        ("search_docs", json!({"query": ""})),
        ("search_docs", json!({"top_k": 3})),
        ("search_docs", json!({"query": "signing", "bogus": true})),
        (
            "search_docs",
            json!({"query": "signing", "tags": "security"}),
        ),
        ("get_chunk", json!({"chunk_id": "../../etc/passwd"})),
        ("get_chunk", json!({})),
    ] {
        let result = mcp.call(tool, arguments.clone(), key("e1")).await;
        result.assert_error("invalid_arguments");
    }
    assert_eq!(
        counts(&env.store),
        executed(0),
        "invalid arguments were stored"
    );
    // The same key is free for the corrected call.
    let corrected = mcp
        .search("e1", json!({"query": "signing", "top_k": 3}))
        .await;
    mcp.stop().await;
    corrected.assert_fresh();
    assert_executed_once(&env.store, SCOPE, "e1");
}

#[tokio::test]
async fn e2_malformed_calls_are_json_rpc_errors() {
    let env = sample_store();
    // Through the rmcp client: an unknown tool.
    let mcp = Mcp::start(&env, &[]).await;
    match mcp.try_call("no_such_tool", json!({}), key("e2")).await {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code.0, -32602, "{error:?}"),
        other => panic!(
            "an unknown tool must be -32602: {:?}",
            other.map(|r| Called::of(&r).raw)
        ),
    }
    mcp.stop().await;

    // On the wire: no name, and arguments that are not an object.
    let mut raw = RawMcp::start(&env, &[], &[]);
    raw.initialize();
    let mut wrong = Vec::new();
    for (id, params) in [
        (
            1,
            json!({"arguments": {"query": "signing"}, "_meta": key("e2")}),
        ),
        (
            2,
            json!({"name": "search_docs", "arguments": "signing", "_meta": key("e2")}),
        ),
        (
            3,
            json!({"name": "search_docs", "arguments": ["signing"], "_meta": key("e2")}),
        ),
        (
            4,
            json!({"name": "nope", "arguments": {}, "_meta": key("e2")}),
        ),
    ] {
        let (response, _) = raw.request(id, "tools/call", params.clone());
        if response["error"]["code"] != -32602 {
            wrong.push(format!("tools/call {params} -> {response}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "malformed calls must be JSON-RPC -32602 errors:\n{}",
        wrong.join("\n")
    );
    // The server is still there.
    let (listed, _) = raw.request(5, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    drop(raw);
    assert_eq!(counts(&env.store), executed(0));
}

// ---------------------------------------------------------------------------------------------
// Q: quota.

#[tokio::test]
async fn q1_executed_call_consumes_exactly_one_unit() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    mcp.search("q1", signing()).await.assert_fresh();
    mcp.stop().await;
    assert_executed_once(&env.store, SCOPE, "q1");
    let usage = env.json(&["usage", "--json"]);
    assert_eq!(usage["total_units"], 1, "{usage}");
    let windows = usage["usage"].as_array().expect("usage");
    assert_eq!(windows.len(), 1, "{usage}");
    assert_eq!(windows[0]["client"], SCOPE, "{usage}");
    assert_eq!(windows[0]["units"], 1, "{usage}");
    let status = env.json(&["status", "--json"]);
    assert_eq!(status["usage_units"], 1, "{status}");
    assert_eq!(status["audit_events"], 1, "{status}");
    assert_eq!(status["idempotency_keys"], 1, "{status}");
}

#[tokio::test]
async fn q3_mcp_over_quota_is_a_rate_limited_tool_error() {
    let env = sample_store();
    // Both calls land in one quota window, 1 s into it, however long they take.
    let mcp = Mcp::start_with_env(&env, &["--rate-limit", "1/60s"], &frozen_clock()).await;
    let first = mcp.search("q3/a", signing()).await;
    first.assert_fresh();
    let refused = mcp.search("q3/b", signing()).await;
    refused.assert_error("rate_limited");
    let error = &refused.structured["error"];
    let seconds = error["retry_after_seconds"]
        .as_u64()
        .unwrap_or_else(|| panic!("retry_after_seconds: {}", refused.raw));
    assert_eq!(
        seconds, 59,
        "the window ends 59 s after the frozen time: {}",
        refused.raw
    );
    assert_eq!(error["policy"], "per-client", "{}", refused.raw);
    assert!(
        refused
            .text
            .contains(&format!("rate limit exceeded; retry after {seconds} s")),
        "{}",
        refused.raw
    );
    assert_nothing_for(&env.store, SCOPE, "q3/b");
    // Q2: the replay is still served.
    let replay = mcp.search("q3/a", signing()).await;
    mcp.stop().await;
    assert_eq!(replay.replayed(), &json!(true), "{}", replay.raw);
    assert_eq!(replay.text, first.text);
    assert_eq!(counts(&env.store), executed(1));
}

// ---------------------------------------------------------------------------------------------
// P: the MCP surface.

#[tokio::test]
async fn p1_tools_list_is_complete_and_deterministic() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let tools = mcp.client().list_all_tools().await.expect("tools/list");
    let again = mcp.client().list_all_tools().await.expect("tools/list");
    mcp.stop().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "search_docs",
            "get_chunk",
            "read_document",
            "list_documents"
        ]
    );
    assert_eq!(
        serde_json::to_value(&tools).expect("json"),
        serde_json::to_value(&again).expect("json"),
        "tools/list must be deterministic"
    );
    for (tool, required) in [
        (&tools[0], Some("query")),
        (&tools[1], Some("chunk_id")),
        (&tools[2], None),
        (&tools[3], None),
    ] {
        let json = serde_json::to_value(tool).expect("json");
        assert!(
            tool.title.as_deref().is_some_and(|t| !t.is_empty()),
            "{json}"
        );
        assert!(
            tool.description.as_deref().is_some_and(|d| !d.is_empty()),
            "{json}"
        );
        let input = Value::Object((*tool.input_schema).clone());
        assert_eq!(input["type"], "object", "{json}");
        assert_eq!(input["additionalProperties"], false, "{json}");
        let listed: &[Value] = input["required"].as_array().map_or(&[], |r| r.as_slice());
        match required {
            Some(required) => assert!(listed.contains(&json!(required)), "{json}"),
            None => assert!(listed.is_empty(), "{json}"),
        }
        if let Some(dialect) = input.get("$schema") {
            assert!(
                dialect.as_str().is_some_and(|d| d.contains("2020-12")),
                "{json}"
            );
        }
        let output = tool
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone()))
            .unwrap_or_else(|| panic!("no outputSchema: {json}"));
        assert_eq!(output["type"], "object", "{json}");
        let annotations = tool.annotations.as_ref().expect("annotations");
        assert_eq!(
            (
                annotations.read_only_hint,
                annotations.idempotent_hint,
                annotations.open_world_hint
            ),
            (Some(true), Some(true), Some(false)),
            "{json}"
        );
    }
    let search_input = Value::Object((*tools[0].input_schema).clone());
    for property in ["query", "top_k", "path_prefix", "tags"] {
        assert!(
            search_input["properties"].get(property).is_some(),
            "search_docs lacks {property}: {search_input}"
        );
    }
}

#[tokio::test]
async fn p2_structured_content_matches_the_output_schema() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let tools = mcp.client().list_all_tools().await.expect("tools/list");
    let schema_of = |name: &str| -> Value {
        let tool = tools.iter().find(|t| t.name == name).expect("listed");
        Value::Object((**tool.output_schema.as_ref().expect("outputSchema")).clone())
    };
    let search = mcp.search("p2/search", signing()).await;
    let chunk_id = hits(&search)[0]["chunk_id"].clone();
    let chunk = mcp
        .call("get_chunk", json!({"chunk_id": chunk_id}), key("p2/chunk"))
        .await;
    let read = mcp
        .call(
            "read_document",
            json!({"chunk_id": chunk_id, "around": 1}),
            key("p2/read"),
        )
        .await;
    let list = mcp
        .call("list_documents", json!({"limit": 3}), key("p2/list"))
        .await;
    mcp.stop().await;
    for (tool, result, required) in [
        (
            "search_docs",
            &search,
            ["generation", "last_ingest", "hits"],
        ),
        ("get_chunk", &chunk, ["generation", "last_ingest", "chunk"]),
        (
            "read_document",
            &read,
            ["generation", "document", "passages"],
        ),
        (
            "list_documents",
            &list,
            ["generation", "roots", "documents"],
        ),
    ] {
        assert!(!result.is_error, "{}", result.raw);
        assert_ne!(result.raw.get("isError"), Some(&json!(true)));
        let schema = schema_of(tool);
        // The answer's fields are required in the first branch of `oneOf`; the second is the
        // error shape (see `tool_errors`).
        for name in required {
            assert!(
                schema["oneOf"][0]["required"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!(name))),
                "{tool} outputSchema must require {name}: {schema}"
            );
        }
        let errors = schema_errors(&schema, &result.structured);
        assert!(
            errors.is_empty(),
            "{errors:#?}\nschema: {schema}\nresult: {}",
            result.raw
        );
        assert_eq!(result.raw["content"][0]["type"], "text", "{}", result.raw);
        let text: Value = serde_json::from_str(&result.text).expect("content[0] is JSON");
        assert_eq!(
            text, result.structured,
            "content[0] must hold structuredContent"
        );
    }
    assert_eq!(
        chunk.structured["chunk"]["chunk_id"], chunk_id,
        "{}",
        chunk.raw
    );
}

/// The output-schema check itself: a real `search_docs` answer fits its schema, and the same
/// answer broken (hits not an array, a required field gone, a number turned into a string) is
/// rejected, so that P2 cannot pass on a check that accepts everything.
#[tokio::test]
async fn p2_the_schema_check_rejects_a_result_that_breaks_the_output_schema() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &[]).await;
    let tools = mcp.client().list_all_tools().await.expect("tools/list");
    let tool = tools
        .iter()
        .find(|t| t.name == "search_docs")
        .expect("search_docs is listed");
    let schema = Value::Object((**tool.output_schema.as_ref().expect("outputSchema")).clone());
    let answer = mcp.search("p2/schema-check", signing()).await;
    mcp.stop().await;
    assert!(!answer.is_error, "{}", answer.raw);
    let errors = schema_errors(&schema, &answer.structured);
    assert!(errors.is_empty(), "{errors:#?}\nschema: {schema}");

    let mut hits_not_an_array = answer.structured.clone();
    hits_not_an_array["hits"] = json!("not a list of hits");
    let mut generation_missing = answer.structured.clone();
    generation_missing
        .as_object_mut()
        .expect("an object")
        .remove("generation");
    let mut generation_a_string = answer.structured.clone();
    generation_a_string["generation"] = json!("seven");
    for (case, wrong) in [
        ("hits not an array", hits_not_an_array),
        ("generation missing", generation_missing),
        ("generation a string", generation_a_string),
        ("not an object", json!(["hits"])),
    ] {
        assert!(
            !schema_errors(&schema, &wrong).is_empty(),
            "{case}: accepted by the schema check: {wrong}\nschema: {schema}"
        );
    }
}

#[test]
fn p3_progress_token_is_not_part_of_the_fingerprint() {
    let env = sample_store();
    let mut raw = RawMcp::start(&env, &[], &[]);
    raw.initialize();
    let call = |token: Option<&str>| {
        let mut meta = key("p3");
        if let Some(token) = token {
            meta["progressToken"] = json!(token);
        }
        json!({"name": "search_docs", "arguments": signing(), "_meta": meta})
    };
    let (first, notes) = raw.request(1, "tools/call", call(Some("tok-1")));
    assert_eq!(first["result"]["isError"], false, "{first}");
    assert_eq!(
        first["result"]["_meta"]["groundidx/replayed"], false,
        "{first}"
    );
    let mut last = f64::MIN;
    for note in notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
    {
        assert_eq!(note["params"]["progressToken"], "tok-1", "{note}");
        let progress = note["params"]["progress"].as_f64().expect("progress");
        assert!(progress > last, "progress must increase: {notes:?}");
        last = progress;
    }
    let (second, _) = raw.request(2, "tools/call", call(Some("tok-2")));
    let (third, _) = raw.request(3, "tools/call", call(None));
    drop(raw);
    for replay in [&second, &third] {
        assert_eq!(
            replay["result"]["_meta"]["groundidx/replayed"], true,
            "{replay}"
        );
        assert_eq!(
            replay["result"]["structuredContent"], first["result"]["structuredContent"],
            "{replay}"
        );
        assert_eq!(replay["result"]["content"], first["result"]["content"]);
    }
    assert_executed_once(&env.store, SCOPE, "p3");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn p5_stdout_carries_only_json_rpc() {
    let env = sample_store();
    let mut raw = RawMcp::start(&env, &[], &[("RUST_LOG", "trace")]);
    raw.initialize();
    raw.request(1, "tools/list", json!({}));
    raw.request(
        2,
        "tools/call",
        json!({"name": "search_docs", "arguments": signing(), "_meta": key("p5")}),
    );
    raw.request(
        3,
        "tools/call",
        json!({"name": "search_docs", "arguments": {"query": ""}, "_meta": key("p5/bad")}),
    );
    raw.request(4, "tools/call", json!({"name": "nope", "arguments": {}}));
    let (status, lines) = raw.finish();
    assert!(lines.len() >= 5, "{lines:#?}");
    for line in &lines {
        let message: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("stdout line is not JSON ({err}): {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "not a JSON-RPC message: {line}");
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "the server must exit cleanly at end of input: {status:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// T5: the published key policy, for the orchestrator that makes keys: README states it in
// words and every tool's `_meta` as data. The descriptions the model reads say nothing of keys
// (a model cannot set `_meta`; one that tries puts it into the arguments and is refused).

#[tokio::test]
async fn t5_the_key_policy_is_published_to_hosts_and_never_to_the_model() {
    let env = sample_store();
    let mcp = Mcp::start(&env, &["--key-ttl", "2d"]).await;
    let tools = mcp.client().list_all_tools().await.expect("tools/list");
    let initialized = mcp.client().peer_info().expect("initialize result");
    mcp.stop().await;
    let states_policy = |text: &str| -> Vec<&'static str> {
        let lower = text.to_lowercase();
        let mut missing = Vec::new();
        if !lower.contains("groundidx/idempotencykey") {
            missing.push("the key's _meta name");
        }
        if !lower.contains("255") {
            missing.push("the key format (up to 255 characters)");
        }
        if !["7 days", "7 day", "7d", "168 h", "168h", "seven days"]
            .iter()
            .any(|ttl| lower.contains(ttl))
        {
            missing.push("the key TTL (7 days)");
        }
        if ![
            "without a key",
            "no key",
            "without an idempotency key",
            "not deduplica",
        ]
        .iter()
        .any(|phrase| lower.contains(phrase))
        {
            missing.push("the behaviour without a key");
        }
        missing
    };
    let speaks_of_keys = |text: &str| {
        let lower = text.to_lowercase();
        ["_meta", "idempoten", "runid", "retry", "replay"]
            .into_iter()
            .filter(|word| lower.contains(word))
            .collect::<Vec<_>>()
    };
    let instructions = initialized.instructions.clone().unwrap_or_default();
    assert!(
        speaks_of_keys(&instructions).is_empty(),
        "the instructions speak of keys: {instructions}"
    );
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or("");
        assert!(
            description.len() <= 600,
            "{}: {} characters, keep it short",
            tool.name,
            description.len()
        );
        let mut model_facing = vec![description.to_string()];
        let input = Value::Object((*tool.input_schema).clone());
        for property in input["properties"]
            .as_object()
            .expect("properties")
            .values()
        {
            model_facing.push(property["description"].as_str().unwrap_or("").to_string());
        }
        for text in &model_facing {
            assert!(
                speaks_of_keys(text).is_empty(),
                "{}: the model would read of keys ({:?}): {text}",
                tool.name,
                speaks_of_keys(text)
            );
        }
        let meta = serde_json::to_value(tool.meta.as_ref().expect("_meta")).expect("json");
        let policy = &meta["groundidx/idempotency"];
        assert_eq!(policy["meta_key"], "groundidx/idempotencyKey", "{meta}");
        assert_eq!(policy["http_header"], "Idempotency-Key", "{meta}");
        assert_eq!(policy["max_length"], 255, "{meta}");
        assert_eq!(policy["ttl_seconds"], 2 * 86_400, "--key-ttl 2d: {meta}");
        assert!(
            policy["without_key"]
                .as_str()
                .is_some_and(|w| w.contains("not deduplicated")),
            "{meta}"
        );
    }
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let missing = states_policy(&readme);
    assert!(missing.is_empty(), "README.md lacks {missing:?}");
    assert!(
        readme.contains("Idempotency-Key") && readme.contains("groundidx/idempotency\""),
        "README.md lacks the HTTP header or the tools' _meta policy"
    );
}
