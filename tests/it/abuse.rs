//! Abuse of the agent path: hostile bytes on the MCP stdio stream, malformed, oversized and
//! mistyped HTTP bodies, extreme arguments, path-like chunk IDs, links out of the ingested
//! folder, and callers without the right token on a non-loopback server. Each gets a clear
//! error (or, for bytes that carry no request id, silence), nothing is written for it, no
//! answer ever carries text from outside the ingested folders, and the same process goes on
//! answering a normal search correctly.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use groundidx::agent::tools::MAX_QUERY_CHARS;
use groundidx::server::MAX_BODY_BYTES;
use serde_json::{Value, json};

use crate::support::Env;
use crate::support::http::{Reply, Server, launch, serve};
use crate::support::ledger::{counts, executed};
use crate::support::mcp::{RawMcp, key, read_lossy, sample_store, signing};

// ---------------------------------------------------------------------------------------------
// Helpers.

/// The chunk IDs of a search answer, in order.
fn ids(answer: &Value) -> Vec<String> {
    answer["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("no hits array: {answer}"))
        .iter()
        .map(|hit| hit["chunk_id"].as_str().expect("chunk_id").to_string())
        .collect()
}

/// Asserts an HTTP problem+json refusal with this status and (when given) code.
fn assert_problem(reply: &Reply, status: u16, code: Option<&str>) {
    assert_eq!(reply.status, status, "{reply}");
    assert!(
        reply
            .header("Content-Type")
            .is_some_and(|ct| ct.starts_with("application/problem+json")),
        "{reply}"
    );
    let problem = reply.json();
    assert!(
        problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{reply}"
    );
    if let Some(code) = code {
        assert_eq!(problem["code"], code, "{reply}");
    }
}

/// A normal search on `server` answers exactly the baseline; counts the calls made.
struct Prober<'a> {
    server: &'a Server,
    baseline: Vec<String>,
    calls: i64,
}

impl<'a> Prober<'a> {
    fn new(server: &'a Server) -> Prober<'a> {
        let reply = server.search(None, &signing().to_string());
        assert_eq!(reply.status, 200, "{reply}");
        let baseline = ids(&reply.json());
        assert!(!baseline.is_empty(), "{reply}");
        Prober {
            server,
            baseline,
            calls: 1,
        }
    }

    fn still_answers(&mut self, after: &str) {
        let reply = self.server.search(None, &signing().to_string());
        self.calls += 1;
        assert_eq!(
            reply.status,
            200,
            "after {after} a normal search fails: {reply}; server stderr: {}",
            self.server.stderr()
        );
        assert_eq!(ids(&reply.json()), self.baseline, "after {after}");
    }
}

/// One raw HTTP/1.1 request with `Connection: close`; returns the status and the whole
/// response. A body is announced with `Expect: 100-continue` and sent only when the server asks
/// for it, so a refusal before reading (413) arrives whole.
fn raw_http(addr: &str, head: &[u8], body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut request = head.to_vec();
    if !body.is_empty() {
        request.extend_from_slice(
            format!("Content-Length: {}\r\nExpect: 100-continue\r\n", body.len()).as_bytes(),
        );
    }
    request.extend_from_slice(b"Connection: close\r\n\r\n");
    stream.write_all(&request).expect("send the head");
    let mut response = Vec::new();
    if !body.is_empty() {
        let mut first = [0u8; 4096];
        let n = stream.read(&mut first).expect("read the interim response");
        if first[..n].starts_with(b"HTTP/1.1 100") {
            let _ = stream.write_all(body);
            let rest = &first[..n];
            // The interim response may share a read with the final one.
            if let Some(at) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
                response.extend_from_slice(&rest[at + 4..]);
            }
        } else {
            response.extend_from_slice(&first[..n]);
        }
    }
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    (status, text)
}

/// The request line, Host and headers of a POST.
fn post_head(path: &str, host: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.into_bytes()
}

const MCP_JSON: &[(&str, &str)] = &[
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
    ("MCP-Protocol-Version", "2025-11-25"),
];

/// A JSON-RPC error message (no `result`) with this code.
fn assert_rpc_error(message: &Value, code: i64) {
    assert!(message.get("result").is_none(), "{message}");
    assert_eq!(message["error"]["code"], code, "{message}");
    assert!(
        message["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{message}"
    );
}

/// The body of an HTTP response (after the blank line).
fn body_of(response: &str) -> &str {
    response.split("\r\n\r\n").nth(1).unwrap_or("")
}

/// `groundidx mcp` fed raw bytes: every stdout line is kept as bytes, to check that nothing but
/// JSON-RPC ever comes out.
struct RawStdio {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    seen: Vec<Vec<u8>>,
    stderr: PathBuf,
}

impl RawStdio {
    fn start(env: &Env) -> RawStdio {
        let stderr = env.tmp.path().join("abuse-mcp.stderr");
        let mut child = env
            .command(&["mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn groundidx mcp");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        RawStdio {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap_or_else(|err| {
            panic!(
                "the server stopped reading ({err}); stderr: {}",
                read_lossy(&self.stderr)
            )
        });
        stdin.flush().expect("flush");
    }

    fn send(&mut self, message: &Value) {
        self.write(format!("{message}\n").as_bytes());
    }

    /// Reads until the response to `id`; returns it and every other message before it.
    fn response(&mut self, id: i64) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut others = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(err) => panic!(
                    "no response to id {id} ({err:?}); the server {}; stderr: {}",
                    match self.child.try_wait() {
                        Ok(Some(status)) => format!("exited: {status}"),
                        _ => "is still running".to_string(),
                    },
                    read_lossy(&self.stderr)
                ),
            };
            self.seen.push(line.clone());
            let message: Value = serde_json::from_slice(&line).unwrap_or_else(|err| {
                panic!(
                    "a stdout line is not JSON ({err}): {:?}",
                    String::from_utf8_lossy(&line)
                )
            });
            if message.get("method").is_none() && message["id"] == json!(id) {
                return (message, others);
            }
            others.push(message);
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(id)
    }

    /// Closes stdin and returns the exit status and every stdout line.
    fn finish(mut self) -> (Option<std::process::ExitStatus>, Vec<Vec<u8>>) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        (status, std::mem::take(&mut self.seen))
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// MCP over stdio.

#[test]
fn stdio_survives_hostile_bytes_and_writes_only_json_rpc() {
    let env = sample_store();
    let mut mcp = RawStdio::start(&env);
    let (init, _) = mcp.request(
        0,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "abuse", "version": "0"}
        }),
    );
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let mut next_id = 100;
    let mut probes = 0;
    let mut baseline: Option<Vec<String>> = None;
    // A keyed search after each case: it must answer exactly as the first did. Returns what
    // the server wrote in reply to the case (everything before the probe's answer).
    let mut probe = |mcp: &mut RawStdio, case: &str| -> Vec<Value> {
        next_id += 1;
        probes += 1;
        let (answer, before) = mcp.request(
            next_id,
            "tools/call",
            json!({"name": "search_docs", "arguments": signing(),
                   "_meta": key(&format!("abuse/probe/{next_id}"))}),
        );
        let result = &answer["result"];
        assert_eq!(result["isError"], false, "after {case}: {answer}");
        let found = ids(&result["structuredContent"]);
        match &baseline {
            None => baseline = Some(found),
            Some(expected) => assert_eq!(&found, expected, "after {case}"),
        }
        before
    };
    // Bytes that carry no request id get no answer, or one without an id.
    let no_answer = |case: &str, replies: &[Value]| {
        for reply in replies {
            assert!(
                reply.get("result").is_none() && reply["id"].is_null(),
                "{case} got an answer: {reply}"
            );
        }
    };

    assert!(probe(&mut mcp, "the handshake").is_empty());

    let oversized_junk = [vec![b'x'; 5 << 20], b"\n".to_vec()].concat();
    let mut over_the_line_cap =
        br#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"pad":""#.to_vec();
    over_the_line_cap.extend(std::iter::repeat_n(b'a', 17 << 20));
    over_the_line_cap.extend_from_slice(b"\"}}\n");
    let silent: Vec<(&str, Vec<u8>)> = vec![
        ("garbage bytes", b"\x01\x02garbage \x7f\x1b[31m\n".to_vec()),
        (
            "invalid UTF-8",
            b"\xff\xfe\xfd{\"jsonrpc\":\"2.0\xc3\x28\"}\n".to_vec(),
        ),
        (
            "a truncated message",
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sear"#
                .iter()
                .copied()
                .chain(*b"\n")
                .collect(),
        ),
        ("a blank line", b"\n\r\n".to_vec()),
        ("a line of 5 MB", oversized_junk),
        ("a line over the 16 MiB line cap", over_the_line_cap),
        (
            "a notification with bad params",
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":[1,2]}}
"#
            .to_vec(),
        ),
        (
            "a notification whose params are not an object",
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":7}
"#
            .to_vec(),
        ),
        (
            "an unknown notification",
            br#"{"jsonrpc":"2.0","method":"notifications/bogus","params":{"x":1}}
"#
            .to_vec(),
        ),
        ("a JSON string", b"\"tools/list\"\n".to_vec()),
        (
            "a message without a method",
            br#"{"jsonrpc":"2.0","id":8}"#.iter().copied().chain(*b"\n").collect(),
        ),
    ];
    for (case, bytes) in &silent {
        mcp.write(bytes);
        no_answer(case, &probe(&mut mcp, case));
    }

    // A batch is refused as an invalid request; none of its calls runs.
    mcp.write(
        format!(
            "{}\n",
            json!([
                {"jsonrpc": "2.0", "id": 11, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 12, "method": "tools/call",
                 "params": {"name": "search_docs", "arguments": signing(), "_meta": key("batch")}}
            ])
        )
        .as_bytes(),
    );
    let replies = probe(&mut mcp, "a batch");
    no_answer("a batch", &replies);
    assert!(
        replies.iter().any(|r| r["error"]["code"] == -32600),
        "a batch must get an invalid-request error: {replies:?}"
    );

    // Requests with an id get an error naming what is wrong.
    for (id, method, params, code) in [
        (21, "no/such/method", json!({}), -32601),
        (22, "prompts/list", json!({}), -32601),
        (26, "resources/read", json!({"uri": 7}), -32602),
        (27, "resources/read", json!({}), -32602),
        (28, "resources/nothing", json!({}), -32601),
        (
            29,
            "resources/read",
            json!({"uri": "groundidx://docs/../../etc/passwd"}),
            -32002,
        ),
        (
            23,
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
            -32602,
        ),
        (
            24,
            "tools/call",
            json!({"name": "../../etc/passwd", "arguments": {}}),
            -32602,
        ),
        (
            25,
            "tools/call",
            json!({"name": "search_docs", "arguments": "signing"}),
            -32602,
        ),
    ] {
        let (reply, _) = mcp.request(id, method, params.clone());
        assert_rpc_error(&reply, code);
        probe(&mut mcp, &format!("{method} {params}"));
    }

    // A tools/call of several MB with an over-long query: a tool error, not a crash.
    let long = "signing ".repeat((4 << 20) / 8);
    let (reply, _) = mcp.request(
        31,
        "tools/call",
        json!({"name": "search_docs", "arguments": {"query": long}, "_meta": key("abuse/long")}),
    );
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    assert_eq!(
        reply["result"]["structuredContent"]["error"]["code"], "invalid_arguments",
        "{reply}"
    );
    probe(&mut mcp, "a 4 MB query");

    // A truncated message, then a valid one on the next line: the valid one is served.
    mcp.write(b"{\"jsonrpc\":\"2.0\",\"id\":41,\"method\":\"tools/li\n");
    let (listed, _) = mcp.request(42, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    probe(&mut mcp, "a truncated message and a valid one");

    let (status, lines) = mcp.finish();
    assert!(lines.len() >= 20, "{} lines", lines.len());
    for line in &lines {
        let message: Value = serde_json::from_slice(line).unwrap_or_else(|err| {
            panic!(
                "stdout carries something other than JSON ({err}): {:?}",
                String::from_utf8_lossy(line)
            )
        });
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {message}");
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "the server must exit cleanly at end of input: {status:?}"
    );
    // Only the probes ran, and the read of a traversal URI (a read_document call that found
    // nothing, recorded like any executed call): none of the hostile inputs was executed or
    // written.
    assert_eq!(counts(&env.store), executed(probes + 1));
}

// ---------------------------------------------------------------------------------------------
// HTTP: the JSON API and /mcp.

#[test]
fn http_refuses_malformed_oversized_and_mistyped_bodies_and_keeps_serving() {
    let env = sample_store();
    let server = serve(&env, &[]);
    let mut prober = Prober::new(&server);
    let too_big = format!(
        "{{\"query\":\"{}\"}}",
        "signing ".repeat(MAX_BODY_BYTES / 8 + 1)
    );

    // The JSON API.
    for (case, content_type, body) in [
        ("truncated JSON", "application/json", r#"{"query":"sig"#),
        (
            "a body that is not JSON",
            "application/json",
            "query=signing",
        ),
        ("an empty body", "application/json", ""),
        ("XML", "application/json", "<query>signing</query>"),
        (
            "a form",
            "application/x-www-form-urlencoded",
            "query=signing&top_k=3",
        ),
        ("text", "text/plain", "rotate the signing key"),
    ] {
        let reply = server.tool("search_docs", &[("Content-Type", content_type)], body);
        assert_problem(&reply, 400, Some("invalid_arguments"));
        assert!(
            reply.json()["detail"]
                .as_str()
                .is_some_and(|d| d.contains("JSON")),
            "{reply}"
        );
        prober.still_answers(case);
    }
    let (status, response) = raw_http(
        &server.addr,
        &post_head(
            "/v1/tools/search_docs",
            &server.addr,
            &[("Content-Type", "application/json")],
        ),
        b"{\"query\":\"\xff\xfe\"}",
    );
    assert_eq!(status, 400, "{response}");
    prober.still_answers("invalid UTF-8 in a JSON body");
    let (status, response) = raw_http(
        &server.addr,
        &post_head(
            "/v1/tools/search_docs",
            &server.addr,
            &[("Content-Type", "application/json")],
        ),
        too_big.as_bytes(),
    );
    assert_eq!(
        status, 413,
        "a body over {MAX_BODY_BYTES} bytes: {response}"
    );
    assert!(body_of(&response).contains("body_too_large"), "{response}");
    prober.still_answers("a body over the limit");
    for path in [
        "/v1/tools/no_such_tool",
        "/v1/tools/..%2F..%2Fetc%2Fpasswd",
        "/v1/tools/search_docs%00",
        "/v1/tools/search_docs/extra",
        "/v1/search_docs",
    ] {
        let reply = server.post(path, &[], &signing().to_string());
        assert_eq!(reply.status, 404, "{path}: {reply}");
        assert!(!reply.body.contains("root:"), "{path}: {reply}");
        prober.still_answers(path);
    }

    // MCP Streamable HTTP.
    let mcp_post = |body: &[u8]| {
        raw_http(
            &server.addr,
            &post_head("/mcp", &server.addr, MCP_JSON),
            body,
        )
    };
    for (case, body, code) in [
        (
            "truncated JSON",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/li"#.to_vec(),
            -32700,
        ),
        ("a body that is not JSON", b"garbage".to_vec(), -32700),
        ("invalid UTF-8", b"\xff\xfe{}".to_vec(), -32700),
        (
            "a batch",
            json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}])
                .to_string()
                .into_bytes(),
            -32600,
        ),
        (
            "an object that is not JSON-RPC",
            br#"{"query":"signing"}"#.to_vec(),
            -32600,
        ),
    ] {
        let (status, response) = mcp_post(&body);
        assert_eq!(status, 400, "{case}: {response}");
        let message: Value = serde_json::from_str(body_of(&response))
            .unwrap_or_else(|err| panic!("{case}: the body is not JSON ({err}): {response}"));
        assert_rpc_error(&message, code);
        assert!(message["id"].is_null(), "{message}");
        prober.still_answers(case);
    }
    let big_call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "search_docs", "arguments": {"query": "signing ".repeat(MAX_BODY_BYTES / 8 + 1)}}});
    let (status, response) = mcp_post(big_call.to_string().as_bytes());
    assert_eq!(
        status, 413,
        "a body over {MAX_BODY_BYTES} bytes on /mcp: {response}"
    );
    prober.still_answers("an /mcp body over the limit");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let reply = server.post(
        "/mcp",
        &[
            ("Content-Type", "text/plain"),
            ("Accept", "application/json, text/event-stream"),
        ],
        &list,
    );
    assert_eq!(reply.status, 415, "{reply}");
    assert!(reply.body.contains("application/json"), "{reply}");
    prober.still_answers("a text/plain body on /mcp");
    for (id, method, params, code) in [
        (2, "no/such/method", json!({}), -32601),
        (
            3,
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
            -32602,
        ),
    ] {
        let (reply, message) = server.mcp(
            &[],
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        assert_eq!(reply.status, 200, "{reply}");
        assert_rpc_error(&message, code);
        prober.still_answers(method);
    }

    assert_eq!(
        counts(&env.store),
        executed(prober.calls),
        "a refused request wrote something"
    );
}

// ---------------------------------------------------------------------------------------------
// Extreme arguments.

/// Bytes of a file outside any ingested folder that no answer may contain.
fn passwd_marker() -> Option<String> {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| text.lines().next().map(str::to_string))
        .filter(|line| line.len() >= 8)
}

fn path_like_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "../../etc/passwd",
        "/etc/passwd",
        "..%2F..%2Fetc%2Fpasswd",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "file:///etc/passwd",
        "..\\..\\etc\\passwd",
        "\u{0}",
        "ab\u{0}cd",
        "",
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect();
    ids.push(format!("{}\u{0}", "0".repeat(63)));
    ids.push(format!("{}/../../etc/passwd", "a".repeat(64)));
    ids.push("A".repeat(64));
    ids.push("a".repeat(10 * 1024));
    ids
}

fn bad_top_ks() -> Vec<Value> {
    vec![
        json!(1_000_000),
        json!(-1),
        json!(0),
        json!("5"),
        json!(2.5),
        json!(1e30),
        json!(u64::MAX),
        json!(true),
        json!([5]),
    ]
}

#[test]
fn extreme_arguments_get_clear_errors_and_never_file_contents() {
    let env = sample_store();
    let marker = passwd_marker();
    let leaks = |text: &str| marker.as_deref().is_some_and(|m| text.contains(m));
    let server = serve(&env, &[]);
    let mut prober = Prober::new(&server);

    // Queries at the length limit are served; one character more is refused.
    for query in [
        "rotate the signing key ".repeat(MAX_QUERY_CHARS / 23 + 1)[..MAX_QUERY_CHARS].to_string(),
        "\u{4e2d}".repeat(MAX_QUERY_CHARS),
        "\"".repeat(MAX_QUERY_CHARS),
        "(".repeat(MAX_QUERY_CHARS),
        "sign\u{0}ing ".repeat(MAX_QUERY_CHARS / 9),
    ] {
        let reply = server.search(None, &json!({"query": query, "top_k": 100}).to_string());
        prober.calls += 1;
        assert_eq!(reply.status, 200, "{reply}");
        assert!(reply.json()["hits"].is_array(), "{reply}");
        prober.still_answers("a 10,000-character query");
    }
    let over = "a".repeat(MAX_QUERY_CHARS + 1);
    let reply = server.search(None, &json!({"query": over}).to_string());
    assert_problem(&reply, 400, Some("invalid_arguments"));
    assert!(reply.body.contains("10000"), "the limit is named: {reply}");

    for top_k in bad_top_ks() {
        let reply = server.search(
            None,
            &json!({"query": "signing", "top_k": top_k}).to_string(),
        );
        assert_problem(&reply, 400, Some("invalid_arguments"));
        assert!(reply.body.contains("top_k"), "the field is named: {reply}");
        prober.still_answers(&format!("top_k {top_k}"));
    }
    for id in path_like_ids() {
        let reply = server.tool("get_chunk", &[], &json!({"chunk_id": id}).to_string());
        assert_problem(&reply, 400, Some("invalid_arguments"));
        assert!(!leaks(&reply.body), "file contents in {reply}");
        prober.still_answers("a path-like chunk_id");
    }
    let unknown = server.tool(
        "get_chunk",
        &[],
        &json!({"chunk_id": "f".repeat(64)}).to_string(),
    );
    prober.calls += 1;
    assert_eq!(unknown.status, 404, "{unknown}");
    assert_eq!(counts(&env.store), executed(prober.calls));
    let (baseline, calls) = (prober.baseline, prober.calls);
    drop(server);

    // The same over MCP stdio.
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize();
    let mut id = 0;
    let mut call = |mcp: &mut RawMcp, tool: &str, arguments: Value| -> Value {
        id += 1;
        let (reply, _) = mcp.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        );
        assert!(!leaks(&reply.to_string()), "file contents in {reply}");
        reply["result"].clone()
    };
    let mut refused = Vec::new();
    for top_k in bad_top_ks() {
        refused.push(call(
            &mut mcp,
            "search_docs",
            json!({"query": "signing", "top_k": top_k}),
        ));
    }
    for chunk_id in path_like_ids() {
        refused.push(call(&mut mcp, "get_chunk", json!({"chunk_id": chunk_id})));
    }
    refused.push(call(
        &mut mcp,
        "search_docs",
        json!({"query": "a".repeat(MAX_QUERY_CHARS + 1)}),
    ));
    for result in &refused {
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(
            result["structuredContent"]["error"]["code"], "invalid_arguments",
            "{result}"
        );
    }
    let long = "rotate the signing key ".repeat(MAX_QUERY_CHARS / 23);
    let served = call(
        &mut mcp,
        "search_docs",
        json!({"query": long, "top_k": 100}),
    );
    assert_eq!(served["isError"], false, "{served}");
    let answer = call(&mut mcp, "search_docs", signing());
    assert_eq!(ids(&answer["structuredContent"]), baseline);
    drop(mcp);
    assert_eq!(counts(&env.store), executed(calls + 2));
}

// ---------------------------------------------------------------------------------------------
// Nothing from outside the ingested folders.

#[test]
fn no_tool_answer_contains_text_from_a_file_outside_the_ingested_folders() {
    let env = Env::sample();
    let secret_word = "zanzibarquokka";
    let other_word = "xylophonewombat";
    let secret = env.tmp.path().join("secret.md");
    std::fs::write(
        &secret,
        format!("# Secret\n\nThe password is {secret_word}. Rotate the signing key.\n"),
    )
    .expect("write the secret");
    let outside = env.tmp.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir");
    std::fs::write(
        outside.join("inner.md"),
        format!("# Inner\n\nAlso secret: {other_word} {secret_word}.\n"),
    )
    .expect("write the secret folder");
    let link = |target: &std::path::Path, at: &str| {
        std::os::unix::fs::symlink(target, env.docs.join(at)).expect("symlink");
    };
    link(std::path::Path::new("../secret.md"), "link.md");
    link(&secret, "absolute.md");
    link(std::path::Path::new("../outside"), "linkdir");
    link(
        std::path::Path::new("../../secret.md"),
        "notes/deep-link.md",
    );
    link(std::path::Path::new("../outside/inner.md"), "inner.txt");

    let report = env.ingest();
    let words = [secret_word, other_word];
    let assert_clean = |what: &str, text: &str| {
        for word in words {
            assert!(
                !text.contains(word),
                "{what} carries text from outside: {text}"
            );
        }
    };
    assert_clean("the ingest report", &report.to_string());
    let warned: Vec<&str> = report["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(|w| w["path"].as_str())
        .collect();
    for path in [
        "link.md",
        "absolute.md",
        "linkdir",
        "notes/deep-link.md",
        "inner.txt",
    ] {
        assert!(warned.contains(&path), "no warning for {path}: {report}");
    }
    let export = env.run(&["export"]);
    assert_clean("export", &String::from_utf8_lossy(&export.stdout));

    // The chunk IDs the secret files would have, had they been ingested.
    let elsewhere = Env::empty();
    std::fs::copy(&secret, elsewhere.docs.join("secret.md")).expect("copy");
    std::fs::copy(outside.join("inner.md"), elsewhere.docs.join("inner.md")).expect("copy");
    elsewhere.ingest();
    let secret_ids: Vec<String> = elsewhere.export().into_keys().collect();
    assert!(!secret_ids.is_empty());

    let mut queries = vec![json!({"query": secret_word}), json!({"query": other_word})];
    for prefix in [
        "../",
        "..",
        "/",
        "link.md",
        "linkdir/",
        "absolute.md",
        "notes/deep-link.md",
        secret.to_str().expect("utf-8"),
        outside.to_str().expect("utf-8"),
    ] {
        queries.push(json!({"query": format!("{secret_word} signing"), "path_prefix": prefix}));
    }
    let mut chunk_ids: Vec<String> = secret_ids.clone();
    chunk_ids.extend([
        "../secret.md".to_string(),
        secret.to_str().expect("utf-8").to_string(),
        "link.md".to_string(),
        "linkdir/inner.md".to_string(),
    ]);

    // HTTP: the JSON API and /mcp.
    let server = serve(&env, &[]);
    for query in &queries {
        let reply = server.search(None, &query.to_string());
        assert_eq!(reply.status, 200, "{reply}");
        assert_clean("an HTTP search", &reply.body);
        let result = server.mcp_call(&[], "search_docs", query.clone(), Value::Null);
        assert_clean("an /mcp search", &result.to_string());
    }
    for id in &chunk_ids {
        let reply = server.tool("get_chunk", &[], &json!({"chunk_id": id}).to_string());
        assert!(matches!(reply.status, 400 | 404), "{reply}");
        assert_clean("an HTTP get_chunk", &reply.body);
        let result = server.mcp_call(&[], "get_chunk", json!({"chunk_id": id}), Value::Null);
        assert_eq!(result["isError"], true, "{result}");
        assert_clean("an /mcp get_chunk", &result.to_string());
    }
    let (status, text) = raw_http(
        &server.addr,
        format!(
            "GET /v1/tools/..%2F..%2F{} HTTP/1.1\r\nHost: {}\r\n",
            "secret.md", server.addr
        )
        .as_bytes(),
        b"",
    );
    assert!(matches!(status, 404 | 405), "{text}");
    assert_clean("a GET with a path", &text);
    drop(server);

    // MCP over stdio.
    let mut mcp = RawMcp::start(&env, &[], &[]);
    mcp.initialize();
    let mut id = 0;
    for query in &queries {
        id += 1;
        let (reply, _) = mcp.request(
            id,
            "tools/call",
            json!({"name": "search_docs", "arguments": query}),
        );
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        assert_clean("a stdio search", &reply.to_string());
    }
    for chunk_id in &chunk_ids {
        id += 1;
        let (reply, _) = mcp.request(
            id,
            "tools/call",
            json!({"name": "get_chunk", "arguments": {"chunk_id": chunk_id}}),
        );
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        assert_clean("a stdio get_chunk", &reply.to_string());
    }
    let (_, lines) = mcp.finish();
    for line in &lines {
        assert_clean("stdio", line);
    }
}

// ---------------------------------------------------------------------------------------------
// A non-loopback server with tokens.

/// This machine's address on its default route, when it has one that is not loopback.
fn non_loopback_address() -> Option<IpAddr> {
    let socket = UdpSocket::bind("0.0.0.0:0").ok()?;
    // Connecting a UDP socket sends nothing; it only picks the route and the local address.
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn a_non_loopback_server_answers_only_the_right_token_and_writes_nothing_else() {
    let env = sample_store();
    let tokens = env.tmp.path().join("tokens.toml");
    let token = "tok-abuse-0123456789";
    std::fs::write(
        &tokens,
        format!("[tokens]\n\"{token}\" = \"client-abuse\"\n"),
    )
    .expect("write tokens");
    let server = match launch(
        &env,
        &[
            "--listen",
            "0.0.0.0:0",
            "--tokens",
            tokens.to_str().expect("utf-8"),
        ],
    ) {
        crate::support::http::Launch::Listening(server) => server,
        crate::support::http::Launch::Exited(code, stderr) => {
            panic!("serve on 0.0.0.0 with --tokens exited ({code:?}): {stderr}")
        }
    };
    let port = server.addr.rsplit(':').next().expect("port").to_string();
    let ip = non_loopback_address().map_or("127.0.0.1".to_string(), |ip| ip.to_string());
    eprintln!("calling the 0.0.0.0 server at {ip}:{port}");
    let addr = format!("{ip}:{port}");
    let body = signing().to_string();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let call = |headers: &[(&str, &str)], auth: Option<&[u8]>| -> [(u16, String); 2] {
        let mut results = Vec::new();
        for (path, extra, body) in [
            (
                "/v1/tools/search_docs",
                &[("Content-Type", "application/json")][..],
                &body,
            ),
            ("/mcp", MCP_JSON, &list),
        ] {
            let mut all = extra.to_vec();
            all.extend_from_slice(headers);
            let mut head = post_head(path, &addr, &all);
            if let Some(auth) = auth {
                head.extend_from_slice(b"Authorization: ");
                head.extend_from_slice(auth);
                head.extend_from_slice(b"\r\n");
            }
            results.push(raw_http(&addr, &head, body.as_bytes()));
        }
        results.try_into().expect("two results")
    };

    let right = format!("Bearer {token}");
    let refused: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("no Authorization", None),
        (
            "a wrong token",
            Some(b"Bearer tok-wrong-0123456789".to_vec()),
        ),
        ("an empty Bearer", Some(b"Bearer".to_vec())),
        ("a Bearer with only spaces", Some(b"Bearer    ".to_vec())),
        (
            "Basic credentials",
            Some(b"Basic dG9rLWFidXNlOnBhc3M=".to_vec()),
        ),
        (
            "the token without a scheme",
            Some(token.as_bytes().to_vec()),
        ),
        (
            "the token with a suffix",
            Some(format!("{right} extra").into_bytes()),
        ),
        (
            "a prefix of the token",
            Some(right.as_bytes()[..right.len() - 1].to_vec()),
        ),
        (
            "bytes that are not ASCII",
            Some(b"Bearer tok-\xf6\xe9-0123456789".to_vec()),
        ),
    ];
    for (case, auth) in &refused {
        for (status, response) in call(&[], auth.as_deref()) {
            assert_eq!(status, 401, "{case}: {response}");
            assert!(
                response.to_lowercase().contains("www-authenticate: bearer"),
                "{case}: {response}"
            );
        }
    }
    // A foreign Host does not get round the token.
    let (status, response) = raw_http(
        &addr,
        &post_head(
            "/v1/tools/search_docs",
            "attacker.example",
            &[("Content-Type", "application/json")],
        ),
        body.as_bytes(),
    );
    assert_eq!(status, 401, "{response}");
    // A foreign Origin is refused even with the right token.
    for (status, response) in call(&[("Origin", "http://evil.example")], Some(right.as_bytes())) {
        assert_eq!(status, 403, "{response}");
    }
    assert_eq!(
        counts(&env.store),
        executed(0),
        "a refused caller wrote something"
    );

    // The right token, with the scheme in any case (RFC 9110: it is case-insensitive).
    for auth in [
        right.clone(),
        format!("bearer {token}"),
        format!("BEARER  {token}"),
    ] {
        let [(api, response), (mcp, listed)] = call(&[], Some(auth.as_bytes()));
        assert_eq!(api, 200, "{auth}: {response}");
        assert_eq!(mcp, 200, "{auth}: {listed}");
        assert!(listed.contains("search_docs"), "{listed}");
    }
    assert_eq!(counts(&env.store), executed(3));
}
