//! `groundidx serve` as a child process on a loopback port, and HTTP clients for it: `ureq`
//! for ordinary requests (the JSON API, `/mcp`), and one raw HTTP/1.1 request over a socket of
//! its own where the exact headers matter.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Env;

/// The headers of an MCP Streamable HTTP request at protocol revision 2025-11-25.
pub const MCP_HEADERS: &[(&str, &str)] = &[
    ("Accept", "application/json, text/event-stream"),
    ("MCP-Protocol-Version", "2025-11-25"),
];

/// A running `groundidx serve`, killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// `127.0.0.1:PORT`
    pub addr: String,
    stderr: Arc<Mutex<String>>,
    http: ureq::Agent,
}

/// What starting `serve` came to.
pub enum Launch {
    Listening(Server),
    Exited(Option<i32>, String),
}

impl Launch {
    pub fn server(self) -> Server {
        match self {
            Launch::Listening(server) => server,
            Launch::Exited(code, stderr) => {
                panic!("groundidx serve exited ({code:?}) instead of listening: {stderr}")
            }
        }
    }
}

/// `groundidx serve --listen 127.0.0.1:0 ARGS…`, listening.
pub fn serve(env: &Env, args: &[&str]) -> Server {
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    launch(env, &all).server()
}

/// `serve`, with these environment variables set (a fake clock).
pub fn serve_with_env(env: &Env, args: &[&str], envs: &[(&str, &str)]) -> Server {
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    launch_with_env(env, &all, envs).server()
}

/// `groundidx serve ARGS…`: waits for the `listening on URL` line on stderr, or for an exit.
pub fn launch(env: &Env, args: &[&str]) -> Launch {
    launch_with_env(env, args, &[])
}

fn launch_with_env(env: &Env, args: &[&str], envs: &[(&str, &str)]) -> Launch {
    let mut command = env.command(&["serve"]);
    for (name, value) in envs {
        command.env(name, value);
    }
    command.args(args);
    launch_command(command, args)
}

/// Runs a `serve` command (built by `Env::command`, or a wrapper that execs it) and waits for
/// its `listening on URL` line on stderr, or for its exit; `args` name it in messages.
pub fn launch_command(mut command: std::process::Command, args: &[&str]) -> Launch {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn groundidx serve");
    let stream = child.stderr.take().expect("stderr");
    let stderr = Arc::new(Mutex::new(String::new()));
    let (sender, receiver) = std::sync::mpsc::channel();
    {
        let stderr = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                stderr.lock().expect("stderr buffer").push_str(&line);
                stderr.lock().expect("stderr buffer").push('\n');
                if !sent && let Some(rest) = line.split("listening on ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or("").to_string();
                    sent = sender.send(url).is_ok();
                }
            }
        });
    }
    match receiver.recv_timeout(Duration::from_secs(30)) {
        Ok(url) => {
            let addr = url
                .strip_prefix("http://")
                .unwrap_or_else(|| panic!("the listening line has no http:// URL: {url}"))
                .trim_end_matches('/')
                .to_string();
            let base = format!("http://{addr}");
            Launch::Listening(Server {
                child,
                base,
                addr,
                stderr,
                http: ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(30)))
                    .build()
                    .into(),
            })
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let status = child.wait().expect("wait");
            let text = stderr.lock().expect("stderr").clone();
            Launch::Exited(status.code(), text)
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            let text = stderr.lock().expect("stderr").clone();
            panic!("groundidx serve {args:?} printed no listening line in 30 s: {text}")
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP response.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|err| panic!("the body is not JSON ({err}): {self}"))
    }

    pub fn replayed(&self) -> bool {
        self.header("Idempotent-Replayed") == Some("true")
    }

    /// Asserts a problem+json error with this status.
    pub fn assert_problem(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{self}");
        assert!(
            self.header("Content-Type")
                .is_some_and(|ct| ct.starts_with("application/problem+json")),
            "errors are application/problem+json: {self}"
        );
        let problem = self.json();
        for field in ["type", "title", "detail"] {
            assert!(problem[field].is_string(), "problem lacks {field}: {self}");
        }
        assert_eq!(problem["status"], status, "{self}");
        problem
    }

    /// The `RateLimit` header's `r` and `t`.
    pub fn rate_limit(&self) -> (u64, u64) {
        let value = self
            .header("RateLimit")
            .unwrap_or_else(|| panic!("no RateLimit header: {self}"));
        let mut parts = value.split(';').map(str::trim);
        assert_eq!(parts.next(), Some("\"per-client\""), "{self}");
        let mut r = None;
        let mut t = None;
        for part in parts {
            match part.split_once('=') {
                Some(("r", n)) => r = n.parse().ok(),
                Some(("t", n)) => t = n.parse().ok(),
                _ => {}
            }
        }
        (
            r.unwrap_or_else(|| panic!("RateLimit lacks r: {self}")),
            t.unwrap_or_else(|| panic!("RateLimit lacks t: {self}")),
        )
    }
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {} {:?} {}", self.status, self.headers, self.body)
    }
}

impl Server {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr").clone()
    }

    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut request = self.http.post(format!("{}{path}", self.base));
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            request = request.header("Content-Type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send(body).unwrap_or_else(|err| {
            panic!(
                "POST {path} failed: {err}; server stderr: {}",
                self.stderr()
            )
        });
        self.reply(response)
    }

    /// `POST /v1/tools/search_docs` with `Idempotency-Key: "K"`, or why no response came (the
    /// server killed while the request was in flight).
    pub fn try_search(&self, k: &str, body: &str) -> Result<Reply, String> {
        let response = self
            .http
            .post(format!("{}/v1/tools/search_docs", self.base))
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", format!("\"{k}\""))
            .send(body)
            .map_err(|err| err.to_string())?;
        Ok(self.reply(response))
    }

    pub fn get(&self, path: &str) -> Reply {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .call()
            .unwrap_or_else(|err| {
                panic!("GET {path} failed: {err}; server stderr: {}", self.stderr())
            });
        self.reply(response)
    }

    fn reply(&self, mut response: ureq::http::Response<ureq::Body>) -> Reply {
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .body_mut()
            .read_to_string()
            .unwrap_or_else(|err| panic!("read the body: {err}"));
        Reply {
            status,
            headers,
            body,
        }
    }

    /// `POST /v1/tools/TOOL` with extra headers.
    pub fn tool(&self, tool: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        self.post(&format!("/v1/tools/{tool}"), headers, body)
    }

    /// `POST /v1/tools/search_docs` with `Idempotency-Key: "K"` (an sf-string) when given.
    pub fn search(&self, k: Option<&str>, body: &str) -> Reply {
        match k {
            Some(k) => {
                let header = format!("\"{k}\"");
                self.tool("search_docs", &[("Idempotency-Key", header.as_str())], body)
            }
            None => self.tool("search_docs", &[], body),
        }
    }

    /// `POST /mcp` with the MCP headers plus `extra`; returns the reply and, for a 200, the
    /// JSON-RPC message answering `id` (from a JSON body or an SSE stream).
    pub fn mcp_raw(&self, extra: &[(&str, &str)], body: &str, id: &Value) -> (Reply, Value) {
        let mut headers: Vec<(&str, &str)> = MCP_HEADERS.to_vec();
        headers.extend_from_slice(extra);
        let reply = self.post("/mcp", &headers, body);
        if reply.status != 200 {
            return (reply, Value::Null);
        }
        let is_sse = reply
            .header("Content-Type")
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let message = if is_sse {
            reply
                .body
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|m| &m["id"] == id && m.get("method").is_none())
                .unwrap_or_else(|| panic!("no response to {id} in the stream: {reply}"))
        } else {
            reply.json()
        };
        (reply, message)
    }

    pub fn mcp(&self, extra: &[(&str, &str)], message: &Value) -> (Reply, Value) {
        self.mcp_raw(extra, &message.to_string(), &message["id"])
    }

    /// A `tools/call` on `/mcp`; returns the JSON-RPC `result` (panics on anything else).
    pub fn mcp_call(
        &self,
        extra: &[(&str, &str)],
        tool: &str,
        arguments: Value,
        meta: Value,
    ) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if !meta.is_null() {
            params["_meta"] = meta;
        }
        let (reply, message) = self.mcp(
            extra,
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}),
        );
        assert_eq!(reply.status, 200, "{reply}");
        assert!(message["result"].is_object(), "not a result: {message}");
        message["result"].clone()
    }
}

/// A file of bearer tokens (`[tokens]`, token to client ID) under the test's temp folder.
pub fn tokens_file(env: &Env, tokens: &[(&str, &str)]) -> PathBuf {
    let path = env.tmp.path().join("tokens.toml");
    let mut text = String::from("[tokens]\n");
    for (token, client) in tokens {
        text.push_str(&format!("\"{token}\" = \"{client}\"\n"));
    }
    std::fs::write(&path, text).expect("write tokens");
    path
}

/// One HTTP/1.1 request over its own connection (`Connection: close`), with exactly these
/// headers besides Host, Content-Length and Connection; the reply read to the end, a chunked
/// body decoded.
pub fn raw_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .unwrap_or_else(|err| panic!("read the answer to {method} {path}: {err}"));
    parse_reply(&response)
}

fn parse_reply(response: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(response).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers: {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or_else(|err| panic!("a chunk size ({err}): {size:?}"));
        if size == 0 {
            break;
        }
        body.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    body
}
