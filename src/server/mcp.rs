//! The MCP server handler: `tools/list` and `tools/call` over any rmcp transport.
//!
//! The key comes from the request's `_meta` only (never from an HTTP header: on MCP-over-HTTP
//! `_meta` is the one channel, as on stdio). The call itself runs on a blocking thread.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, ErrorCode,
    Implementation, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::agent::tools::TOOL_NAMES;
use crate::agent::{Agent, CallError, CallKey, CallResponse, Replayed, ToolCall};
use crate::clock;
use crate::server::Scope;
use crate::server::metrics::{Metrics, Outcome};
use crate::server::resources;
use crate::server::wire::{mcp_error, mcp_result, tool_list};

/// The handler; cheap to clone (one per HTTP request in stateless mode).
#[derive(Clone)]
pub(crate) struct Handler {
    pub agent: Arc<Agent>,
    /// The scope for stdio; over HTTP the authenticated scope in the request wins.
    pub default_scope: Scope,
    /// Where calls are counted, when the server exposes `/metrics`.
    pub metrics: Option<Arc<Metrics>>,
}

impl Handler {
    fn tools(&self) -> Vec<Tool> {
        tool_list(self.agent.config().ttl_ms)
    }

    /// Runs a resource request as the call of the tool it is (`list_documents`,
    /// `read_document`): keyed by the request's `_meta` like a tool call, audited and counted
    /// under that tool's name. The answer's JSON, or the request's error: a refusal, or the
    /// tool's error answer (`not_found` as MCP's resource-not-found).
    async fn resource_call(
        &self,
        tool: &'static str,
        arguments: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let started = std::time::Instant::now();
        let key = key_from_meta(&context.meta)
            .map_err(|error| ErrorData::invalid_params(error.message(), Some(error.to_json())))?;
        let scope = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Scope>())
            .unwrap_or(&self.default_scope)
            .clone();
        let call = ToolCall {
            scope: scope.0,
            key,
            tool: tool.to_string(),
            arguments,
        };
        let agent = self.agent.clone();
        let cancel = context.ct.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            agent.call_cancellable(&call, clock::now_ms(), &|| cancel.is_cancelled())
        })
        .await
        .map_err(|err| ErrorData::internal_error(format!("{tool} failed: {err}"), None))?;
        if let Some(metrics) = &self.metrics {
            metrics.record(tool, "mcp", Outcome::of(&outcome), started.elapsed());
        }
        let response = outcome.map_err(|error| {
            let code = match error {
                CallError::InvalidArguments(_)
                | CallError::InvalidKey(_)
                | CallError::KeyReused { .. } => ErrorCode::INVALID_PARAMS,
                _ => ErrorCode::INTERNAL_ERROR,
            };
            ErrorData::new(code, error.message(), Some(error.to_json()))
        })?;
        let answer: Value = serde_json::from_str(&response.body).unwrap_or(Value::Null);
        if response.is_error {
            let message = answer["error"]["message"]
                .as_str()
                .unwrap_or("the document cannot be read")
                .to_string();
            return Err(match answer["error"]["code"].as_str() {
                Some("not_found") => ErrorData::resource_not_found(message, Some(answer)),
                _ => ErrorData::invalid_params(message, Some(answer)),
            });
        }
        Ok(answer)
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
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
            .with_server_info(Implementation::new("groundidx", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Search the indexed documents with search_docs; read around a hit with read_document (its chunk_id, or its path and lines); list what is indexed with list_documents. The documents are also resources (groundidx://ROOT/PATH).",
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
    /// `tools/call` without `name`, or with `arguments` that are not an object; a
    /// `resources/read` without a `uri` string). That is invalid params (-32602), not an
    /// unknown method.
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
        } else if [
            "resources/read",
            "resources/list",
            "resources/templates/list",
        ]
        .contains(&method.as_str())
        {
            ErrorData::invalid_params(
                format!(
                    "malformed {method} request: resources/read needs params with a \"uri\" string (from resources/list), resources/list an optional \"cursor\" string"
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

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut arguments = json!({"limit": crate::agent::tools::read::MAX_LIMIT});
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            arguments["cursor"] = json!(cursor);
        }
        let answer = self
            .resource_call("list_documents", arguments, &context)
            .await?;
        let mut result = ListResourcesResult::with_all_items(resources::resources(&answer));
        result.next_cursor = answer["next_cursor"].as_str().map(str::to_string);
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (root, path) = resources::parse_uri(&request.uri)
            .map_err(|why| ErrorData::resource_not_found(why, Some(json!({"uri": request.uri}))))?;
        let arguments = json!({
            "root": root,
            "path": path,
            "max_chars": crate::agent::tools::read::MAX_MAX_CHARS,
        });
        let answer = self
            .resource_call("read_document", arguments, &context)
            .await?;
        Ok(ReadResourceResult::new(vec![resources::contents(&request.uri, &answer)]).into())
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
                format!(
                    "unknown tool {tool:?}; the tools are {}",
                    TOOL_NAMES.join(", ")
                ),
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
pub(crate) fn log_call(
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
pub(crate) fn log_refused(
    tool: &str,
    transport: &'static str,
    error: &CallError,
    took: std::time::Duration,
) {
    let code = error.code();
    let message = error.message();
    match error {
        CallError::Unavailable(_) => {
            tracing::warn!(tool, transport, code, took = ?took, "could not serve a call: {message}");
        }
        _ => tracing::info!(tool, transport, code, took = ?took, "refused a call: {message}"),
    }
}
