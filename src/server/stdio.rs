//! The MCP stdio transport: one JSON-RPC message per line on stdin, one per line on stdout.
//!
//! It replaces rmcp's line transport for one reason: rmcp drops a line that is not JSON (and a
//! line over its cap) without a word, and JSON-RPC says such a line gets an error. Here a line
//! that is not JSON gets `-32700` (parse error), a JSON line that is not a JSON-RPC message and
//! a line over `MAX_LINE_BYTES` get `-32600` (invalid request), each with `id: null`, and the
//! server keeps reading. A line that is JSON but holds a number no double can hold (`1e400`)
//! is no parse error: a request gets `-32602` (invalid params) with its own id
//! (`NumberOutOfRange`). A notification (a `method` and no `id`) never gets a reply, even when
//! its params do not parse. In a session at protocol revision 2025-03-26 a line may also be a
//! JSON-RPC batch (`server::batch`): its messages go to rmcp one by one, and the answers to its
//! requests go out together as one array line once the last is in. What this module does not
//! do: decide anything about a message that parsed; that is rmcp's and `server::mcp`'s.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ClientRequest, JsonRpcMessage, RequestId, ServerResult};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use crate::server::batch;

/// The longest line read as a message (rmcp's own cap): a longer one is answered and skipped
/// without being buffered.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Lines in from `R`, lines out to `W`.
pub(crate) struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line read so far. Kept here, not in `receive`, because rmcp polls `receive` inside a
    /// `select!` and may drop it halfway through a line; the next call goes on where it was.
    line: Vec<u8>,
    /// Set while the rest of an oversized line is skipped.
    skipping: bool,
    write: Arc<Mutex<W>>,
    /// The messages of a batch not yet handed to rmcp.
    queued: VecDeque<RxJsonRpcMessage<RoleServer>>,
    /// The batches whose answers are still being gathered, oldest first.
    batches: Vec<PendingBatch>,
    /// The id of the `initialize` request, until its answer names the protocol revision.
    initialize_id: Option<RequestId>,
    /// The protocol revision the session agreed on.
    revision: Option<String>,
}

/// A batch some of whose requests rmcp has not answered yet.
struct PendingBatch {
    /// The ids of the requests still to be answered.
    waiting: Vec<RequestId>,
    /// The answers so far, each as JSON text.
    answers: Vec<String>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(read: R, write: W) -> Self {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            skipping: false,
            write: Arc::new(Mutex::new(write)),
            queued: VecDeque::new(),
            batches: Vec::new(),
            initialize_id: None,
            revision: None,
        }
    }

    /// Reads up to the next newline. `None` at end of input (a last line without a newline
    /// counts as a line); `Some(None)` for a line over the cap.
    async fn next_line(&mut self) -> std::io::Result<Option<Option<Vec<u8>>>> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                let rest = std::mem::take(&mut self.line);
                let skipped = std::mem::replace(&mut self.skipping, false);
                return Ok(match (skipped, rest.is_empty()) {
                    (true, _) => Some(None),
                    (false, true) => None,
                    (false, false) => Some(Some(rest)),
                });
            }
            let (chunk, ends_line) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (&available[..at], true),
                None => (available, false),
            };
            let taken = chunk.len() + usize::from(ends_line);
            if !self.skipping {
                if self.line.len() + chunk.len() > MAX_LINE_BYTES {
                    self.skipping = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            self.read.consume(taken);
            if ends_line {
                if std::mem::replace(&mut self.skipping, false) {
                    return Ok(Some(None));
                }
                return Ok(Some(Some(std::mem::take(&mut self.line))));
            }
        }
    }

    /// Writes a JSON-RPC error with `id: null` on its own task, so that a `receive` dropped by
    /// rmcp's `select!` can never leave half a line on stdout.
    fn reply_error(&self, code: i64, message: String) {
        self.reply(batch::error(Value::Null, code, &message).to_string());
    }

    /// Writes one line of JSON on its own task (see `reply_error`).
    fn reply(&self, text: String) {
        let line = line_of(text);
        let write = self.write.clone();
        tokio::spawn(async move {
            let mut write = write.lock().await;
            // Stdout gone means the client is gone; the read side sees the end soon after.
            let _ = write.write_all(&line).await;
            let _ = write.flush().await;
        });
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// Takes a batch line apart: its messages are queued for rmcp, the answers made here are
    /// kept with the ids rmcp is to answer, and the whole answer goes out when it is complete.
    fn take_batch(&mut self, elements: Vec<Value>) {
        if !self.revision.as_deref().is_some_and(batch::accepts_batches) {
            let message = batch::refused_message(self.revision.as_deref());
            tracing::debug!("refused a stdin batch: {message}");
            self.reply_error(-32600, message);
            return;
        }
        if elements.is_empty() {
            self.reply_error(-32600, batch::EMPTY_MESSAGE.into());
            return;
        }
        let mut pending = PendingBatch {
            waiting: Vec::new(),
            answers: Vec::new(),
        };
        for element in elements {
            match batch::Element::of(element) {
                batch::Element::Message(message) => {
                    pending.waiting.extend(batch::request_id(&message));
                    self.queued.push_back(*message);
                }
                batch::Element::Answer(answer) => pending.answers.push(answer.to_string()),
                batch::Element::Nothing => {}
            }
        }
        match (pending.waiting.is_empty(), pending.answers.is_empty()) {
            // Only notifications: JSON-RPC sends nothing back, not an empty array.
            (true, true) => {}
            (true, false) => self.reply(format!("[{}]", pending.answers.join(","))),
            (false, _) => self.batches.push(pending),
        }
    }

    /// Notes the revision `initialize` agreed on, and keeps an answer to a batch's request
    /// until the batch's last answer: `Some(line)` is what to write now, `None` nothing.
    fn outgoing(
        &mut self,
        item: &TxJsonRpcMessage<RoleServer>,
    ) -> serde_json::Result<Option<Vec<u8>>> {
        let answered = match item {
            JsonRpcMessage::Response(response) => {
                if let ServerResult::InitializeResult(result) = &response.result
                    && self.initialize_id.as_ref() == Some(&response.id)
                {
                    self.initialize_id = None;
                    self.revision = Some(result.protocol_version.as_str().to_string());
                }
                Some(&response.id)
            }
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        let text = serde_json::to_string(item)?;
        let batch = answered.and_then(|id| {
            self.batches
                .iter()
                .position(|batch| batch.waiting.contains(id))
                .map(|at| (at, id))
        });
        let Some((at, id)) = batch else {
            return Ok(Some(line_of(text)));
        };
        let pending = &mut self.batches[at];
        if let Some(waiting) = pending.waiting.iter().position(|waiting| waiting == id) {
            pending.waiting.swap_remove(waiting);
        }
        pending.answers.push(text);
        if !pending.waiting.is_empty() {
            return Ok(None);
        }
        let done = self.batches.remove(at);
        Ok(Some(line_of(format!("[{}]", done.answers.join(",")))))
    }
}

fn line_of(text: String) -> Vec<u8> {
    let mut bytes = text.into_bytes();
    bytes.push(b'\n');
    bytes
}

/// What a line that is not a message gets: `None` for a notification, or the id to answer (null
/// when the line has none that can be read), a code and a message.
fn refusal(line: &[u8], err: &serde_json::Error) -> Option<(Value, i64, String)> {
    if let Some(number) = NumberOutOfRange::of(line) {
        if number.is_notification() {
            return None;
        }
        return Some((number.id(), number.code(), number.message()));
    }
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Some((
            Value::Null,
            -32700,
            format!(
                "parse error: the line is not JSON ({err}); send one JSON-RPC message per line"
            ),
        ));
    };
    let is_notification = value.get("method").is_some() && value.get("id").is_none();
    if is_notification {
        return None;
    }
    Some((
        Value::Null,
        -32600,
        format!("invalid request: the line is JSON but not a JSON-RPC 2.0 message ({err})"),
    ))
}

/// A message whose text is JSON but holds a number serde_json cannot hold as a `Value` (one
/// beyond a double's range, such as `1e400`). The text is JSON, so this is no parse error: a
/// request gets invalid params (-32602) with its own id, over stdio and HTTP alike. The id and
/// the method are read again leniently: `IgnoredAny` makes serde_json skip a number without
/// converting it, so the rest of the message still reads.
#[derive(Debug)]
pub(crate) struct NumberOutOfRange {
    /// `None`: no `id` member. `Some(Value::Null)`: one that cannot be answered to (itself out
    /// of range, or neither a string nor an integer).
    id: Option<Value>,
    method: Option<String>,
    /// serde_json's error, which says where the number is.
    error: String,
}

/// The members of a JSON-RPC message that say whom to answer; any other member is skipped
/// unread, numbers and all.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    id: Option<IgnoredAny>,
    #[serde(default)]
    method: Option<String>,
}

#[derive(Deserialize)]
struct EnvelopeId {
    id: Value,
}

impl NumberOutOfRange {
    /// `Some` when `text` is JSON but serde_json refuses to read it for a number out of range;
    /// `None` for any other text (not JSON, or JSON that reads).
    pub fn of(text: &[u8]) -> Option<NumberOutOfRange> {
        let error = serde_json::from_slice::<Value>(text).err()?;
        // serde_json has no category of its own for this; every other reason a JSON text can
        // fail to read as a `Value` (nesting too deep) is left to the caller's handling.
        if !error.to_string().starts_with("number out of range") {
            return None;
        }
        serde_json::from_slice::<IgnoredAny>(text).ok()?;
        // Only an object is a message (serde would read a struct from an array too).
        let object = text.trim_ascii_start().first() == Some(&b'{');
        let (id, method) = match serde_json::from_slice::<Envelope>(text) {
            Ok(envelope) if object => (envelope.id, envelope.method),
            _ => (None, None),
        };
        let id = id.map(|_| {
            match serde_json::from_slice::<EnvelopeId>(text).map(|envelope| envelope.id) {
                Ok(id @ Value::String(_)) => id,
                Ok(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n),
                _ => Value::Null,
            }
        });
        Some(NumberOutOfRange {
            id,
            method,
            error: error.to_string(),
        })
    }

    /// A method and an id: a request, which is answered.
    pub(crate) fn is_request(&self) -> bool {
        self.method.is_some() && self.id.is_some()
    }

    /// A method and no id: nothing is answered (JSON-RPC 2.0, section 4.1).
    pub(crate) fn is_notification(&self) -> bool {
        self.method.is_some() && self.id.is_none()
    }

    /// The id an answer carries: the message's own, or null.
    pub fn id(&self) -> Value {
        self.id.clone().unwrap_or(Value::Null)
    }

    /// Invalid params (-32602) for a request or a notification; invalid request (-32600) for
    /// JSON that names no method, which is no request at all.
    pub fn code(&self) -> i64 {
        match self.method {
            Some(_) => -32602,
            None => -32600,
        }
    }

    pub fn message(&self) -> String {
        match &self.method {
            Some(method) => format!(
                "invalid params: the {method} request holds a number out of range ({}); a number must fit a 64-bit float",
                self.error
            ),
            None => format!(
                "invalid request: the message is JSON but not a JSON-RPC 2.0 request, and holds a number out of range ({})",
                self.error
            ),
        }
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn name() -> Cow<'static, str> {
        "stdio".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        let line = self.outgoing(&item);
        async move {
            let Some(line) = line.map_err(std::io::Error::other)? else {
                return Ok(());
            };
            let mut write = write.lock().await;
            write.write_all(&line).await?;
            write.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(message) = self.queued.pop_front() {
                return Some(message);
            }
            let line = match self.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(err) => {
                    tracing::error!("cannot read stdin: {err}");
                    return None;
                }
            };
            let Some(line) = line else {
                self.reply_error(
                    -32600,
                    format!("invalid request: the line is over {MAX_LINE_BYTES} bytes"),
                );
                continue;
            };
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if line.trim_ascii_start().first() == Some(&b'[')
                && let Ok(Value::Array(elements)) = serde_json::from_slice::<Value>(line)
            {
                self.take_batch(elements);
                continue;
            }
            match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
                Ok(message) => {
                    if let JsonRpcMessage::Request(request) = &message
                        && matches!(request.request, ClientRequest::InitializeRequest(_))
                    {
                        self.initialize_id = Some(request.id.clone());
                    }
                    return Some(message);
                }
                Err(err) => {
                    if let Some((id, code, message)) = refusal(line, &err) {
                        tracing::info!(transport = "stdio", code, %id, "refused a message: {message}");
                        self.reply(batch::error(id, code, &message).to_string());
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::refusal;
    use serde_json::{Value, json};

    fn answer(line: &str) -> Option<(Value, i64)> {
        let err = serde_json::from_str::<u8>("x").expect_err("an error to pass on");
        refusal(line.as_bytes(), &err).map(|(id, code, _)| (id, code))
    }

    fn code(line: &str) -> Option<i64> {
        answer(line).map(|(_, code)| code)
    }

    #[test]
    fn refusals() {
        assert_eq!(code("not json"), Some(-32700));
        assert_eq!(code("{\"jsonrpc\":\"2.0\",\"id\":7,\"met"), Some(-32700));
        assert_eq!(code("\"tools/list\""), Some(-32600));
        assert_eq!(code("{\"jsonrpc\":\"2.0\",\"id\":8}"), Some(-32600));
        assert_eq!(code("[1, 2]"), Some(-32600));
        assert_eq!(
            code("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":7}"),
            None
        );
    }

    #[test]
    fn a_number_out_of_range_is_invalid_params_with_the_id() {
        let call = |id: &str| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"search_docs\",\"arguments\":{{\"query\":\"q\",\"top_k\":1e400}}}}}}"
            )
        };
        assert_eq!(answer(&call("7")), Some((json!(7), -32602)));
        assert_eq!(answer(&call("\"a\"")), Some((json!("a"), -32602)));
        // An id that is itself out of range cannot be answered to, but the request still is.
        assert_eq!(answer(&call("1e400")), Some((Value::Null, -32602)));
        assert_eq!(answer(&call("-1e999")), Some((Value::Null, -32602)));
        let notification = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1e400}}";
        assert_eq!(answer(notification), None);
        assert_eq!(answer("[1e400]"), Some((Value::Null, -32600)));
        // Not JSON at all, though a number in it is out of range: still a parse error.
        assert_eq!(code("{\"id\":1,\"x\":1e400,"), Some(-32700));
        // Nesting too deep for a Value is not a number out of range.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(code(&deep), Some(-32700));
    }
}
