//! JSON-RPC batches, which MCP requires at protocol revision 2025-03-26 and dropped in
//! 2025-06-18: over stdio and over HTTP at 2025-03-26 every request of a batch is answered, in
//! one array, and its notifications are not; at a later revision a batch is refused with one
//! invalid-request error and none of its calls runs.

use serde_json::{Value, json};

use crate::support::http::serve;
use crate::support::ledger::{counts, executed};
use crate::support::mcp::{RawMcp, key, sample_store, signing};

/// A batch of two keyed searches, a `tools/list`, a notification and an element that is not a
/// message; the answer must hold exactly ids 1, 2 and 3 and one error with no id.
fn mixed_batch() -> Value {
    json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "search_docs", "arguments": signing(), "_meta": key("b/1")}},
        {"jsonrpc": "2.0", "method": "notifications/progress",
         "params": {"progressToken": "t", "progress": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "search_docs", "arguments": {"query": "backups"}, "_meta": key("b/2")}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        7
    ])
}

/// Asserts the answer to `mixed_batch`: an array with one answer per request and the error.
fn assert_mixed_answer(answer: &Value) {
    let answers = answer
        .as_array()
        .unwrap_or_else(|| panic!("a batch is answered with an array: {answer}"));
    assert_eq!(
        answers.len(),
        4,
        "three requests and one bad element: {answer}"
    );
    let by_id = |id: i64| {
        answers
            .iter()
            .find(|a| a["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer to id {id}: {answer}"))
    };
    for id in [1, 2] {
        let result = &by_id(id)["result"];
        assert_eq!(result["isError"], false, "id {id}: {answer}");
        let text: Value = result["content"][0]["text"]
            .as_str()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_else(|| panic!("id {id}: the text is the answer's JSON: {answer}"));
        assert!(
            text["hits"].as_array().is_some_and(|hits| !hits.is_empty()),
            "id {id}: {answer}"
        );
    }
    assert!(by_id(3)["result"]["tools"].is_array(), "{answer}");
    let error = answers
        .iter()
        .find(|a| a["id"].is_null())
        .unwrap_or_else(|| panic!("the bad element gets an error: {answer}"));
    assert_eq!(error["error"]["code"], -32600, "{answer}");
}

#[test]
fn stdio_batches_at_2025_03_26_answer_every_request_in_one_array() {
    let env = sample_store();
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize_at("2025-03-26");
    mcp.send(&mixed_batch());
    assert_mixed_answer(&mcp.next_message());
    // Notifications alone get nothing back: the request after them is the next line.
    mcp.send(&json!([
        {"jsonrpc": "2.0", "method": "notifications/progress",
         "params": {"progressToken": "t", "progress": 2}}
    ]));
    mcp.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}));
    assert_eq!(mcp.next_message()["id"], 9);
    // An empty batch is one error, not an array.
    mcp.send(&json!([]));
    let empty = mcp.next_message();
    assert_eq!(empty["error"]["code"], -32600, "{empty}");
    assert!(empty["id"].is_null(), "{empty}");
    assert_eq!(counts(&env.store), executed(2));
}

#[test]
fn stdio_batches_after_2025_03_26_are_refused() {
    let env = sample_store();
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize_at("2025-06-18");
    mcp.send(&mixed_batch());
    let refused = mcp.next_message();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["id"].is_null(), "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2025-03-26")),
        "{refused}"
    );
    // The server goes on, and nothing in the batch ran.
    let (answer, before) = mcp.request(9, "tools/list", json!({}));
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(counts(&env.store), executed(0));
}

#[test]
fn http_batches_at_2025_03_26_answer_every_request_in_one_array() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let accept = ("Accept", "application/json, text/event-stream");
    // The revision in the header, and no header at all, which the transport says is 2025-03-26.
    for headers in [
        vec![accept, ("MCP-Protocol-Version", "2025-03-26")],
        vec![accept],
    ] {
        let reply = server.post("/mcp", &headers, &mixed_batch().to_string());
        assert_eq!(reply.status, 200, "{reply}");
        assert_mixed_answer(&reply.json());
    }
    let only_notifications = json!([
        {"jsonrpc": "2.0", "method": "notifications/progress",
         "params": {"progressToken": "t", "progress": 2}}
    ]);
    let reply = server.post("/mcp", &[accept], &only_notifications.to_string());
    assert_eq!(reply.status, 202, "{reply}");
    assert_eq!(reply.body, "", "{reply}");
    let reply = server.post("/mcp", &[accept], "[]");
    assert_eq!(reply.status, 400, "{reply}");
    assert_eq!(reply.json()["error"]["code"], -32600, "{reply}");
    // The second batch replayed the first one's keys: two calls ran.
    assert_eq!(counts(&env.store), executed(2));
}

#[test]
fn http_batches_after_2025_03_26_are_refused() {
    let env = sample_store();
    let server = serve(&env, &[]);
    for revision in ["2025-06-18", "2025-11-25"] {
        let reply = server.post(
            "/mcp",
            &[
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", revision),
            ],
            &mixed_batch().to_string(),
        );
        assert_eq!(reply.status, 400, "{reply}");
        let error = reply.json();
        assert_eq!(error["error"]["code"], -32600, "{reply}");
        assert!(error["id"].is_null(), "{reply}");
    }
    assert_eq!(counts(&env.store), executed(0));
}
