//! The official MCP SDK clients against the real servers: the TypeScript SDK
//! (`tests/clients/ts/`, installed by `.ci/run` with `npm ci`) over `groundidx mcp` and
//! `serve`'s `/mcp`, showing the message of each tool error; and the Python SDK
//! (`tests/clients/py/`, installed by `.ci/run` into a venv) in its `legacy` and `2026-07-28`
//! modes, which must give identical tool results (P4), and the raw JSON-RPC of both revisions on
//! `/mcp`, where only 2026-07-28 carries `resultType: "complete"`. Both SDKs also read around a
//! hit, list documents and browse the documents as resources, with the SDKs' own checks of
//! each answer against the tool's output schema.
//!
//! Without node, npm's install or the venv the tests skip with a message, and fail when `CI` is set.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::http::serve_with_env;
use crate::support::ledger::WriteLock;
use crate::support::mcp::{frozen_clock, key, sample_store, signing};
use crate::support::{BIN, Env, isolate};

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// `Some(())` when `what` is there; otherwise skips with a message, or fails under `CI`.
fn prerequisite(present: bool, what: &str, fix: &str) -> Option<()> {
    if present {
        return Some(());
    }
    if std::env::var_os("CI").is_some() {
        panic!("{what} is missing and CI is set; {fix}");
    }
    eprintln!("skipped: {what} is missing; {fix}");
    None
}

/// Runs a client program with a plan (written to a file) and returns the JSON it prints.
fn run_client(mut command: Command, env: &Env, plan: &Value, what: &str) -> Value {
    let plan_path = env.tmp.path().join(format!("{what}-plan.json"));
    std::fs::write(&plan_path, plan.to_string()).expect("write the plan");
    command.arg(&plan_path);
    isolate(&mut command);
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("run {what}: {err}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{what} failed ({}): stdout {stdout}\nstderr {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|err| panic!("{what} printed no JSON ({err}): {stdout}"))
}

// ---------------------------------------------------------------------------------------------
// TypeScript.

fn ts_client() -> Option<Command> {
    let dir = clients_dir().join("ts");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    prerequisite(node, "node", "install Node 20 (.ci/run does)")?;
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    prerequisite(
        sdk.is_file(),
        "the TypeScript SDK (tests/clients/ts/node_modules)",
        "run `npm ci` in tests/clients/ts (.ci/run does)",
    )?;
    let mut command = Command::new("node");
    command.arg(dir.join("client.mjs"));
    Some(command)
}

/// The calls, each with what the client must show: a success (`None`), or a tool error with
/// its code and a phrase of its message. The quota is 2 units: the two executed calls spend it.
fn ts_calls() -> Vec<(Value, Option<(&'static str, &'static str)>)> {
    let call = |name: &str, arguments: Value, k: &str| json!({"name": name, "arguments": arguments, "_meta": key(k)});
    vec![
        (call("search_docs", signing(), "ts/ok"), None),
        (
            call(
                "search_docs",
                json!({"query": "signing", "top_k": 101}),
                "ts/top_k",
            ),
            Some((
                "invalid_arguments",
                "top_k must be between 1 and 100, not 101",
            )),
        ),
        (
            call("search_docs", json!({"query": ""}), "ts/empty"),
            Some(("invalid_arguments", "query must not be empty")),
        ),
        (
            call("search_docs", json!({"query": "backups"}), "ts/ok"),
            Some((
                "idempotency_key_reused",
                "idempotency key 'ts/ok' was first used with different arguments",
            )),
        ),
        (
            call(
                "get_chunk",
                json!({"chunk_id": "0".repeat(64)}),
                "ts/missing",
            ),
            Some(("not_found", "no chunk 0000")),
        ),
        (
            call("search_docs", json!({"query": "backups"}), "ts/quota"),
            Some(("rate_limited", "rate limit exceeded; retry after 59 s")),
        ),
    ]
}

fn assert_ts_results(transport: &str, out: &Value) {
    assert_eq!(
        out["tools"],
        json!([
            "search_docs",
            "get_chunk",
            "read_document",
            "list_documents"
        ]),
        "{out}"
    );
    let results = out["results"].as_array().expect("results");
    let calls = ts_calls();
    assert_eq!(results.len(), calls.len(), "{out}");
    for ((call, expected), result) in calls.iter().zip(results) {
        let case = format!("{transport}: {}", call["arguments"]);
        assert!(
            result["thrown"].is_null(),
            "{case}: the TypeScript SDK refused the result: {}",
            result["thrown"]
        );
        let text = result["text"].as_str().unwrap_or_default();
        match expected {
            None => {
                assert_eq!(result["isError"], false, "{case}: {result}");
                assert!(
                    result["structuredContent"]["hits"].is_array(),
                    "{case}: {result}"
                );
            }
            Some((code, message)) => {
                assert_eq!(result["isError"], true, "{case}: {result}");
                assert!(
                    text.contains(message),
                    "{case}: the client shows {text:?}, not {message:?}"
                );
                assert_eq!(
                    result["structuredContent"]["error"]["code"], *code,
                    "{case}: {result}"
                );
            }
        }
    }
}

#[test]
fn typescript_sdk_shows_every_tool_error_over_stdio() {
    let Some(command) = ts_client() else { return };
    let env = sample_store();
    let (fake_name, fake_value) = frozen_clock()[0];
    let plan = json!({
        "stdio": {
            "command": BIN,
            "args": ["--store", env.store, "mcp", "--rate-limit", "2/60s"],
            "env": {fake_name: fake_value}
        },
        "calls": ts_calls().into_iter().map(|(call, _)| call).collect::<Vec<_>>(),
    });
    let out = run_client(command, &env, &plan, "ts-stdio");
    assert_ts_results("stdio", &out);

    // Busy: the ledger's write lock held elsewhere for the whole call.
    let plan = json!({
        "stdio": {"command": BIN, "args": ["--store", env.store, "mcp"]},
        "calls": [{"name": "search_docs", "arguments": signing(), "_meta": key("ts/busy")}],
    });
    let lock = WriteLock::take(&env.store);
    let command = ts_client().expect("checked above");
    let out = run_client(command, &env, &plan, "ts-stdio-busy");
    drop(lock);
    let result = &out["results"][0];
    assert!(result["thrown"].is_null(), "busy: {}", result["thrown"]);
    assert_eq!(result["isError"], true, "busy: {result}");
    assert_eq!(
        result["structuredContent"]["error"]["code"], "busy",
        "{result}"
    );
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("the store is busy; retry after 1 s with the same key"),
        "busy: the client shows {text:?}"
    );
}

#[test]
fn typescript_sdk_shows_every_tool_error_over_http() {
    let Some(command) = ts_client() else { return };
    let env = sample_store();
    let server = serve_with_env(&env, &["--rate-limit", "2/60s"], &frozen_clock());
    let plan = json!({
        "http": format!("{}/mcp", server.base),
        "calls": ts_calls().into_iter().map(|(call, _)| call).collect::<Vec<_>>(),
    });
    let out = run_client(command, &env, &plan, "ts-http");
    assert_ts_results("http", &out);
}

// ---------------------------------------------------------------------------------------------
// Reading: read_document, list_documents and the resources, through each SDK.

/// A search, then reads around its first hit, by lines, lists by glob and tags and by a field,
/// and a path no document has.
fn read_calls(prefix: &str) -> Value {
    let call = |name: &str, arguments: Value, k: &str| json!({"name": name, "arguments": arguments, "_meta": key(&format!("{prefix}/{k}"))});
    json!([
        call(
            "search_docs",
            json!({"query": "restore a database", "top_k": 1}),
            "search"
        ),
        call(
            "read_document",
            json!({"chunk_id": "$first_hit", "around": 1}),
            "around"
        ),
        call(
            "read_document",
            json!({"path": "handbook/backups.md", "lines": [12, 16]}),
            "lines"
        ),
        call(
            "list_documents",
            json!({"path_glob": "handbook/*.md", "tags": ["operations"]}),
            "list"
        ),
        call(
            "list_documents",
            json!({"fields": {"title": "signing key rotation"}}),
            "fields"
        ),
        call(
            "read_document",
            json!({"path": "handbook/nope.md"}),
            "missing"
        ),
    ])
}

const BACKUPS: &str = "groundidx://docs/handbook/backups.md";
const NO_SUCH: &str = "groundidx://docs/handbook/nope.md";

fn paths(answer: &Value) -> Vec<&str> {
    answer["documents"]
        .as_array()
        .expect("documents")
        .iter()
        .map(|d| d["path"].as_str().expect("path"))
        .collect()
}

/// What each SDK must show for `read_calls` (results as `{isError, structuredContent}`), and
/// for the resources: the listing, the template, a document's text with its headings, and
/// MCP's resource-not-found for a path no document has.
fn assert_reads(case: &str, results: &[Value], list: &Value, template: &Value, text: &str) {
    assert_eq!(results.len(), 6, "{case}: {results:?}");
    for (i, result) in results.iter().take(5).enumerate() {
        assert_eq!(result["isError"], false, "{case}: call {i}: {result}");
    }
    let hit = &results[0]["structuredContent"]["hits"][0];
    let around = &results[1]["structuredContent"];
    assert_eq!(
        around["document"]["path"], "handbook/backups.md",
        "{case}: {around}"
    );
    let ids: Vec<&Value> = around["passages"]
        .as_array()
        .expect("passages")
        .iter()
        .map(|p| &p["chunk_id"])
        .collect();
    assert!(
        ids.len() == 3 && ids[1] == &hit["chunk_id"],
        "{case}: the hit and one passage each side: {around}"
    );
    let lines = &results[2]["structuredContent"];
    assert_eq!(
        lines["passages"][0]["heading"], "Backups and restore > Schedule",
        "{case}: {lines}"
    );
    assert_eq!(
        lines["passages"].as_array().map(Vec::len),
        Some(1),
        "{case}"
    );
    assert_eq!(
        paths(&results[3]["structuredContent"]),
        [
            "handbook/backups.md",
            "handbook/deploys.md",
            "handbook/key-rotation.md"
        ],
        "{case}"
    );
    assert_eq!(
        paths(&results[4]["structuredContent"]),
        ["handbook/key-rotation.md"],
        "{case}"
    );
    assert_eq!(results[5]["isError"], true, "{case}: {}", results[5]);
    assert_eq!(
        results[5]["structuredContent"]["error"]["code"], "not_found",
        "{case}: {}",
        results[5]
    );
    let uris: Vec<&str> = list
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["uri"].as_str().expect("uri"))
        .collect();
    assert_eq!(uris.len(), 8, "{case}: every sample document: {uris:?}");
    assert!(uris.contains(&BACKUPS), "{case}: {uris:?}");
    assert_eq!(
        template["uriTemplate"], "groundidx://{root}/{path}",
        "{case}"
    );
    assert!(
        text.contains("## Restore a database\n\nRestores go to a new instance"),
        "{case}: {text}"
    );
}

#[test]
fn typescript_sdk_reads_documents_and_resources_over_both_transports() {
    let Some(_) = ts_client() else { return };
    let env = sample_store();
    let server = serve_with_env(&env, &[], &[]);
    let transports = [
        (
            "stdio",
            json!({"stdio": {"command": BIN, "args": ["--store", env.store, "mcp"]}}),
        ),
        ("http", json!({"http": format!("{}/mcp", server.base)})),
    ];
    for (transport, mut plan) in transports {
        plan["calls"] = read_calls(&format!("ts/read/{transport}"));
        plan["resources"] = json!({"read": [BACKUPS, NO_SUCH]});
        let command = ts_client().expect("checked above");
        let out = run_client(command, &env, &plan, &format!("ts-read-{transport}"));
        let results = out["results"].as_array().expect("results");
        for result in results {
            assert!(
                result["thrown"].is_null(),
                "{transport}: the SDK refused {result}"
            );
        }
        let resources = &out["resources"];
        let reads = resources["reads"].as_array().expect("reads");
        assert_reads(
            transport,
            results,
            &resources["list"],
            &resources["templates"][0],
            reads[0]["contents"][0]["text"].as_str().unwrap_or_default(),
        );
        assert_eq!(reads[1]["code"], -32002, "{transport}: {}", reads[1]);
    }
}

#[test]
fn python_sdk_reads_documents_and_resources_in_each_revision() {
    let Some(_) = py_client() else { return };
    let env = sample_store();
    let server = serve_with_env(&env, &[], &[]);
    for mode in MODES {
        let transports = [
            (
                "stdio",
                json!({"stdio": {"command": BIN, "args": ["--store", env.store, "mcp"]}}),
            ),
            ("http", json!({"http": format!("{}/mcp", server.base)})),
        ];
        for (transport, mut plan) in transports {
            let case = format!("{transport} {mode}");
            plan["mode"] = json!(mode);
            plan["calls"] = read_calls(&format!("py/read/{transport}/{mode}"));
            plan["resources"] = json!({"read": [BACKUPS, NO_SUCH]});
            let command = py_client().expect("checked above");
            let out = run_client(command, &env, &plan, &format!("py-read-{transport}-{mode}"));
            let resources = &out["resources"];
            assert_reads(
                &case,
                out["results"].as_array().expect("results"),
                &resources["list"]["resources"],
                &resources["templates"]["resourceTemplates"][0],
                resources["reads"][0]["contents"][0]["text"]
                    .as_str()
                    .unwrap_or_default(),
            );
            // Resource not found: -32002 before 2026-07-28, invalid params (-32602) from it on.
            let not_found = if mode == "legacy" { -32002 } else { -32602 };
            assert_eq!(
                resources["reads"][1]["error"]["code"], not_found,
                "{case}: {}",
                resources["reads"][1]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Python, P4.

/// The Python SDK's modes: the initialize handshake, and the 2026-07-28 revision adopted
/// directly (no handshake, the protocol version on every request).
const MODES: [&str; 2] = ["legacy", "2026-07-28"];

fn py_client() -> Option<Command> {
    let dir = clients_dir().join("py");
    let python = dir.join(".venv/bin/python");
    let installed = Command::new(&python)
        .args(["-c", "import mcp.client.client"])
        .output()
        .is_ok_and(|o| o.status.success());
    prerequisite(
        installed,
        "the Python SDK (tests/clients/py/.venv)",
        "run `python3 -m venv tests/clients/py/.venv && tests/clients/py/.venv/bin/pip install -r tests/clients/py/requirements.txt` (.ci/run does)",
    )?;
    let mut command = Command::new(python);
    command.arg(dir.join("client.py"));
    Some(command)
}

/// A result without what legitimately differs between two executions: the key in `_meta`.
fn comparable(result: &Value) -> Value {
    let mut result = result.clone();
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("groundidx/idempotencyKey");
    }
    result
}

/// Each mode's calls: a fresh search, an unknown chunk, a refused call, and a replay of a key the
/// first mode used (`p4/shared`), for one transport.
fn p4_calls(transport: &str, mode: &str) -> Value {
    json!([
        {"name": "search_docs", "arguments": signing(), "_meta": key(&format!("p4/{transport}/{mode}"))},
        {"name": "get_chunk", "arguments": {"chunk_id": "0".repeat(64)}, "_meta": key(&format!("p4/{transport}/{mode}/missing"))},
        {"name": "search_docs", "arguments": {"query": "signing", "top_k": 0}, "_meta": key("p4/refused")},
        {"name": "search_docs", "arguments": {"query": "backups restore"}, "_meta": key(&format!("p4/{transport}/shared"))},
    ])
}

fn assert_modes_agree(transport: &str, outs: &[Value]) {
    let results: Vec<&Vec<Value>> = outs
        .iter()
        .map(|out| out["results"].as_array().expect("results"))
        .collect();
    let (first, second) = (results[0], results[1]);
    assert_eq!(first.len(), 4, "{transport}: {first:?}");
    assert_eq!(second.len(), 4, "{transport}: {second:?}");
    // Executed in each mode: equal but for the key.
    for i in 0..2 {
        assert_eq!(
            comparable(&first[i]),
            comparable(&second[i]),
            "{transport}: call {i} differs between {MODES:?}"
        );
        assert_eq!(
            first[i]["_meta"]["groundidx/replayed"], false,
            "{transport}"
        );
        assert_eq!(
            second[i]["_meta"]["groundidx/replayed"], false,
            "{transport}"
        );
    }
    assert_eq!(first[0]["isError"], false, "{transport}: {}", first[0]);
    assert_eq!(
        first[1]["structuredContent"]["error"]["code"], "not_found",
        "{transport}: {}",
        first[1]
    );
    // Refused in each mode, identically.
    assert_eq!(first[2], second[2], "{transport}: the refusal differs");
    assert_eq!(
        first[2]["structuredContent"]["error"]["code"], "invalid_arguments",
        "{transport}: {}",
        first[2]
    );
    // The key the first mode executed is replayed by the second, byte for byte.
    assert_eq!(
        first[3]["_meta"]["groundidx/replayed"], false,
        "{transport}"
    );
    assert_eq!(
        second[3]["_meta"]["groundidx/replayed"], true,
        "{transport}"
    );
    assert_eq!(first[3]["content"], second[3]["content"], "{transport}");
    assert_eq!(
        first[3]["structuredContent"], second[3]["structuredContent"],
        "{transport}"
    );
    for out in outs {
        for result in out["results"].as_array().expect("results") {
            assert_eq!(result["resultType"], "complete", "{transport}: {result}");
        }
    }
}

#[test]
fn p4_python_sdk_gets_identical_results_in_each_protocol_revision_over_stdio() {
    let Some(_) = py_client() else { return };
    let env = sample_store();
    let outs: Vec<Value> = MODES
        .iter()
        .map(|mode| {
            let plan = json!({
                "mode": mode,
                "stdio": {"command": BIN, "args": ["--store", env.store, "mcp"]},
                "calls": p4_calls("stdio", mode),
            });
            let command = py_client().expect("checked above");
            run_client(command, &env, &plan, &format!("py-stdio-{mode}"))
        })
        .collect();
    assert_modes_agree("stdio", &outs);
}

#[test]
fn p4_python_sdk_gets_identical_results_in_each_protocol_revision_over_http() {
    let Some(_) = py_client() else { return };
    let env = sample_store();
    let server = serve_with_env(&env, &[], &[]);
    let outs: Vec<Value> = MODES
        .iter()
        .map(|mode| {
            let plan = json!({
                "mode": mode,
                "http": format!("{}/mcp", server.base),
                "calls": p4_calls("http", mode),
            });
            let command = py_client().expect("checked above");
            run_client(command, &env, &plan, &format!("py-http-{mode}"))
        })
        .collect();
    assert_modes_agree("http", &outs);
}

/// The wire bytes of P4, which the SDKs hide (the Python SDK fills `resultType` in itself): the
/// same `tools/call` over `/mcp` as 2025-11-25 and as 2026-07-28 gets the same result, plus
/// `resultType: "complete"` in 2026-07-28 only.
#[test]
fn p4_raw_results_are_identical_in_each_revision_but_for_result_type() {
    let env = sample_store();
    let server = serve_with_env(&env, &[], &[]);
    let call = |version: &str, arguments: Value, k: &str| -> Value {
        let mut params = json!({"name": "search_docs", "arguments": arguments, "_meta": key(k)});
        let mut headers = vec![
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", version),
        ];
        if version == "2026-07-28" {
            // 2026-07-28 has no handshake: each request says who it is, and names its method
            // and tool in headers.
            params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(version);
            params["_meta"]["io.modelcontextprotocol/clientInfo"] =
                json!({"name": "groundidx-it", "version": "0"});
            params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
            headers.extend([("Mcp-Method", "tools/call"), ("Mcp-Name", "search_docs")]);
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let reply = server.post("/mcp", &headers, &body.to_string());
        assert_eq!(reply.status, 200, "{version}: {reply}");
        let result = reply.json()["result"].clone();
        assert!(result.is_object(), "{version}: {reply}");
        result
    };
    let without_result_type = |result: &Value| {
        let mut result = comparable(result);
        result
            .as_object_mut()
            .expect("a result")
            .remove("resultType");
        result
    };
    for (arguments, what) in [
        (signing(), "a search"),
        (json!({"query": ""}), "a refused call"),
    ] {
        let old = call(
            "2025-11-25",
            arguments.clone(),
            &format!("p4/raw/old/{what}"),
        );
        let new = call("2026-07-28", arguments, &format!("p4/raw/new/{what}"));
        assert!(old.get("resultType").is_none(), "{what}: {old}");
        assert_eq!(new["resultType"], "complete", "{what}: {new}");
        assert_eq!(
            without_result_type(&old),
            without_result_type(&new),
            "{what}: the revisions differ"
        );
    }
}
