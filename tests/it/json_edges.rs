//! The edges of JSON and HTTP that clients hit: `top_k: 3.0` is the integer 3 (as JSON Schema
//! counts) and fingerprints as `3` does; a number no double can hold (`1e400`) gets invalid
//! params with its request's id over stdio and `/mcp`, and `invalid_arguments` over the JSON
//! API; an unknown route and a wrong method get problem+json like every other error; a
//! client's mistake is logged as one readable line at INFO, never as a warning or a `Debug`
//! dump.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::http::raw_request;
use crate::support::http::{Reply, serve};
use crate::support::ledger::{counts, executed};
use crate::support::mcp::{RawMcp, key, sample_store};

const QUERY: &str = "rotate the signing key";

fn search_body(top_k: &str) -> String {
    format!("{{\"query\":\"{QUERY}\",\"top_k\":{top_k}}}")
}

fn chunk_ids(reply: &Reply) -> Vec<Value> {
    reply.json()["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits: {reply}"))
        .iter()
        .map(|hit| hit["chunk_id"].clone())
        .collect()
}

#[test]
fn a_whole_number_top_k_is_that_integer_and_keeps_its_key() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let first = server.search(Some("edges/3"), &search_body("3"));
    assert_eq!(first.status, 200, "{first}");
    let hits = chunk_ids(&first);
    assert!((1..=3).contains(&hits.len()), "{first}");
    // The same number spelled otherwise is the same call: replayed under the same key
    // (canonical JSON writes each of them as 3), byte for byte.
    for spelled in ["3.0", "3e0", "30e-1", "0.3e1", "3.000"] {
        let again = server.search(Some("edges/3"), &search_body(spelled));
        assert_eq!(again.status, 200, "{spelled}: {again}");
        assert_eq!(
            again.header("Idempotent-Replayed"),
            Some("true"),
            "{spelled}: {again}"
        );
        assert_eq!(again.body, first.body, "{spelled}");
    }
    // Under a key of its own, 3.0 executes as 3 does.
    let fresh = server.search(Some("edges/3.0"), &search_body("3.0"));
    assert_eq!(fresh.status, 200, "{fresh}");
    assert_eq!(fresh.header("Idempotent-Replayed"), None, "{fresh}");
    assert_eq!(chunk_ids(&fresh), hits, "{fresh}");
    // Another whole number under the first key is another call, refused as a reuse.
    let other = server.search(Some("edges/3"), &search_body("4.0"));
    let problem = other.assert_problem(422);
    assert_eq!(problem["code"], "idempotency_key_reused", "{other}");
    // A fraction is still no integer, and a whole number keeps the range.
    for (spelled, message) in [
        ("3.5", "top_k must be an integer, not 3.5"),
        ("1e-1", "top_k must be an integer, not 0.1"),
        ("0.0", "top_k must be between 1 and 100, not 0.0"),
        ("-1.0", "top_k must be between 1 and 100, not -1.0"),
        ("101.0", "top_k must be between 1 and 100, not 101.0"),
        ("1e30", "top_k must be between 1 and 100, not 1e+30"),
    ] {
        let refused = server.search(None, &search_body(spelled));
        let problem = refused.assert_problem(400);
        assert_eq!(problem["code"], "invalid_arguments", "{spelled}: {refused}");
        let detail = problem["detail"].as_str().expect("a detail");
        assert!(
            detail.contains(message),
            "{spelled}: {detail:?} should say {message:?}"
        );
    }
    assert_eq!(counts(&env.store), executed(2));
    drop(server);

    // Over MCP stdio the same: 3.0 is served, and replays a call made with 3.
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize();
    let call = |top_k: Value| json!({"name": "search_docs", "arguments": {"query": QUERY, "top_k": top_k}, "_meta": key("edges/mcp")});
    let (made, _) = mcp.request(1, "tools/call", call(json!(3)));
    assert_eq!(made["result"]["isError"], false, "{made}");
    assert_eq!(
        made["result"]["_meta"]["groundidx/replayed"], false,
        "{made}"
    );
    let (replayed, _) = mcp.request(2, "tools/call", call(json!(3.0)));
    assert_eq!(replayed["result"]["isError"], false, "{replayed}");
    assert_eq!(
        replayed["result"]["_meta"]["groundidx/replayed"], true,
        "{replayed}"
    );
    assert_eq!(
        replayed["result"]["structuredContent"], made["result"]["structuredContent"],
        "{replayed}"
    );
    drop(mcp);
    assert_eq!(counts(&env.store), executed(3));
}

/// A `tools/call` of `search_docs` whose `top_k` is a number no double can hold.
fn out_of_range_call(id: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"search_docs\",\"arguments\":{{\"query\":\"signing\",\"top_k\":1e400}}}}}}"
    )
}

fn assert_invalid_params(answer: &Value, id: Value) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("number out of range") && message.contains("tools/call"),
        "the message names the problem: {answer}"
    );
}

#[test]
fn a_number_out_of_range_is_answered_with_its_own_id() {
    let env = sample_store();

    // stdio: invalid params with the request's id, numeric or string.
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize();
    mcp.write_raw(format!("{}\n", out_of_range_call("41")).as_bytes());
    let (answer, others) = mcp.response(41);
    assert_invalid_params(&answer, json!(41));
    assert!(others.is_empty(), "{others:?}");
    mcp.write_raw(format!("{}\n", out_of_range_call("\"big\"")).as_bytes());
    let answer = mcp.next_message();
    assert_invalid_params(&answer, json!("big"));
    // A notification holding one gets nothing: the next line answers the next request.
    mcp.write_raw(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1e400}}\n",
    );
    let (listed, others) = mcp.request(42, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    assert!(others.is_empty(), "{others:?}");
    drop(mcp);

    // HTTP /mcp: the same answer, 200 as for any other request answered.
    let server = serve(&env, &[]);
    let (reply, answer) = server.mcp_raw(&[], &out_of_range_call("43"), &json!(43));
    assert_eq!(reply.status, 200, "{reply}");
    assert_invalid_params(&answer, json!(43));
    // A notification holding one is not accepted: 400, an error with no id.
    let (reply, _) = server.mcp_raw(
        &[],
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":-1e999}}",
        &Value::Null,
    );
    assert_eq!(reply.status, 400, "{reply}");
    assert_eq!(reply.json()["error"]["code"], -32602, "{reply}");
    assert_eq!(reply.json()["id"], Value::Null, "{reply}");

    // The JSON API: invalid arguments, saying why (not "not JSON").
    let refused = server.search(None, "{\"query\":\"signing\",\"top_k\":1e400}");
    let problem = refused.assert_problem(400);
    assert_eq!(problem["code"], "invalid_arguments", "{refused}");
    let detail = problem["detail"].as_str().expect("a detail");
    assert!(
        detail.contains("number out of range") && !detail.contains("not JSON"),
        "{refused}"
    );
    assert_eq!(counts(&env.store), executed(0));
    // And the server goes on serving.
    let served = server.search(None, &search_body("3"));
    assert_eq!(served.status, 200, "{served}");
}

#[test]
fn unknown_routes_and_wrong_methods_are_problems() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let page = server.get("/problems").body;
    for (method, path, status, code, allow) in [
        ("GET", "/no-such-page", 404, "route_not_found", None),
        (
            "POST",
            "/v1/tools/search_docs/extra",
            404,
            "route_not_found",
            None,
        ),
        ("POST", "/v1/search_docs", 404, "route_not_found", None),
        (
            "GET",
            "/v1/tools/search_docs",
            405,
            "method_not_allowed",
            Some("POST"),
        ),
        (
            "DELETE",
            "/v1/tools/get_chunk",
            405,
            "method_not_allowed",
            Some("POST"),
        ),
        ("GET", "/mcp", 405, "method_not_allowed", Some("POST")),
        ("DELETE", "/mcp", 405, "method_not_allowed", Some("POST")),
        ("POST", "/health", 405, "method_not_allowed", Some("GET")),
        ("PUT", "/problems", 405, "method_not_allowed", Some("GET")),
    ] {
        let reply = raw_request(&server.addr, method, path, &[], "");
        let problem = reply.assert_problem(status);
        assert_eq!(problem["code"], code, "{method} {path}: {reply}");
        let anchor = code.replace('_', "-");
        assert_eq!(
            problem["type"],
            format!("/problems#{anchor}"),
            "{method} {path}: {reply}"
        );
        assert!(
            page.contains(&format!("id=\"{anchor}\"")),
            "GET /problems has no section {anchor}"
        );
        let detail = problem["detail"].as_str().expect("a detail");
        assert!(detail.contains(path), "the detail names the path: {reply}");
        match allow {
            None => assert_eq!(reply.header("Allow"), None, "{method} {path}: {reply}"),
            Some(allowed) => {
                let listed: Vec<&str> = reply
                    .header("Allow")
                    .unwrap_or_else(|| panic!("no Allow: {method} {path}: {reply}"))
                    .split(',')
                    .map(str::trim)
                    .collect();
                assert!(listed.contains(&allowed), "{method} {path}: {reply}");
                assert!(!listed.contains(&method), "{method} {path}: {reply}");
            }
        }
    }
}

/// What a log must not hold: a Rust `Debug` dump of an error, or a warning or an error line
/// (the text format starts those with `warning:` and `error:`).
fn assert_readable(log: &str) {
    for dump in ["{ code:", "Some(", "ErrorData {", "ErrorCode("] {
        assert!(
            !log.contains(dump),
            "a Debug dump ({dump}) in the log:\n{log}"
        );
    }
    for line in log.lines() {
        assert!(
            !line.starts_with("warning:") && !line.starts_with("error:"),
            "a client's mistake logged as a problem of the server's: {line}\n{log}"
        );
    }
}

/// Asserts a line of `log` holds every one of `parts`.
fn assert_line(log: &str, parts: &[&str]) {
    assert!(
        log.lines()
            .any(|line| parts.iter().all(|part| line.contains(part))),
        "no line with {parts:?} in the log:\n{log}"
    );
}

#[test]
fn client_mistakes_are_logged_as_one_readable_line_at_info() {
    let env = sample_store();
    // At the least connections there are, so no open-file limit can lower them with a warning
    // of its own.
    let server = serve(&env, &["-v", "--max-connections", "4"]);
    let bad_top_k = server.search(None, &search_body("3.5"));
    bad_top_k.assert_problem(400);
    let bad_key = server.tool(
        "search_docs",
        &[("Idempotency-Key", "\"unterminated")],
        &search_body("3"),
    );
    bad_key.assert_problem(400);
    let unknown = server.tool("no_such_tool", &[], "{}");
    unknown.assert_problem(404);
    let call = |id: i64, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let (_, answer) = server.mcp(
        &[],
        &call(1, json!({"name": "no_such_tool", "arguments": {}})),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (_, answer) = server.mcp(
        &[],
        &call(2, json!({"name": "search_docs", "arguments": 5})),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (_, answer) = server.mcp(
        &[],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "no/such/method"}),
    );
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let (reply, _) = server.mcp_raw(&[], "{\"jsonrpc\":", &Value::Null);
    assert_eq!(reply.status, 400, "{reply}");
    let (_, answer) = server.mcp(
        &[],
        &call(
            4,
            json!({"name": "search_docs", "arguments": {"query": "signing", "top_k": 0}}),
        ),
    );
    assert_eq!(answer["result"]["isError"], true, "{answer}");

    let expected: [&[&str]; 6] = [
        &[
            "info:",
            "refused a call: invalid arguments: top_k must be an integer, not 3.5",
            "tool=search_docs",
            "transport=http",
            "code=invalid_arguments",
        ],
        &[
            "info:",
            "refused a call: invalid idempotency key",
            "code=idempotency_key_invalid",
        ],
        &[
            "info:",
            "refused a call: unknown tool",
            "tool=no_such_tool",
            "transport=http",
        ],
        &[
            "info:",
            "refused a call: unknown tool",
            "transport=mcp",
            "code=unknown_tool",
        ],
        &["info:", "refused a request: unknown method", "code=-32601"],
        &[
            "info:",
            "refused a call: invalid arguments: top_k must be between 1 and 100, not 0",
            "transport=mcp",
        ],
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = loop {
        let log = server.stderr();
        let complete = expected.iter().all(|parts| {
            log.lines()
                .any(|line| parts.iter().all(|part| line.contains(part)))
        });
        if complete || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for parts in expected {
        assert_line(&log, parts);
    }
    assert_line(
        &log,
        &[
            "info:",
            "refused a request: malformed tools/call",
            "code=-32602",
        ],
    );
    assert_line(
        &log,
        &["info:", "refused a message: parse error", "transport=http"],
    );
    assert_readable(&log);
    drop(server);

    // stdio: the same mistakes, the same lines.
    let mut child = env
        .command(&["mcp", "-v"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn groundidx mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = move |message: String| {
        writeln!(stdin, "{message}").expect("write to the server");
        stdin.flush().expect("flush");
    };
    send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "groundidx-it", "version": "0"}}}).to_string());
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    send(call(1, json!({"name": "no_such_tool", "arguments": {}})).to_string());
    send(
        call(
            2,
            json!({"name": "search_docs", "arguments": {"query": "signing", "top_k": 2.5}}),
        )
        .to_string(),
    );
    send(out_of_range_call("3"));
    send("{\"jsonrpc\":".into());
    // Every answer in (the last line has no id), then end the session.
    let mut answered = Vec::new();
    while answered.len() < 5 {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "the server ended early: {answered:?}");
        answered.push(line);
    }
    drop(send);
    let output = child.wait_with_output().expect("wait for groundidx mcp");
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_line(
        &log,
        &["info:", "refused a call: unknown tool", "transport=mcp"],
    );
    assert_line(
        &log,
        &[
            "info:",
            "top_k must be an integer, not 2.5",
            "code=invalid_arguments",
        ],
    );
    assert_line(
        &log,
        &[
            "info:",
            "refused a message: invalid params",
            "transport=stdio",
            "code=-32602",
        ],
    );
    assert_line(
        &log,
        &["info:", "refused a message: parse error", "code=-32700"],
    );
    assert_readable(&log);
}
