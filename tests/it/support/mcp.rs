//! `groundidx mcp` as a child process: driven by the rmcp client (which does the initialize
//! handshake), or line by line where the exact bytes on the wire matter; the calls' results
//! flattened for assertions, and the keys and arguments the agent tests share.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use groundidx::clock::FAKE_NOW_ENV;
use groundidx::crash::CRASH_ENV;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};

use crate::support::Env;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A sample store, ingested.
pub fn sample_store() -> Env {
    let env = Env::sample();
    env.ingest();
    env
}

/// `_meta` with an idempotency key.
pub fn key(k: &str) -> Value {
    json!({ "groundidx/idempotencyKey": k })
}

/// The server's clock frozen 1 s into a quota window (`GROUNDIDX_FAKE_NOW_MS`), so that every
/// call of a test lands in one window, however long the test takes, and the window always has
/// 59 s left.
pub fn frozen_clock() -> [(&'static str, &'static str); 1] {
    [(FAKE_NOW_ENV, "1800000001000")]
}

pub fn signing() -> Value {
    json!({"query": "rotate the signing key", "top_k": 5})
}

pub fn backups() -> Value {
    json!({"query": "backups restore", "top_k": 5})
}

/// A `groundidx mcp` server driven by the rmcp client.
pub struct Mcp {
    client: Option<RunningService<RoleClient, ()>>,
    pub stderr: PathBuf,
}

/// One `tools/call` result, flattened for assertions (`raw` is the whole result as JSON).
#[derive(Clone, Debug)]
pub struct Called {
    pub raw: Value,
    pub is_error: bool,
    pub structured: Value,
    pub text: String,
    pub meta: Value,
}

impl Called {
    pub fn of(result: &CallToolResult) -> Called {
        Called {
            raw: serde_json::to_value(result).expect("serialize the result"),
            is_error: result.is_error == Some(true),
            structured: result.structured_content.clone().unwrap_or(Value::Null),
            text: result
                .content
                .first()
                .and_then(|block| block.as_text())
                .map(|text| text.text.clone())
                .unwrap_or_default(),
            meta: result
                .meta
                .as_ref()
                .map(|meta| Value::Object(meta.0.clone()))
                .unwrap_or(Value::Null),
        }
    }

    pub fn replayed(&self) -> &Value {
        &self.meta["groundidx/replayed"]
    }

    pub fn key(&self) -> &Value {
        &self.meta["groundidx/idempotencyKey"]
    }

    pub fn code(&self) -> &Value {
        &self.structured["error"]["code"]
    }

    /// Asserts a successful, freshly executed result.
    pub fn assert_fresh(&self) {
        assert!(!self.is_error, "expected success: {}", self.raw);
        assert_eq!(
            self.replayed(),
            &json!(false),
            "expected a fresh execution: {}",
            self.raw
        );
    }

    /// Asserts a tool error with this code.
    pub fn assert_error(&self, code: &str) {
        assert!(
            self.is_error,
            "expected isError with code {code}: {}",
            self.raw
        );
        assert_eq!(self.code(), code, "{}", self.raw);
        assert!(
            !self.text.is_empty() && self.structured["error"]["message"].is_string(),
            "a tool error needs a message: {}",
            self.raw
        );
    }
}

pub fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

impl Mcp {
    /// Starts `groundidx --store STORE mcp ARGS…` and initializes.
    pub async fn start(env: &Env, args: &[&str]) -> Mcp {
        Mcp::start_crashing(env, args, None).await
    }

    /// Same, with `GROUNDIDX_CRASH_AT` armed.
    pub async fn start_crashing(env: &Env, args: &[&str], crash_at: Option<&str>) -> Mcp {
        match crash_at {
            Some(point) => Mcp::start_with_env(env, args, &[(CRASH_ENV, point)]).await,
            None => Mcp::start_with_env(env, args, &[]).await,
        }
    }

    /// Same, with these environment variables set (a fake clock, a crash point).
    pub async fn start_with_env(env: &Env, args: &[&str], envs: &[(&str, &str)]) -> Mcp {
        let mut command = env.command(&["mcp"]);
        command.args(args);
        for (name, value) in envs {
            command.env(name, value);
        }
        Mcp::start_command(command, env.tmp.path()).await
    }

    /// Starts an MCP stdio server from a command made elsewhere (a client's configuration),
    /// its stderr kept in a file under `stderr_dir`, and initializes.
    pub async fn start_command(command: std::process::Command, stderr_dir: &Path) -> Mcp {
        let stderr = stderr_dir.join(format!(
            "mcp-{}.stderr",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::File::create(&stderr).expect("create the stderr file");
        let mut command = tokio::process::Command::from(command);
        command.kill_on_drop(true);
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(file)
            .spawn()
            .expect("spawn groundidx mcp");
        let Ok(initialized) =
            tokio::time::timeout(Duration::from_secs(20), ().serve(transport)).await
        else {
            panic!("initialize timed out; stderr: {}", read_lossy(&stderr))
        };
        let client = initialized.unwrap_or_else(|err| {
            panic!("initialize failed: {err}; stderr: {}", read_lossy(&stderr))
        });
        Mcp {
            client: Some(client),
            stderr,
        }
    }

    pub fn client(&self) -> &RunningService<RoleClient, ()> {
        self.client.as_ref().expect("running")
    }

    /// A `tools/call`, as the client returns it.
    pub async fn try_call(
        &self,
        tool: &str,
        arguments: Value,
        meta: Value,
    ) -> Result<CallToolResult, ServiceError> {
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(
            arguments
                .as_object()
                .expect("arguments are an object")
                .clone(),
        );
        if let Value::Object(fields) = meta {
            let mut request_meta = RequestMetaObject::new();
            for (name, value) in fields {
                request_meta.insert(name, value);
            }
            params.meta = Some(request_meta);
        }
        tokio::time::timeout(Duration::from_secs(30), self.client().call_tool(params))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "tools/call {tool} timed out; stderr: {}",
                    read_lossy(&self.stderr)
                )
            })
    }

    /// A `tools/call` that must get a result (a success or a tool error, not a protocol error).
    pub async fn call(&self, tool: &str, arguments: Value, meta: Value) -> Called {
        match self.try_call(tool, arguments.clone(), meta.clone()).await {
            Ok(result) => Called::of(&result),
            Err(err) => panic!(
                "tools/call {tool} {arguments} (_meta {meta}) failed: {err}; stderr: {}",
                read_lossy(&self.stderr)
            ),
        }
    }

    /// `search_docs` with a key.
    pub async fn search(&self, k: &str, arguments: Value) -> Called {
        self.call("search_docs", arguments, key(k)).await
    }

    pub async fn stop(mut self) {
        if let Some(client) = self.client.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), client.cancel()).await;
        }
    }
}

/// A `groundidx mcp` server spoken to line by line, to see every byte on stdout.
pub struct RawMcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every line read from stdout so far.
    pub seen: Vec<String>,
    stderr: PathBuf,
}

impl RawMcp {
    pub fn start(env: &Env, args: &[&str], envs: &[(&str, &str)]) -> RawMcp {
        let stderr = env.tmp.path().join(format!(
            "raw-mcp-{}.stderr",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut command = env.command(&["mcp"]);
        command.args(args);
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn groundidx mcp");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        RawMcp {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    pub fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{message}").expect("write to the server");
        stdin.flush().expect("flush");
    }

    /// Writes bytes as they are (a line that may not be JSON at all).
    pub fn write_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to the server");
        stdin.flush().expect("flush");
    }

    /// Reads stdout until the response to `id`; returns it and every other message before it.
    pub fn response(&mut self, id: i64) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut others = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(err) => panic!(
                    "no response to id {id} ({err:?}); stdout so far: {:?}; stderr: {}",
                    self.seen,
                    read_lossy(&self.stderr)
                ),
            };
            self.seen.push(line.clone());
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|err| panic!("a stdout line is not JSON ({err}): {line:?}"));
            let is_response = message.get("method").is_none()
                && (message.get("result").is_some() || message.get("error").is_some());
            if is_response && message["id"] == json!(id) {
                return (message, others);
            }
            others.push(message);
        }
    }

    pub fn request(&mut self, id: i64, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(id)
    }

    pub fn initialize(&mut self) {
        self.initialize_at("2025-11-25");
    }

    /// Initializes the session at this protocol revision, which the server must agree to.
    pub fn initialize_at(&mut self, revision: &str) {
        let (response, _) = self.request(
            0,
            "initialize",
            json!({
                "protocolVersion": revision,
                "capabilities": {},
                "clientInfo": {"name": "groundidx-it", "version": "0"}
            }),
        );
        assert_eq!(
            response["result"]["protocolVersion"], revision,
            "{response}"
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// The next line the server writes, as JSON (a message, or an array of them).
    pub fn next_message(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|err| {
                panic!(
                    "no line from the server ({err:?}); stdout so far: {:?}; stderr: {}",
                    self.seen,
                    read_lossy(&self.stderr)
                )
            });
        self.seen.push(line.clone());
        serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("a stdout line is not JSON ({err}): {line:?}"))
    }

    /// Closes stdin, waits for the server to exit and returns every stdout line it wrote.
    pub fn finish(mut self) -> (Option<std::process::ExitStatus>, Vec<String>) {
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
        loop {
            match self.lines.recv_timeout(Duration::from_secs(2)) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        (status, std::mem::take(&mut self.seen))
    }
}

impl Drop for RawMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every way `value` breaks the JSON Schema `schema` (a tool's `outputSchema`), as the
/// `jsonschema` crate reports them; empty when it conforms. A schema that does not compile
/// fails the test.
pub fn schema_errors(schema: &Value, value: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema)
        .unwrap_or_else(|err| panic!("not a usable JSON Schema ({err}): {schema}"));
    validator
        .iter_errors(value)
        .map(|error| error.to_string())
        .collect()
}
