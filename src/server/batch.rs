//! JSON-RPC batches, which MCP requires at protocol revision 2025-03-26 and dropped in
//! 2025-06-18: which revisions accept them, and what each element of a batch gets before it is
//! handed to rmcp (which knows nothing of batches). The transports (`stdio`, `http`) split a
//! batch into its elements with these rules and gather the answers into one array.
//!
//! An element that is not a JSON-RPC message gets an invalid-request error in the answer, with
//! its id when it has a usable one; a notification gets nothing, even when it does not parse;
//! `initialize` inside a batch is refused, as the 2025-03-26 lifecycle says. An empty batch is
//! one invalid-request error, not an array (JSON-RPC 2.0, section 6).

use rmcp::model::{ClientJsonRpcMessage, RequestId};
use serde_json::{Value, json};

/// The one protocol revision whose sessions accept batches.
pub(crate) const BATCH_REVISION: &str = "2025-03-26";

/// Whether a session at this protocol revision accepts batches.
pub(crate) fn accepts_batches(revision: &str) -> bool {
    revision == BATCH_REVISION
}

/// The message a batch gets in a session at another revision (or before one is agreed).
pub(crate) fn refused_message(revision: Option<&str>) -> String {
    let revision = revision.map_or_else(
        || "none is agreed yet".to_string(),
        |revision| format!("this session is at {revision}"),
    );
    format!(
        "invalid request: JSON-RPC batches are accepted only at protocol revision {BATCH_REVISION} ({revision}); send one message at a time"
    )
}

/// The message an empty batch gets.
pub(crate) const EMPTY_MESSAGE: &str = "invalid request: the batch is empty";

/// A JSON-RPC error object with this id.
pub fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// What one element of a batch comes to.
pub(crate) enum Element {
    /// A message for rmcp; a request among them is answered in the batch's answer.
    Message(Box<ClientJsonRpcMessage>),
    /// An answer made here, without rmcp.
    Answer(Value),
    /// Nothing: a notification that does not parse.
    Nothing,
}

impl Element {
    pub fn of(value: Value) -> Element {
        // Only a string or a number is an id a client can match an answer to.
        let id = match value.get("id") {
            Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
            _ => Value::Null,
        };
        let is_notification = value.get("method").is_some() && value.get("id").is_none();
        if value.get("method").and_then(Value::as_str) == Some("initialize") {
            return Element::Answer(error(
                id,
                -32600,
                "invalid request: initialize must not be part of a JSON-RPC batch; send it alone",
            ));
        }
        match serde_json::from_value::<ClientJsonRpcMessage>(value) {
            Ok(message) => Element::Message(Box::new(message)),
            Err(_) if is_notification => Element::Nothing,
            Err(err) => Element::Answer(error(
                id,
                -32600,
                &format!("invalid request: a batch element is not a JSON-RPC 2.0 message ({err})"),
            )),
        }
    }
}

/// The id rmcp answers a message under, when it answers it: requests only.
pub(crate) fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{Element, accepts_batches};

    fn check(element: Value) -> String {
        match Element::of(element) {
            Element::Message(message) => match super::request_id(&message) {
                Some(id) => format!("message {id}"),
                None => "message".into(),
            },
            Element::Answer(answer) => {
                format!("answer {} {}", answer["id"], answer["error"]["code"])
            }
            Element::Nothing => "nothing".into(),
        }
    }

    #[test]
    fn elements() {
        assert_eq!(
            check(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
            "message 1"
        );
        assert_eq!(
            check(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            "message"
        );
        assert_eq!(
            check(json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": 7})),
            "nothing"
        );
        assert_eq!(check(json!(1)), "answer null -32600");
        assert_eq!(check(json!({"jsonrpc": "2.0", "id": 4})), "answer 4 -32600");
        assert_eq!(
            check(json!({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {}})),
            "answer \"i\" -32600"
        );
        assert!(accepts_batches("2025-03-26"));
        assert!(!accepts_batches("2025-06-18"));
        assert!(!accepts_batches("2024-11-05"));
    }
}
