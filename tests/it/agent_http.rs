//! The agent tool over HTTP (`groundidx serve`): the JSON API and MCP Streamable HTTP on
//! `/mcp`. Keys from headers (K4–K6, K8), replays (R3–R7), mismatches (M1), busy and failures
//! (C3, E1, E3), the quota and its headers (Q3–Q5), transport security (S1–S5, S7), and a
//! server that keeps answering while an ingest rewrites the store.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::Env;
use crate::support::http::{Launch, MCP_HEADERS, launch, serve, serve_with_env, tokens_file};
use crate::support::ledger::{
    WriteLock, assert_executed_once, assert_nothing_for, counts, executed, key_row, ledger, rows,
};
use crate::support::mcp::{Mcp, backups, frozen_clock, key, sample_store, signing};

// ---------------------------------------------------------------------------------------------
// Helpers.

const SCOPE: &str = "local";

/// A raw HTTP/1.1 POST with a chosen `Host`; returns the status and the whole response text.
fn raw_post(
    addr: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    (status, text)
}

fn chunk_ids(body: &Value) -> Vec<String> {
    body["hits"]
        .as_array()
        .map(|hits| {
            hits.iter()
                .filter_map(|h| h["chunk_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Changes a document and re-ingests; returns the new generation.
fn move_generation(env: &Env) -> u64 {
    let path = env.docs.join("handbook/key-rotation.md");
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, text.replace("90 days", "60 days")).expect("edit");
    env.write(
        "new/rotation.md",
        "# Rotation\n\nRotate the signing key twice a year.\n",
    );
    env.ingest()["generation"].as_u64().expect("generation")
}

// ---------------------------------------------------------------------------------------------
// K: keys from headers.

#[test]
fn k4_http_bad_keys_get_400_and_nothing_is_written() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let long = "x".repeat(256);
    let quoted_long = format!("\"{long}\"");
    for header in [
        long.as_str(),
        quoted_long.as_str(),
        "\"\"",
        "\"a b\"",
        "a b",
    ] {
        let reply = server.tool(
            "search_docs",
            &[("Idempotency-Key", header)],
            &signing().to_string(),
        );
        let problem = reply.assert_problem(400);
        assert_eq!(
            problem["code"], "idempotency_key_invalid",
            "key {header:?}: {reply}"
        );
    }
    assert_eq!(
        counts(&env.store),
        executed(0),
        "a refused key wrote something"
    );
    let longest = "x".repeat(255);
    let reply = server.search(Some(&longest), &signing().to_string());
    assert_eq!(reply.status, 200, "{reply}");
    assert_executed_once(&env.store, SCOPE, &longest);
}

#[test]
fn k5_http_no_key_executes_every_time() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let first = server.search(None, &signing().to_string());
    let second = server.search(None, &signing().to_string());
    for reply in [&first, &second] {
        assert_eq!(reply.status, 200, "{reply}");
        assert!(
            !reply.replayed(),
            "an unkeyed call is never a replay: {reply}"
        );
    }
    assert_eq!(first.body, second.body);
    assert_eq!(counts(&env.store), executed(2), "counted again");
    let conn = ledger(&env.store);
    let mut statement = conn
        .prepare("SELECT key, key_source FROM audit_events ORDER BY event_id")
        .expect("prepare");
    let logged: Vec<(String, String)> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .map(|row| row.expect("row"))
        .collect();
    assert_eq!(logged.len(), 2);
    assert_ne!(logged[0].0, logged[1].0, "{logged:?}");
    for (k, source) in &logged {
        assert!(k.starts_with("srv-"), "{logged:?}");
        assert_eq!(source, "server", "{logged:?}");
    }
}

#[test]
fn k6_sf_string_and_bare_token_are_the_same_key() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let body = signing().to_string();
    let first = server.tool("search_docs", &[("Idempotency-Key", "\"abc\"")], &body);
    let second = server.tool("search_docs", &[("Idempotency-Key", "abc")], &body);
    assert_eq!(first.status, 200, "{first}");
    assert!(!first.replayed(), "{first}");
    assert_eq!(second.status, 200, "{second}");
    assert!(
        second.replayed(),
        "the bare token is the same key: {second}"
    );
    assert_eq!(second.body, first.body);
    assert_executed_once(&env.store, SCOPE, "abc");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn k8_meta_key_wins_over_the_header_on_mcp_http() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let result = server.mcp_call(
        &[("Idempotency-Key", "\"hdr-k\"")],
        "search_docs",
        signing(),
        key("meta-k"),
    );
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["_meta"]["groundidx/idempotencyKey"], "meta-k",
        "{result}"
    );
    assert_eq!(result["_meta"]["groundidx/keySource"], "caller", "{result}");
    // Only the header: ignored, so the call runs under a server key.
    let unkeyed = server.mcp_call(
        &[("Idempotency-Key", "\"hdr-only\"")],
        "search_docs",
        signing(),
        Value::Null,
    );
    assert_eq!(
        unkeyed["_meta"]["groundidx/keySource"], "server",
        "{unkeyed}"
    );
    assert!(
        unkeyed["_meta"]["groundidx/idempotencyKey"]
            .as_str()
            .is_some_and(|k| k.starts_with("srv-")),
        "{unkeyed}"
    );
    assert_executed_once(&env.store, SCOPE, "meta-k");
    assert_nothing_for(&env.store, SCOPE, "hdr-k");
    assert_nothing_for(&env.store, SCOPE, "hdr-only");
    assert_eq!(counts(&env.store), executed(2));
}

// ---------------------------------------------------------------------------------------------
// R: replays.

#[test]
fn r3_key_order_and_escapes_do_not_change_the_fingerprint() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let first = server.search(Some("r3"), "{\"top_k\":5,\"query\":\"caf\u{e9}\"}");
    let second = server.search(Some("r3"), r#"{ "query" : "caf\u00e9", "top_k" : 5 }"#);
    assert_eq!(first.status, 200, "{first}");
    assert_eq!(second.status, 200, "{second}");
    assert!(second.replayed(), "an equal fingerprint replays: {second}");
    assert_eq!(second.body, first.body);

    let call = |id: u64, arguments: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"_meta":{{"groundidx/idempotencyKey":"r3/mcp"}},"arguments":{arguments},"name":"search_docs"}}}}"#
        )
    };
    let (_, one) = server.mcp_raw(
        &[],
        &call(1, "{\"top_k\":5,\"query\":\"caf\u{e9}\"}"),
        &json!(1),
    );
    let (_, two) = server.mcp_raw(
        &[],
        &call(2, r#"{"query":"caf\u00e9","top_k":5}"#),
        &json!(2),
    );
    assert_eq!(one["result"]["_meta"]["groundidx/replayed"], false, "{one}");
    assert_eq!(two["result"]["_meta"]["groundidx/replayed"], true, "{two}");
    assert_eq!(
        two["result"]["structuredContent"],
        one["result"]["structuredContent"]
    );
    assert_eq!(counts(&env.store), executed(2));
}

#[test]
fn r4_http_replay_is_byte_identical_with_the_replayed_header() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let body = signing().to_string();
    let first = server.search(Some("r4"), &body);
    let replay = server.search(Some("r4"), &body);
    assert_eq!(first.status, 200, "{first}");
    assert!(
        first
            .header("Content-Type")
            .is_some_and(|ct| ct.starts_with("application/json")),
        "{first}"
    );
    assert!(!first.replayed(), "{first}");
    assert!(!chunk_ids(&first.json()).is_empty(), "{first}");
    assert_eq!(replay.status, first.status, "{replay}");
    assert!(replay.replayed(), "{replay}");
    assert_eq!(replay.body, first.body, "the replay must be byte-identical");
    for reply in [&first, &replay] {
        assert!(reply.header("RateLimit").is_some(), "{reply}");
        assert!(reply.header("RateLimit-Policy").is_some(), "{reply}");
    }
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn r5_http_then_mcp_replays_the_same_answer() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let first = server.search(Some("r5"), &signing().to_string());
    assert_eq!(first.status, 200, "{first}");
    let over_http = server.mcp_call(&[], "search_docs", signing(), key("r5"));
    assert_eq!(
        over_http["_meta"]["groundidx/replayed"], true,
        "{over_http}"
    );
    assert_eq!(over_http["structuredContent"], first.json(), "{over_http}");
    assert_eq!(
        over_http["content"][0]["text"],
        first.body.as_str(),
        "{over_http}"
    );
    drop(server);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let over_stdio = runtime.block_on(async {
        let mcp = Mcp::start(&env, &[]).await;
        let result = mcp.search("r5", signing()).await;
        mcp.stop().await;
        result
    });
    assert_eq!(over_stdio.replayed(), &json!(true), "{}", over_stdio.raw);
    assert_eq!(over_stdio.structured, first.json());
    assert_eq!(over_stdio.text, first.body);
    assert_executed_once(&env.store, SCOPE, "r5");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn r6_http_not_found_is_404_and_replayed() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let body = json!({"chunk_id": "0".repeat(64)}).to_string();
    let headers = [("Idempotency-Key", "\"r6\"")];
    let first = server.tool("get_chunk", &headers, &body);
    // An executed error is a problem like every refusal.
    let problem = first.assert_problem(404);
    assert_eq!(problem["code"], "not_found", "{first}");
    assert_eq!(problem["type"], "/problems#not-found", "{first}");
    assert!(!first.replayed(), "{first}");
    let replay = server.tool("get_chunk", &headers, &body);
    assert_eq!(replay.status, 404, "{replay}");
    assert!(replay.replayed(), "{replay}");
    assert_eq!(replay.body, first.body);
    assert_executed_once(&env.store, SCOPE, "r6");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn r7_replay_after_revocation_is_refused_without_the_stored_answer() {
    let env = sample_store();
    let tokens = tokens_file(
        &env,
        &[
            ("token-a-0123456789", "client-a"),
            ("token-b-0123456789", "client-b"),
        ],
    );
    let tokens = tokens.to_str().expect("utf-8");
    let body = signing().to_string();
    let stored = {
        let server = serve(&env, &["--tokens", tokens]);
        let anonymous = server.search(Some("r7"), &body);
        anonymous.assert_problem(401);
        let wrong = server.tool(
            "search_docs",
            &[
                ("Idempotency-Key", "\"r7\""),
                ("Authorization", "Bearer wrong"),
            ],
            &body,
        );
        wrong.assert_problem(401);
        assert_eq!(
            counts(&env.store),
            executed(0),
            "a refused caller wrote something"
        );
        let reply = server.tool(
            "search_docs",
            &[
                ("Idempotency-Key", "\"r7\""),
                ("Authorization", "Bearer token-a-0123456789"),
            ],
            &body,
        );
        assert_eq!(reply.status, 200, "{reply}");
        reply
    };
    assert_executed_once(&env.store, "client-a", "r7");
    let ids = chunk_ids(&stored.json());
    assert!(!ids.is_empty(), "{stored}");

    // client-a's token is revoked.
    tokens_file(&env, &[("token-b-0123456789", "client-b")]);
    let server = serve(&env, &["--tokens", tokens]);
    let reply = server.tool(
        "search_docs",
        &[
            ("Idempotency-Key", "\"r7\""),
            ("Authorization", "Bearer token-a-0123456789"),
        ],
        &body,
    );
    assert!(matches!(reply.status, 401 | 403), "{reply}");
    let (mcp_reply, message) = server.mcp(
        &[("Authorization", "Bearer token-a-0123456789")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "search_docs", "arguments": signing(), "_meta": key("r7")}}),
    );
    if mcp_reply.status == 200 {
        assert_eq!(message["result"]["isError"], true, "{mcp_reply}");
    } else {
        assert!(matches!(mcp_reply.status, 401 | 403), "{mcp_reply}");
    }
    for text in [&reply.body, &mcp_reply.body] {
        assert!(!text.contains("\"hits\""), "stored bytes disclosed: {text}");
        for id in &ids {
            assert!(
                !text.contains(id.as_str()),
                "stored bytes disclosed: {text}"
            );
        }
    }
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn r8_http_late_retry_after_gc_says_late_not_replayed() {
    let env = sample_store();
    // Eight days on is past the default 7-day key TTL, so `gc` prunes the key record.
    const T0: &str = "1800000000000";
    const LATER: &str = "1800700000000";
    let body = signing().to_string();
    let first = {
        let server = serve_with_env(&env, &[], &[("GROUNDIDX_FAKE_NOW_MS", T0)]);
        server.search(Some("r8"), &body)
    };
    assert_eq!(first.status, 200, "{first}");
    assert_eq!(first.header("Idempotent-Replayed"), None, "{first}");
    let gc = env
        .command(&["gc", "--json"])
        .env("GROUNDIDX_FAKE_NOW_MS", LATER)
        .output()
        .expect("gc");
    crate::support::assert_success(&gc, &["gc"]);
    assert_eq!(key_row(&env.store, SCOPE, "r8"), None, "gc pruned the key");

    let server = serve_with_env(&env, &[], &[("GROUNDIDX_FAKE_NOW_MS", LATER)]);
    let late = server.search(Some("r8"), &body);
    assert_eq!(late.status, 200, "{late}");
    // A fresh answer (the stored one is gone) must not claim to be the first one replayed.
    assert_eq!(late.header("Idempotent-Replayed"), Some("late"), "{late}");
    assert_eq!(late.header("Idempotency-Key"), Some("r8"), "{late}");
    assert!(!chunk_ids(&late.json()).is_empty(), "{late}");
    // Over MCP on the same server the same retry says "late" too.
    let over_mcp = server.mcp_call(&[], "search_docs", signing(), key("r8"));
    assert_eq!(
        over_mcp["_meta"]["groundidx/replayed"], "late",
        "{over_mcp}"
    );
    assert_eq!(rows(&env.store, "audit_events", SCOPE, "r8"), 1);
    assert_eq!(rows(&env.store, "usage_events", SCOPE, "r8"), 1);
}

// ---------------------------------------------------------------------------------------------
// M: mismatch.

#[test]
fn m1_http_same_key_other_query_is_422_and_writes_nothing() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let k = "r1/s1/c1";
    let first = server.search(Some(k), &signing().to_string());
    assert_eq!(first.status, 200, "{first}");
    let before = key_row(&env.store, SCOPE, k).expect("key record");
    let other = server.search(Some(k), &backups().to_string());
    let problem = other.assert_problem(422);
    assert!(
        problem["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("#idempotency-key-reused")),
        "{other}"
    );
    assert_eq!(
        problem["title"], "Idempotency-Key is already used",
        "{other}"
    );
    assert!(
        problem["detail"].as_str().is_some_and(|d| d.contains(k)),
        "the detail must name the key: {other}"
    );
    assert_eq!(counts(&env.store), executed(1));
    assert_eq!(
        key_row(&env.store, SCOPE, k),
        Some(before),
        "the stored record changed"
    );
    // M3: the original arguments still replay.
    let again = server.search(Some(k), &signing().to_string());
    assert_eq!(again.status, 200, "{again}");
    assert!(again.replayed(), "{again}");
    assert_eq!(again.body, first.body);
}

// ---------------------------------------------------------------------------------------------
// C3, E: busy and failures.

#[test]
fn c3_http_busy_ledger_is_503_and_a_retry_executes() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let lock = WriteLock::take(&env.store);
    let started = Instant::now();
    let busy = server.search(Some("c3"), &signing().to_string());
    let waited = started.elapsed();
    drop(lock);
    let problem = busy.assert_problem(503);
    assert_eq!(problem["code"], "busy", "{busy}");
    let retry_after: u64 = busy
        .header("Retry-After")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("503 needs Retry-After in seconds: {busy}"));
    assert!(retry_after >= 1, "{busy}");
    assert!(waited < Duration::from_secs(15), "busy took {waited:?}");
    assert_nothing_for(&env.store, SCOPE, "c3");
    let retry = server.search(Some("c3"), &signing().to_string());
    assert_eq!(retry.status, 200, "{retry}");
    assert!(!retry.replayed(), "{retry}");
    assert_executed_once(&env.store, SCOPE, "c3");
}

#[test]
fn e1_http_invalid_arguments_are_400_and_not_stored() {
    let env = sample_store();
    let server = serve(&env, &[]);
    for (tool, body, code) in [
        ("search_docs", r#"{"query":""}"#, Some("invalid_arguments")),
        (
            "search_docs",
            r#"{"query":"signing","top_k":0}"#,
            Some("invalid_arguments"),
        ),
        (
            "search_docs",
            r#"{"query":"signing","bogus":1}"#,
            Some("invalid_arguments"),
        ),
        ("search_docs", r#"{"top_k":3}"#, Some("invalid_arguments")),
        (
            "get_chunk",
            r#"{"chunk_id":"../../etc/passwd"}"#,
            Some("invalid_arguments"),
        ),
        ("search_docs", r#"{"query":"#, None),
        ("search_docs", "[1,2]", None),
        ("search_docs", "\"signing\"", None),
    ] {
        let reply = server.tool(tool, &[("Idempotency-Key", "\"e1\"")], body);
        let problem = reply.assert_problem(400);
        if let Some(code) = code {
            assert_eq!(problem["code"], code, "{tool} {body}: {reply}");
        }
    }
    assert_eq!(
        counts(&env.store),
        executed(0),
        "invalid arguments were stored"
    );
    let corrected = server.search(Some("e1"), r#"{"query":"signing","top_k":3}"#);
    assert_eq!(corrected.status, 200, "{corrected}");
    assert!(!corrected.replayed(), "{corrected}");
    assert_executed_once(&env.store, SCOPE, "e1");
}

#[test]
fn e3_unreadable_index_is_unavailable_and_not_stored() {
    let env = sample_store();
    let meta = env.store.join("index/meta.json");
    let away = env.store.join("index/meta.json.away");
    std::fs::rename(&meta, &away).expect("hide the index meta");
    let server = match launch(&env, &["--listen", "127.0.0.1:0"]) {
        Launch::Listening(server) => server,
        Launch::Exited(code, stderr) => panic!(
            "with an unreadable index the server must start and answer 503 unavailable, \
             but it exited ({code:?}): {stderr}"
        ),
    };
    let reply = server.search(Some("e3"), &signing().to_string());
    let problem = reply.assert_problem(503);
    assert_eq!(problem["code"], "unavailable", "{reply}");
    assert!(reply.header("Retry-After").is_some(), "{reply}");
    let (_, message) = server.mcp(
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "search_docs", "arguments": signing(), "_meta": key("e3/mcp")}}),
    );
    assert_eq!(message["result"]["isError"], true, "{message}");
    assert_eq!(
        message["result"]["structuredContent"]["error"]["code"], "unavailable",
        "{message}"
    );
    assert_eq!(counts(&env.store), executed(0), "a failed call was stored");

    std::fs::rename(&away, &meta).expect("restore the index meta");
    let started = Instant::now();
    let retry = loop {
        let retry = server.search(Some("e3"), &signing().to_string());
        if retry.status != 503 || started.elapsed() > Duration::from_secs(3) {
            break retry;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        retry.status, 200,
        "a retry executes once the index is back: {retry}"
    );
    assert!(!retry.replayed(), "{retry}");
    assert_executed_once(&env.store, SCOPE, "e3");
}

// ---------------------------------------------------------------------------------------------
// Q: quota.

#[test]
fn q3_over_quota_is_refused_and_nothing_stored() {
    let env = sample_store();
    let server = serve_with_env(&env, &["--rate-limit", "2/60s"], &frozen_clock());
    let anchor = server.search(Some("q3/anchor"), &signing().to_string());
    assert_eq!(anchor.status, 200, "{anchor}");
    assert_eq!(anchor.rate_limit(), (1, 59), "{anchor}");
    let second = server.search(Some("q3/second"), &backups().to_string());
    assert_eq!(second.status, 200, "{second}");
    assert_eq!(second.rate_limit().0, 0, "{second}");

    let refused = server.search(Some("q3/refused"), &signing().to_string());
    let problem = refused.assert_problem(429);
    assert_eq!(
        problem["type"], "https://iana.org/assignments/http-problem-types#quota-exceeded",
        "{refused}"
    );
    assert_eq!(
        problem["violated-policies"],
        json!(["per-client"]),
        "{refused}"
    );
    assert_eq!(
        refused.header("RateLimit-Policy"),
        Some("\"per-client\";q=2;w=60"),
        "{refused}"
    );
    let (r, t) = refused.rate_limit();
    assert_eq!(r, 0, "{refused}");
    let retry_after: u64 = refused
        .header("Retry-After")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("429 needs Retry-After in seconds: {refused}"));
    assert_eq!(t, 59, "{refused}");
    assert_eq!(
        retry_after, t,
        "Retry-After is the time to the reset: {refused}"
    );
    assert_nothing_for(&env.store, SCOPE, "q3/refused");
    assert_eq!(counts(&env.store), executed(2));

    // Q2: a replay is served with the quota exhausted, and costs nothing.
    let replay = server.search(Some("q3/anchor"), &signing().to_string());
    assert_eq!(replay.status, 200, "{replay}");
    assert!(replay.replayed(), "{replay}");
    assert_eq!(replay.body, anchor.body);
    assert_eq!(counts(&env.store), executed(2));
}

#[test]
fn q4_ratelimit_headers_are_current_on_every_response() {
    let env = sample_store();
    let server = serve_with_env(&env, &[], &frozen_clock());
    let first = server.search(Some("q4/a"), &signing().to_string());
    assert_eq!(first.status, 200, "{first}");
    let policy = "\"per-client\";q=600;w=60";
    assert_eq!(first.header("RateLimit-Policy"), Some(policy), "{first}");
    let (r1, t1) = first.rate_limit();
    assert_eq!(t1, 59, "{first}");
    assert_eq!(r1, 599, "one unit of 600 used in this window: {first}");
    let first_key = "\"q4/a\"";

    let replay = server.tool(
        "search_docs",
        &[("Idempotency-Key", first_key)],
        &signing().to_string(),
    );
    assert!(replay.replayed(), "{replay}");
    assert_eq!(replay.header("RateLimit-Policy"), Some(policy), "{replay}");
    assert_eq!(
        replay.rate_limit().0,
        r1,
        "a replay consumes nothing: {replay}"
    );

    let other = server.search(Some("q4/b"), &backups().to_string());
    assert_eq!(other.status, 200, "{other}");
    assert_eq!(other.rate_limit().0, r1 - 1, "{other}");

    let again = server.tool(
        "search_docs",
        &[("Idempotency-Key", first_key)],
        &signing().to_string(),
    );
    assert!(again.replayed(), "{again}");
    assert_eq!(again.body, first.body);
    assert_eq!(
        again.rate_limit().0,
        r1 - 1,
        "a replay carries the current RateLimit, not the stored one: {again}"
    );
    // Error responses carry them too.
    let invalid = server.search(Some("q4/c"), r#"{"query":""}"#);
    assert_eq!(invalid.status, 400, "{invalid}");
    assert_eq!(
        invalid.header("RateLimit-Policy"),
        Some(policy),
        "{invalid}"
    );
    assert_eq!(invalid.rate_limit().0, r1 - 1, "{invalid}");
}

#[test]
fn q5_mcp_over_http_quota_is_a_tool_result_not_429() {
    let env = sample_store();
    let server = serve_with_env(&env, &["--rate-limit", "1/60s"], &frozen_clock());
    // The one unit of this window, spent over the JSON API (same scope).
    let anchor = server.search(Some("q5/anchor"), &signing().to_string());
    assert_eq!(anchor.status, 200, "{anchor}");
    assert_eq!(anchor.rate_limit().0, 0, "{anchor}");
    let (reply, message) = server.mcp(
        &[],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "search_docs", "arguments": backups(), "_meta": key("q5/b")}}),
    );
    assert_eq!(
        reply.status, 200,
        "per-tool quota is not an HTTP 429 on /mcp: {reply}"
    );
    let result = &message["result"];
    assert_eq!(result["isError"], true, "{message}");
    assert_eq!(
        result["structuredContent"]["error"]["code"], "rate_limited",
        "{message}"
    );
    assert_eq!(
        result["structuredContent"]["error"]["policy"], "per-client",
        "{message}"
    );
    assert!(
        result["structuredContent"]["error"]["retry_after_seconds"].is_u64(),
        "{message}"
    );
    assert_nothing_for(&env.store, SCOPE, "q5/b");
    // A replay over /mcp is still served.
    let replay = server.mcp_call(&[], "search_docs", signing(), key("q5/anchor"));
    assert_eq!(replay["_meta"]["groundidx/replayed"], true, "{replay}");
    assert_eq!(replay["structuredContent"], anchor.json());
    assert_eq!(counts(&env.store), executed(1));
}

// ---------------------------------------------------------------------------------------------
// S: transport security.

#[test]
fn s1_foreign_origin_gets_403() {
    let env = sample_store();
    let server = serve(&env, &["--allow-origin", "https://app.example"]);
    let evil = [("Origin", "http://evil.example")];
    let reply = server.tool(
        "search_docs",
        &[("Idempotency-Key", "\"s1\""), evil[0]],
        &signing().to_string(),
    );
    assert_eq!(reply.status, 403, "{reply}");
    let (reply, _) = server.mcp(
        &evil,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "search_docs", "arguments": signing(), "_meta": key("s1/mcp")}}),
    );
    assert_eq!(reply.status, 403, "{reply}");
    let (reply, _) = server.mcp(
        &evil,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
    );
    assert_eq!(reply.status, 403, "{reply}");
    assert_eq!(
        counts(&env.store),
        executed(0),
        "a refused origin wrote something"
    );

    for (i, origin) in [
        "http://localhost:5173",
        "http://127.0.0.1:8080",
        "https://app.example",
    ]
    .iter()
    .enumerate()
    {
        let k = format!("\"s1/ok/{i}\"");
        let reply = server.tool(
            "search_docs",
            &[("Idempotency-Key", k.as_str()), ("Origin", *origin)],
            &signing().to_string(),
        );
        assert_eq!(reply.status, 200, "Origin {origin}: {reply}");
    }
    let (reply, message) = server.mcp(
        &[("Origin", "http://localhost:3000")],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}),
    );
    assert_eq!(reply.status, 200, "{reply}");
    assert!(message["result"]["tools"].is_array(), "{message}");
    assert_eq!(counts(&env.store), executed(3));
}

#[test]
fn s2_no_origin_is_allowed() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let reply = server.search(Some("s2"), &signing().to_string());
    assert_eq!(reply.status, 200, "{reply}");
    let (reply, message) = server.mcp(
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    );
    assert_eq!(reply.status, 200, "{reply}");
    assert!(message["result"]["tools"].is_array(), "{message}");
    let result = server.mcp_call(&[], "search_docs", signing(), key("s2/mcp"));
    assert_eq!(result["isError"], false, "{result}");
    for path in ["/health", "/"] {
        let health = server.get(path);
        assert_eq!(health.status, 200, "{health}");
        let body = health.json();
        assert_eq!(body["status"], "ok", "{health}");
        assert!(
            body["generation"].as_u64().is_some_and(|g| g >= 1),
            "{health}"
        );
    }
    assert_eq!(counts(&env.store), executed(2));
}

#[test]
fn s3_foreign_host_gets_403() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let body = signing().to_string();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).to_string();
    for host in ["attacker.example", "attacker.example:80"] {
        let (status, text) = raw_post(&server.addr, host, "/v1/tools/search_docs", &[], &body);
        assert_eq!(status, 403, "Host {host} on /v1: {text}");
        let (status, text) = raw_post(&server.addr, host, "/mcp", MCP_HEADERS, &list);
        assert_eq!(status, 403, "Host {host} on /mcp: {text}");
    }
    assert_eq!(counts(&env.store), executed(0));
    // The same raw requests with a loopback Host pass.
    let port = server.addr.rsplit(':').next().expect("port");
    for host in [server.addr.clone(), format!("localhost:{port}")] {
        let (status, text) = raw_post(&server.addr, &host, "/mcp", MCP_HEADERS, &list);
        assert_eq!(status, 200, "Host {host} on /mcp: {text}");
    }
    let (status, text) = raw_post(
        &server.addr,
        &server.addr,
        "/v1/tools/search_docs",
        &[],
        &body,
    );
    assert_eq!(status, 200, "{text}");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn s4_only_loopback_without_tokens() {
    let env = sample_store();
    match launch(&env, &["--listen", "0.0.0.0:0"]) {
        Launch::Exited(code, stderr) => assert_eq!(code, Some(2), "{stderr}"),
        Launch::Listening(server) => panic!(
            "a non-loopback listen without --tokens must be refused; it listens on {}",
            server.base
        ),
    }
    let tokens = tokens_file(&env, &[("token-s4-0123456789", "client-s4")]);
    let server = launch(
        &env,
        &[
            "--listen",
            "0.0.0.0:0",
            "--tokens",
            tokens.to_str().expect("utf-8"),
        ],
    )
    .server();
    let port = server.addr.rsplit(':').next().expect("port").to_string();
    assert!(server.addr.starts_with("0.0.0.0:"), "{}", server.base);
    let (status, text) = raw_post(
        &format!("127.0.0.1:{port}"),
        &format!("127.0.0.1:{port}"),
        "/v1/tools/search_docs",
        &[
            ("Authorization", "Bearer token-s4-0123456789"),
            ("Idempotency-Key", "\"s4\""),
        ],
        &signing().to_string(),
    );
    assert_eq!(status, 200, "{text}");
    drop(server);
    assert_executed_once(&env.store, "client-s4", "s4");

    // The default address is loopback (skipped when the port is taken by something else, which
    // fails under CI: a CI machine keeps port 7878 free).
    match launch(&env, &[]) {
        Launch::Listening(server) => assert_eq!(server.base, "http://127.0.0.1:7878"),
        Launch::Exited(_, stderr) if stderr.to_lowercase().contains("in use") => {
            crate::support::prerequisite_missing(&format!(
                "port 7878 for the default-address check: {stderr}"
            ));
        }
        Launch::Exited(code, stderr) => panic!("default serve exited ({code:?}): {stderr}"),
    }
}

#[test]
fn s5_unknown_protocol_version_is_400() {
    let env = sample_store();
    let server = serve(&env, &[]);
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "search_docs", "arguments": signing(), "_meta": key("s5")}}),
    ] {
        let reply = server.post(
            "/mcp",
            &[
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "1999-01-01"),
            ],
            &message.to_string(),
        );
        assert_eq!(reply.status, 400, "{reply}");
    }
    assert_eq!(counts(&env.store), executed(0));
}

#[test]
fn s7_another_scope_never_sees_the_stored_answer() {
    let env = sample_store();
    let tokens = tokens_file(
        &env,
        &[
            ("token-a-0123456789", "client-a"),
            ("token-b-0123456789", "client-b"),
        ],
    );
    let server = serve(&env, &["--tokens", tokens.to_str().expect("utf-8")]);
    let as_a = |k: &str, body: &Value| {
        let header = format!("\"{k}\"");
        server.tool(
            "search_docs",
            &[
                ("Idempotency-Key", header.as_str()),
                ("Authorization", "Bearer token-a-0123456789"),
            ],
            &body.to_string(),
        )
    };
    let as_b = |k: &str, body: &Value| {
        let header = format!("\"{k}\"");
        server.tool(
            "search_docs",
            &[
                ("Idempotency-Key", header.as_str()),
                ("Authorization", "Bearer token-b-0123456789"),
            ],
            &body.to_string(),
        )
    };
    let a_shared = as_a("shared", &signing());
    let a_only = as_a("only-a", &backups());
    assert_eq!(a_shared.status, 200, "{a_shared}");
    assert_eq!(a_only.status, 200, "{a_only}");
    let old = a_shared.json()["generation"].as_u64().expect("generation");

    let new = move_generation(&env);
    assert!(new > old);
    let started = Instant::now();
    let mut i = 0;
    loop {
        i += 1;
        let probe = as_b(&format!("b/poll/{i}"), &signing());
        assert_eq!(probe.status, 200, "{probe}");
        if probe.json()["generation"] == new {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never saw generation {new}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let b_shared = as_b("shared", &signing());
    assert_eq!(b_shared.status, 200, "{b_shared}");
    assert!(
        !b_shared.replayed(),
        "client-b got client-a's stored answer: {b_shared}"
    );
    assert_eq!(b_shared.json()["generation"], new, "{b_shared}");
    assert_ne!(b_shared.body, a_shared.body);
    // client-a's fingerprint is invisible to client-b: other arguments are no mismatch.
    let b_only = as_b("only-a", &signing());
    assert_eq!(b_only.status, 200, "{b_only}");
    assert!(!b_only.replayed(), "{b_only}");
    assert_ne!(b_only.body, a_only.body);
    // And client-a still gets its own stored answer (R2).
    let a_again = as_a("shared", &signing());
    assert!(a_again.replayed(), "{a_again}");
    assert_eq!(a_again.body, a_shared.body);
    for scope in ["client-a", "client-b"] {
        assert_eq!(
            rows(&env.store, "audit_events", scope, "shared"),
            1,
            "{scope}"
        );
        assert_eq!(
            rows(&env.store, "audit_events", scope, "only-a"),
            1,
            "{scope}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Readers during an ingest.

#[test]
fn serve_keeps_answering_while_ingest_rewrites_the_store() {
    let env = sample_store();
    let server = serve(&env, &["--rate-limit", "1000000/60s"]);
    let first = server.search(None, &signing().to_string());
    assert_eq!(first.status, 200, "{first}");
    let old = first.json()["generation"].as_u64().expect("generation");
    for i in 0..200 {
        env.write(
            &format!("bulk/page-{i:03}.md"),
            &format!(
                "# Bulk page {i}\n\nRotate the signing key on host {i}.\n\n## Notes\n\nPage {i} of the bulk set.\n"
            ),
        );
    }

    let stop = AtomicBool::new(false);
    let (queries, failures) = std::thread::scope(|scope| {
        let querier = scope.spawn(|| {
            let mut queries = 0;
            let mut failures = Vec::new();
            // Unkeyed calls, keyed calls, and retries of the first keyed call, in turn.
            while !stop.load(Ordering::Relaxed) {
                let key = match queries % 3 {
                    0 => None,
                    1 => Some(format!("during-ingest-{queries}")),
                    _ => Some("during-ingest-1".to_string()),
                };
                let reply = server.search(key.as_deref(), &signing().to_string());
                queries += 1;
                let good = reply.status == 200
                    && serde_json::from_str::<Value>(&reply.body)
                        .is_ok_and(|body| body["hits"].is_array() && body["generation"].is_u64());
                if !good {
                    failures.push(reply.to_string());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (queries, failures)
        });
        let docs = env.docs.to_str().expect("utf-8");
        let output = env
            .command(&["ingest", docs, "--json"])
            .output()
            .expect("run ingest");
        stop.store(true, Ordering::Relaxed);
        let result = querier.join().expect("querier");
        assert!(
            output.status.success(),
            "ingest failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).expect("ingest JSON");
        let new = report["generation"].as_u64().expect("generation");
        assert!(new > old, "{report}");

        let ended = Instant::now();
        loop {
            let reply = server.search(None, &signing().to_string());
            assert_eq!(reply.status, 200, "{reply}");
            if reply.json()["generation"] == new {
                break;
            }
            assert!(
                ended.elapsed() < Duration::from_secs(2),
                "generation {new} did not show within 2 s of the ingest's end: {reply}"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        result
    });
    assert!(queries >= 1, "no query ran during the ingest");
    assert!(
        failures.is_empty(),
        "{} of {queries} queries failed during the ingest: {failures:#?}",
        failures.len()
    );
    // Every keyed call was written exactly once, its retries not at all, while the ingest wrote.
    let mut n = 1;
    while n < queries {
        crate::support::ledger::assert_executed_once(
            &env.store,
            "local",
            &format!("during-ingest-{n}"),
        );
        n += 3;
    }
}
