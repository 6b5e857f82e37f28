//! The MCP stdio transport: one JSON-RPC message per line on stdin, one per line on stdout.
//!
//! It replaces rmcp's line transport for one reason: rmcp drops a line that is not JSON (and a
//! line over its cap) without a word, and JSON-RPC says such a line gets an error. Here a line
//! that is not JSON gets `-32700` (parse error), a JSON line that is not a JSON-RPC message and
//! a line over `MAX_LINE_BYTES` get `-32600` (invalid request), each with `id: null`, and the
//! server keeps reading. A notification (a `method` and no `id`) never gets a reply, even when
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
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use crate::server::batch;

/// The longest line read as a message (rmcp's own cap): a longer one is answered and skipped
/// without being buffered.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Lines in from `R`, lines out to `W`.
pub struct LineTransport<R, W> {
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

/// What a line that is not a message gets: `None` for a notification, or a code and a message.
fn refusal(line: &[u8], err: &serde_json::Error) -> Option<(i64, String)> {
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return Some((
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
        -32600,
        format!("invalid request: the line is JSON but not a JSON-RPC 2.0 message ({err})"),
    ))
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
                    if let Some((code, message)) = refusal(line, &err) {
                        tracing::debug!(code, "refused a stdin line: {message}");
                        self.reply_error(code, message);
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

    fn code(line: &str) -> Option<i64> {
        let err = serde_json::from_str::<u8>("x").expect_err("an error to pass on");
        refusal(line.as_bytes(), &err).map(|(code, _)| code)
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
}
