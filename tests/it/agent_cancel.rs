//! C6: `notifications/cancelled` for a keyed call, landing before its commit or after it.
//!
//! The call is held at the crash point on either side of its commit (`GROUNDIDX_PAUSE_AT`), the
//! cancellation is sent, a `ping` answered proves the server has taken it in (rmcp handles
//! incoming messages in order), and only then is the call let go. Before the commit the call is
//! abandoned: no rows, and a retry with the key executes. After it the rows stay, and a retry
//! replays.

use std::path::Path;
use std::time::{Duration, Instant};

use groundidx::crash::PAUSE_ENV;
use serde_json::json;

use crate::support::ledger::{assert_executed_once, assert_nothing_for, counts, executed};
use crate::support::mcp::{RawMcp, key, sample_store, signing};

const SCOPE: &str = "local";

/// Waits until the server has reached the pause point.
fn wait_for(reached: &Path, mcp: &RawMcp) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reached.exists() {
        assert!(
            Instant::now() < deadline,
            "the call never reached the pause point; stdout: {:?}",
            mcp.seen
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs a keyed call held at `point`, cancels it there, lets it go, and retries it; returns
/// whether the retry was a replay.
fn cancelled_at(point: &str, k: &str) -> (crate::support::Env, serde_json::Value) {
    let env = sample_store();
    let pauses = env.tmp.path().join("pauses");
    std::fs::create_dir(&pauses).expect("create the pause folder");
    let armed = format!("{point}@{}", pauses.to_str().expect("a UTF-8 temp path"));
    let mut mcp = RawMcp::start(&env, &[], &[(PAUSE_ENV, armed.as_str())]);
    mcp.initialize();
    mcp.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "search_docs", "arguments": signing(), "_meta": key(k)}}));
    wait_for(&pauses.join("paused"), &mcp);
    mcp.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 5, "reason": "the user gave up"}}),
    );
    let (pong, _) = mcp.request(6, "ping", json!({}));
    assert!(pong["result"].is_object(), "{pong}");
    std::fs::write(pauses.join("resume"), b"").expect("release the call");

    let (retry, before) = mcp.request(
        7,
        "tools/call",
        json!({"name": "search_docs", "arguments": signing(), "_meta": key(k)}),
    );
    assert!(
        before.iter().all(|message| message["id"] != 5),
        "a cancelled request gets no response: {before:?}"
    );
    let result = retry["result"].clone();
    assert_eq!(result["isError"], false, "the retry is served: {retry}");
    drop(mcp);
    (env, result)
}

#[test]
fn c6_cancelled_before_the_commit_writes_nothing_and_the_retry_executes() {
    let (env, retry) = cancelled_at("keys.before_commit", "c6/before");
    assert_eq!(
        retry["_meta"]["groundidx/replayed"], false,
        "the cancelled call must not have committed: {retry}"
    );
    assert_executed_once(&env.store, SCOPE, "c6/before");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn c6_cancelled_after_the_commit_keeps_its_rows_and_the_retry_replays() {
    let (env, retry) = cancelled_at("keys.after_commit", "c6/after");
    assert_eq!(
        retry["_meta"]["groundidx/replayed"], true,
        "the committed call stands: {retry}"
    );
    assert_executed_once(&env.store, SCOPE, "c6/after");
    assert_eq!(counts(&env.store), executed(1));
}

#[test]
fn c6_a_cancellation_that_lands_nowhere_changes_nothing() {
    // A cancellation for an unknown or finished request is ignored.
    let env = sample_store();
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize();
    let (first, _) = mcp.request(
        1,
        "tools/call",
        json!({"name": "search_docs", "arguments": signing(), "_meta": key("c6/done")}),
    );
    assert_eq!(first["result"]["isError"], false, "{first}");
    for id in [1, 99] {
        mcp.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": id}}),
        );
    }
    let (replay, _) = mcp.request(
        2,
        "tools/call",
        json!({"name": "search_docs", "arguments": signing(), "_meta": key("c6/done")}),
    );
    assert_eq!(
        replay["result"]["_meta"]["groundidx/replayed"], true,
        "{replay}"
    );
    drop(mcp);
    assert_executed_once(&env.store, SCOPE, "c6/done");
    assert_nothing_for(&env.store, SCOPE, "c6/other");
}
