//! The MCP server handler: `tools/list` and `tools/call` over any rmcp transport.
//!
//! The key comes from the request's `_meta` only (never from an HTTP header: on MCP-over-HTTP
//! `_meta` is the one channel, as on stdio). The call itself runs on a blocking thread.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, ErrorCode,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::clock;
use crate::keys::{Agent, CallError, CallKey, CallResponse, Replayed, ToolCall};
use crate::server::Scope;
use crate::server::metrics::{Metrics, Outcome};
use crate::server::tools::{mcp_error, mcp_result, tool_list};
use crate::tools::TOOL_NAMES;

/// The handler; cheap to clone (one per HTTP request in stateless mode).
#[derive(Clone)]
pub struct Handler {
    pub agent: Arc<Agent>,
    /// The scope for stdio; over HTTP the authenticated scope in the request wins.
    pub default_scope: Scope,
    /// Where calls are counted, when the server exposes `/metrics`.
    pub metrics: Option<Arc<Metrics>>,
}

impl Handler {
    fn tools(&self) -> Vec<Tool> {
        tool_list(self.agent.config().ttl_ms / 86_400_000)
    }
}

/// The key in `_meta`: `groundidx/idempotencyKey`, else the pair `groundidx/runId`,
/// `groundidx/step` (stored unambiguously: `CallKey::stored`).
fn key_from_meta(meta: &serde_json::Map<String, Value>) -> Result<Option<CallKey>, CallError> {
    let text = |name: &str| -> Result<Option<String>, CallError> {
        match meta.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(CallError::InvalidKey(format!(
                "_meta[\"{name}\"] must be a string"
            ))),
        }
    };
    if let Some(key) = text("groundidx/idempotencyKey")? {
        return Ok(Some(CallKey::Direct(key)));
    }
    match (text("groundidx/runId")?, text("groundidx/step")?) {
        (Some(run_id), Some(step)) => Ok(Some(CallKey::RunStep { run_id, step })),
        (None, None) => Ok(None),
        _ => Err(CallError::InvalidKey(
            "groundidx/runId and groundidx/step go together; give both, or groundidx/idempotencyKey".into(),
        )),
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("groundidx", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Search the indexed documents with search_docs, then fetch a passage with get_chunk. Pass an idempotency key in _meta so that retries are not logged or counted twice.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    /// rmcp hands over, as a custom request, a known method whose params did not parse (a
    /// `tools/call` without `name`, or with `arguments` that are not an object). That is invalid
    /// params (-32602), not an unknown method.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let method = request.method;
        let error = if method.starts_with("tools/") || method == "initialize" {
            ErrorData::invalid_params(
                format!(
                    "malformed {method} request: tools/call needs params with a \"name\" string and \"arguments\" as an object"
                ),
                None,
            )
        } else {
            ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("unknown method {method:?}"),
                None,
            )
        };
        tracing::info!(
            transport = "mcp",
            code = error.code.0,
            "refused a request: {}",
            error.message
        );
        Err(error)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let started = std::time::Instant::now();
        let record = |outcome: Outcome| {
            if let Some(metrics) = &self.metrics {
                metrics.record(&tool, "mcp", outcome, started.elapsed());
            }
        };
        if !TOOL_NAMES.contains(&tool.as_str()) {
            // Counted and logged as the JSON API does, so a refusal reads the same on either.
            let error = CallError::UnknownTool(tool.clone());
            log_refused(&tool, "mcp", &error, started.elapsed());
            record(Outcome::Refused(error.code()));
            return Err(ErrorData::invalid_params(
                format!("unknown tool {tool:?}; the tools are search_docs and get_chunk"),
                Some(json!({"tool": tool})),
            ));
        }
        let key = match key_from_meta(&context.meta) {
            Ok(key) => key,
            Err(error) => {
                log_refused(&tool, "mcp", &error, started.elapsed());
                record(Outcome::Refused(error.code()));
                return Ok(mcp_error(&error, None).into());
            }
        };
        let scope = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Scope>())
            .unwrap_or(&self.default_scope)
            .clone();
        // The key echoed in the `_meta` of an error result: a direct key as given, a run and
        // step as stored (none when they are invalid).
        let shown_key = match &key {
            Some(CallKey::Direct(key)) => Some(key.clone()),
            Some(pair) => pair.stored().ok(),
            None => None,
        };
        let call = ToolCall {
            scope: scope.0,
            key,
            tool: tool.clone(),
            arguments: Value::Object(request.arguments.unwrap_or_default()),
        };
        let agent = self.agent.clone();
        // rmcp cancels the request's token on `notifications/cancelled`; the blocking call asks
        // it just before its commit (C6), and rmcp drops the response of a cancelled request.
        let cancel = context.ct.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            agent.call_cancellable(&call, clock::now_ms(), &|| cancel.is_cancelled())
        })
        .await
        .map_err(|err| ErrorData::internal_error(format!("tool call failed: {err}"), None))?;
        log_call(&tool, "mcp", &outcome, started.elapsed());
        record(Outcome::of(&outcome));
        Ok(match outcome {
            Ok(response) => mcp_result(&response),
            Err(error) => mcp_error(&error, shown_key.as_deref()),
        }
        .into())
    }
}

/// Logs a finished call as one readable line at INFO: what ran, or why it was refused.
pub fn log_call(
    tool: &str,
    transport: &'static str,
    outcome: &Result<CallResponse, CallError>,
    took: std::time::Duration,
) {
    let replayed = match outcome {
        Ok(response) => response.replayed,
        Err(error) => return log_refused(tool, transport, error, took),
    };
    let outcome = match replayed {
        Replayed::No => "executed",
        Replayed::Yes => "replayed",
        Replayed::Late => "executed late",
    };
    tracing::info!(tool, transport, outcome, took = ?took, "call");
}

/// A refused call as one line with its code and message: at INFO for a client's mistake or a
/// call to retry (rate limited, busy, cancelled), which are no warnings; at WARN when the
/// server itself cannot serve (`unavailable`: an unreadable index, an unreachable ledger).
pub fn log_refused(
    tool: &str,
    transport: &'static str,
    error: &CallError,
    took: std::time::Duration,
) {
    let code = error.code();
    let message = error.message();
    match error {
        CallError::Unavailable(_) => {
            tracing::warn!(tool, transport, code, took = ?took, "could not serve a call: {message}")
        }
        _ => tracing::info!(tool, transport, code, took = ?took, "refused a call: {message}"),
    }
}
