//! One error shape per transport, valid for every client: over MCP every tool error is
//! `isError: true` with `structuredContent: {"error": {"code", "message", …}}`, which the tool's
//! `outputSchema` admits, and the same JSON as its text; over HTTP every error is
//! problem+json whose `type` leads to a page that explains it. `top_k` has one range in the
//! schema, the messages, the CLI and README. A stdio line that is not a JSON-RPC message gets a
//! JSON-RPC error with `id: null`.

use serde_json::{Value, json};

use crate::support::http::{Reply, serve_with_env};
use crate::support::ledger::{counts, executed};
use crate::support::mcp::{RawMcp, frozen_clock, key, sample_store, schema_errors, signing};

/// The range `top_k` must be in, everywhere.
const MAX_TOP_K: u64 = 100;

/// Every kind of tool error a client can meet, as `(name, tool, arguments, key, code)`, in an
/// order that provokes each: the key reuse needs `e/reused` used first, the quota (2 units per
/// window) is spent by the two executed calls before the last one.
fn error_cases() -> Vec<(
    &'static str,
    &'static str,
    Value,
    &'static str,
    &'static str,
)> {
    vec![
        (
            "top_k out of range",
            "search_docs",
            json!({"query": "signing", "top_k": 101}),
            "e/top_k",
            "invalid_arguments",
        ),
        (
            "top_k null",
            "search_docs",
            json!({"query": "signing", "top_k": null}),
            "e/null",
            "invalid_arguments",
        ),
        (
            "an empty query",
            "search_docs",
            json!({"query": " "}),
            "e/empty",
            "invalid_arguments",
        ),
        (
            "the first use of a key",
            "search_docs",
            signing(),
            "e/reused",
            "",
        ),
        (
            "the key with other arguments",
            "search_docs",
            json!({"query": "backups"}),
            "e/reused",
            "idempotency_key_reused",
        ),
        (
            "an unknown chunk",
            "get_chunk",
            json!({"chunk_id": "0".repeat(64)}),
            "e/missing",
            "not_found",
        ),
        (
            "a call over the quota",
            "search_docs",
            json!({"query": "backups"}),
            "e/quota",
            "rate_limited",
        ),
    ]
}

/// The `outputSchema` of each tool, from a raw `tools/list`.
fn output_schemas(mcp: &mut RawMcp) -> Vec<(String, Value)> {
    let (listed, _) = mcp.request(900, "tools/list", json!({}));
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {listed}"))
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().expect("a name").to_string(),
                tool["outputSchema"].clone(),
            )
        })
        .collect()
}

/// Asserts the one MCP error shape: `isError`, `structuredContent.error` with this code and a
/// message, the text being that same JSON, and the whole valid against the tool's schema.
fn assert_mcp_error(case: &str, result: &Value, code: &str, schema: &Value) {
    assert_eq!(result["isError"], true, "{case}: {result}");
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["code"], code, "{case}: {result}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{case}: {result}"
    );
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{case}: no text block: {result}"));
    let text_json: Value = serde_json::from_str(text)
        .unwrap_or_else(|err| panic!("{case}: the text is not the error's JSON ({err}): {text}"));
    assert_eq!(
        text_json, result["structuredContent"],
        "{case}: the text and structuredContent differ"
    );
    let violations = schema_errors(schema, &result["structuredContent"]);
    assert!(
        violations.is_empty(),
        "{case}: the error does not fit the outputSchema: {violations:#?}\n{result}"
    );
}

#[test]
fn mcp_tool_errors_have_one_shape_that_fits_the_output_schema() {
    let env = sample_store();
    let mut mcp = RawMcp::start(&env, &["--rate-limit", "2/60s"], &frozen_clock());
    mcp.initialize();
    let schemas = output_schemas(&mut mcp);
    for (name, schema) in &schemas {
        assert!(
            schema["properties"]["error"].is_object() && schema["oneOf"].is_array(),
            "{name}'s outputSchema must admit the error shape: {schema}"
        );
    }
    let schema_of = |tool: &str| {
        schemas
            .iter()
            .find(|(name, _)| name == tool)
            .map(|(_, schema)| schema.clone())
            .expect("a listed tool")
    };
    for (i, (case, tool, arguments, k, code)) in error_cases().into_iter().enumerate() {
        let (reply, _) = mcp.request(
            i as i64 + 1,
            "tools/call",
            json!({"name": tool, "arguments": arguments, "_meta": key(k)}),
        );
        let result = &reply["result"];
        if code.is_empty() {
            assert_eq!(result["isError"], false, "{case}: {reply}");
            continue;
        }
        assert_mcp_error(case, result, code, &schema_of(tool));
    }
    // A success fits the same schema (P2 checks it in depth).
    drop(mcp);
    assert_eq!(counts(&env.store), executed(2));
}

/// Asserts a problem+json error whose `type` is an absolute URI or a `/problems#anchor` that the
/// server's `GET /problems` page has.
fn assert_problem_resolves(case: &str, reply: &Reply, page: &str, code: &str) {
    assert!(
        reply
            .header("Content-Type")
            .is_some_and(|ct| ct.starts_with("application/problem+json")),
        "{case}: every error is problem+json: {reply}"
    );
    let problem = reply.json();
    assert_eq!(problem["code"], code, "{case}: {reply}");
    assert_eq!(problem["status"], reply.status, "{case}: {reply}");
    let kind = problem["type"].as_str().expect("a type");
    if let Some(anchor) = kind.strip_prefix("/problems#") {
        assert!(
            page.contains(&format!("id=\"{anchor}\"")),
            "{case}: GET /problems has no section {anchor}: {page}"
        );
    } else {
        assert!(
            kind.starts_with("https://"),
            "{case}: a type is /problems#… or an absolute URI: {reply}"
        );
    }
}

#[test]
fn http_errors_are_all_problem_json_and_their_types_lead_somewhere() {
    let env = sample_store();
    let server = serve_with_env(&env, &["--rate-limit", "2/60s"], &frozen_clock());
    let page = server.get("/problems");
    assert_eq!(page.status, 200, "{page}");
    assert!(
        page.header("Content-Type")
            .is_some_and(|ct| ct.starts_with("text/html")),
        "{page}"
    );
    for (case, tool, arguments, k, code) in error_cases() {
        let header = format!("\"{k}\"");
        let reply = server.tool(
            tool,
            &[("Idempotency-Key", header.as_str())],
            &arguments.to_string(),
        );
        if code.is_empty() {
            assert_eq!(reply.status, 200, "{case}: {reply}");
            continue;
        }
        assert_problem_resolves(case, &reply, &page.body, code);
    }
    let bad_key = server.tool(
        "search_docs",
        &[("Idempotency-Key", "\"a b\"")],
        &signing().to_string(),
    );
    assert_problem_resolves("a bad key", &bad_key, &page.body, "idempotency_key_invalid");
    let unknown = server.tool("no_such_tool", &[], "{}");
    assert_problem_resolves("an unknown tool", &unknown, &page.body, "unknown_tool");
    let origin = server.tool(
        "search_docs",
        &[("Origin", "http://evil.example")],
        &signing().to_string(),
    );
    assert_problem_resolves(
        "a foreign origin",
        &origin,
        &page.body,
        "origin_not_allowed",
    );
    assert_eq!(counts(&env.store), executed(2));
}

#[test]
fn top_k_has_one_range_in_the_schema_the_messages_the_cli_and_readme() {
    let env = sample_store();
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize();
    let (listed, _) = mcp.request(1, "tools/list", json!({}));
    let search = &listed["result"]["tools"][0];
    assert_eq!(search["name"], "search_docs", "{listed}");
    let schema = &search["inputSchema"]["properties"]["top_k"];
    assert_eq!(schema["type"], "integer", "{schema}");
    assert_eq!(
        (&schema["minimum"], &schema["maximum"]),
        (&json!(1), &json!(MAX_TOP_K)),
        "{schema}"
    );
    let range = format!("top_k must be between 1 and {MAX_TOP_K}");
    let mut id = 10;
    let mut message_for = |mcp: &mut RawMcp, top_k: Value| -> String {
        id += 1;
        let (reply, _) = mcp.request(
            id,
            "tools/call",
            json!({"name": "search_docs", "arguments": {"query": "signing", "top_k": top_k}}),
        );
        let result = &reply["result"];
        if result["isError"] == false {
            return "ok".into();
        }
        result["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no message: {reply}"))
            .to_string()
    };
    for (top_k, expected) in [
        (json!(0), format!("{range}, not 0")),
        (json!(-1), format!("{range}, not -1")),
        (json!(101), format!("{range}, not 101")),
        (json!(1_000), format!("{range}, not 1000")),
        (json!(null), "top_k must be an integer, not null".into()),
        (json!(2.5), "top_k must be an integer, not 2.5".into()),
        (json!("5"), "top_k must be an integer, not \"5\"".into()),
    ] {
        let message = message_for(&mut mcp, top_k.clone());
        assert!(
            message.contains(&expected),
            "top_k {top_k}: {message:?} should say {expected:?}"
        );
    }
    assert_eq!(message_for(&mut mcp, json!(MAX_TOP_K)), "ok");
    assert_eq!(message_for(&mut mcp, json!(1)), "ok");
    // Other optional fields: null is not absent either.
    let (reply, _) = mcp.request(
        50,
        "tools/call",
        json!({"name": "search_docs", "arguments": {"query": "signing", "path_prefix": null, "tags": null}}),
    );
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    drop(mcp);

    let over = env.run(&["search", "signing", "-k", &(MAX_TOP_K + 1).to_string()]);
    assert_eq!(over.status.code(), Some(2), "{over:?}");
    let stderr = String::from_utf8_lossy(&over.stderr);
    assert!(
        stderr.contains(&format!("1..={MAX_TOP_K}")),
        "the CLI names the same range: {stderr}"
    );
    let at = env.run(&["search", "signing", "-k", &MAX_TOP_K.to_string(), "--json"]);
    assert!(at.status.success(), "{at:?}");

    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    assert!(
        readme.contains(&format!("`top_k` is 1 to {MAX_TOP_K}")),
        "README states the range"
    );
    assert!(
        !readme.contains("1 to 1,000"),
        "README must not state another range"
    );
}

#[test]
fn stdio_lines_that_are_not_messages_get_a_json_rpc_error_and_the_server_goes_on() {
    let env = sample_store();
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize();
    let mut over_the_cap =
        br#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"p":""#.to_vec();
    over_the_cap.extend(std::iter::repeat_n(b'a', 17 << 20));
    over_the_cap.extend_from_slice(b"\"}}\n");
    let cases: Vec<(&str, Vec<u8>, Option<i64>)> = vec![
        (
            "a line that is not JSON",
            b"hello there\n".to_vec(),
            Some(-32700),
        ),
        (
            "a truncated message",
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"na"#
                .iter()
                .copied()
                .chain(*b"\n")
                .collect(),
            Some(-32700),
        ),
        ("invalid UTF-8", b"\xff\xfe{}\n".to_vec(), Some(-32700)),
        ("a JSON string", b"\"tools/list\"\n".to_vec(), Some(-32600)),
        (
            "a message without a method",
            b"{\"jsonrpc\":\"2.0\",\"id\":8}\n".to_vec(),
            Some(-32600),
        ),
        ("a line over the 16 MiB cap", over_the_cap, Some(-32600)),
        (
            "a notification with bad params",
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":7}\n".to_vec(),
            None,
        ),
        ("a blank line", b"\n".to_vec(), None),
    ];
    let mut id = 100;
    for (case, bytes, code) in cases {
        mcp.write_raw(&bytes);
        // A request after each case: its answer shows the server goes on, and everything
        // before it is what the case got.
        id += 1;
        let (answer, before) = mcp.request(
            id,
            "tools/call",
            json!({"name": "search_docs", "arguments": signing()}),
        );
        assert_eq!(answer["result"]["isError"], false, "after {case}: {answer}");
        match code {
            Some(code) => {
                assert_eq!(before.len(), 1, "{case}: one reply: {before:?}");
                let reply = &before[0];
                assert_eq!(reply["jsonrpc"], "2.0", "{case}: {reply}");
                assert!(reply["id"].is_null(), "{case}: id null: {reply}");
                assert!(reply.get("result").is_none(), "{case}: {reply}");
                assert_eq!(reply["error"]["code"], code, "{case}: {reply}");
                assert!(
                    reply["error"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty()),
                    "{case}: {reply}"
                );
            }
            None => assert!(before.is_empty(), "{case} got a reply: {before:?}"),
        }
    }
}
