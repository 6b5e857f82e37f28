//! The HTTP server: MCP Streamable HTTP at `/mcp`, the JSON API at `/v1/tools/{tool}`, and
//! `/health`. Every request passes, in this order, a guard that checks the Host (DNS-rebinding
//! defence) and the Origin; CORS (`tower-http`), which answers a browser's preflight from an
//! allowed origin and marks every other answer to it readable; and the bearer-token check,
//! which sets the request's scope. A preflight thus needs no token (browsers never send one on
//! it), and a refusal of the token still reaches the browser app that asked.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tower::{Layer as _, ServiceExt as _};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::agent::{Agent, CallError, CallKey, Replayed, ToolCall};
use crate::clock;
use crate::server::Scope;
use crate::server::batch;
use crate::server::connections::{self, ConnectionLimits, ConnectionProof};
use crate::server::mcp::{Handler, log_call};
use crate::server::metrics::{Metrics, Outcome};
use crate::server::stdio::NumberOutOfRange;
use crate::server::wire::{
    answer_problem, http_status, problem, problem_body, problems_page, rate_limit_headers,
};

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// What the HTTP routes share.
pub(crate) struct HttpState {
    pub agent: Arc<Agent>,
    /// Bearer token to client id; empty means no authentication and `default_scope` for all.
    pub tokens: HashMap<String, String>,
    pub default_scope: Scope,
    /// Origins allowed to call (`http://localhost:*` style patterns).
    pub allowed_origins: Vec<String>,
    /// Host names allowed in the Host header (any port).
    pub allowed_hosts: Vec<String>,
    pub metrics: Arc<Metrics>,
    /// How long a request's body may take to arrive (`ConnectionLimits::body_timeout`).
    pub body_timeout: Duration,
}

/// Builds the router.
pub(crate) fn router(state: Arc<HttpState>, cancel: tokio_util::sync::CancellationToken) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(state.allowed_hosts.clone())
        .with_allowed_origins(state.allowed_origins.clone())
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(cancel.child_token());
    let handler = Handler {
        agent: state.agent.clone(),
        default_scope: state.default_scope.clone(),
        metrics: Some(state.metrics.clone()),
    };
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let mcp = Router::new()
        .nest_service("/mcp", mcp)
        .route_layer(middleware::from_fn(mcp_body));
    let cors = cors_layer(state.allowed_origins.clone());
    Router::new()
        .route("/", get(health))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/problems", get(problems))
        .route("/v1/tools/{tool}", post(call_tool))
        .method_not_allowed_fallback(method_not_allowed)
        .merge(mcp)
        .fallback(route_not_found)
        // Inside the token check: a request it refuses is answered without its body being read.
        .layer(middleware::from_fn_with_state(state.clone(), read_body))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn_with_state(cors, cors_headers))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// The request headers a browser app may send: the JSON API's and MCP Streamable HTTP's.
const CORS_REQUEST_HEADERS: [&str; 7] = [
    "content-type",
    "authorization",
    "idempotency-key",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "accept",
];

/// The response headers a browser app needs to read (a browser hides every other one but the
/// CORS-safelisted few). `Mcp-Session-Id` is listed though `/mcp` is served statelessly and
/// never sends it today: an MCP client in a browser reads it when present, and a session mode
/// must not need a CORS change to work.
const CORS_EXPOSED_HEADERS: [&str; 8] = [
    "idempotency-key",
    "idempotent-replayed",
    "ratelimit",
    "ratelimit-policy",
    "retry-after",
    "groundidx-read-only",
    "www-authenticate",
    "mcp-session-id",
];

/// How long a browser may keep a preflight's answer (Chromium caps it at two hours).
const CORS_MAX_AGE: Duration = Duration::from_secs(2 * 60 * 60);

/// CORS for the origins the guard lets in (the same list, the same test): the origin itself
/// echoed, never `*`. The methods are those the routes serve: `/mcp` is stateless, so it
/// takes POST alone and never DELETE.
fn cors_layer(allowed_origins: Vec<String>) -> CorsLayer {
    let names = |names: &[&'static str]| -> Vec<HeaderName> {
        names
            .iter()
            .map(|name| HeaderName::from_static(name))
            .collect()
    };
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin
                .to_str()
                .is_ok_and(|origin| origin_allowed(origin, &allowed_origins))
        }))
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers(names(&CORS_REQUEST_HEADERS))
        .expose_headers(names(&CORS_EXPOSED_HEADERS))
        .max_age(CORS_MAX_AGE)
}

/// A CORS preflight: `OPTIONS` from an origin, with the method the browser means to use.
fn is_preflight(request: &Request) -> bool {
    let headers = request.headers();
    request.method() == Method::OPTIONS
        && headers.contains_key(header::ORIGIN)
        && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// Applies `cors_layer` to every request but an `OPTIONS` that is not a preflight (which goes
/// on to the routes, and their 405). A preflight is answered here, 204 and no body, without
/// reaching the token check; the guard has refused one from an origin not allowed already.
async fn cors_headers(State(cors): State<CorsLayer>, request: Request, next: Next) -> Response {
    if request.method() == Method::OPTIONS && !is_preflight(&request) {
        return next.run(request).await;
    }
    let preflight = is_preflight(&request);
    let Ok(mut response) = cors.layer(next).oneshot(request).await;
    if preflight {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// A path no route serves: a problem like every other error, not an empty 404.
async fn route_not_found(uri: Uri) -> Response {
    problem_response(
        StatusCode::NOT_FOUND,
        "route_not_found",
        format!(
            "no route {:?}; the routes are POST /v1/tools/{{tool}}, POST /mcp, GET /health, GET /metrics and GET /problems",
            uri.path()
        ),
    )
}

/// A route asked with a method it does not serve. The router adds the `Allow` header.
async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    problem_response(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{method} is not served on {:?}; the Allow header lists the methods that are",
            uri.path()
        ),
    )
}

fn problem_response(status: StatusCode, code: &str, detail: String) -> Response {
    let body = problem_body(status, code, detail);
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

/// A JSON POST to `/mcp` whose body is not one JSON-RPC message is a bad request (400, with a
/// JSON-RPC parse or invalid-request error and no id), as the MCP transport says; rmcp would
/// answer 415, as if the media type were wrong. A body that is JSON but holds a number no double
/// can hold (`NumberOutOfRange`) is invalid params: a request gets its answer with its own id
/// (200), as rmcp answers other invalid params. A JSON array is a batch (`mcp_batch`). The body
/// is read once, within the size limit, and handed on. rmcp's own 405 (a method other than
/// POST) becomes a problem like every other error.
async fn mcp_body(request: Request, next: Next) -> Response {
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split(';').next())
        .is_some_and(|h| h.trim().eq_ignore_ascii_case("application/json"));
    if request.method() != axum::http::Method::POST || !json {
        let method = request.method().clone();
        let uri = request.uri().clone();
        let response = next.run(request).await;
        if response.status() != StatusCode::METHOD_NOT_ALLOWED {
            return response;
        }
        let mut problem = method_not_allowed(method, uri).await;
        if let Some(allow) = response.headers().get(header::ALLOW) {
            problem.headers_mut().insert(header::ALLOW, allow.clone());
        }
        return problem;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return problem_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body is over {MAX_BODY_BYTES} bytes"),
        );
    };
    if bytes.trim_ascii_start().first() == Some(&b'[')
        && let Ok(Value::Array(elements)) = serde_json::from_slice::<Value>(&bytes)
    {
        return mcp_batch(parts, elements, next).await;
    }
    if let Err(err) = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(&bytes) {
        let (status, id, code, message) = match NumberOutOfRange::of(&bytes) {
            Some(number) => {
                // Only a request is answered as one; the transport wants a 400 for anything
                // else it cannot accept.
                let status = if number.is_request() {
                    StatusCode::OK
                } else {
                    StatusCode::BAD_REQUEST
                };
                (status, number.id(), number.code(), number.message())
            }
            None => match err.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => (
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    -32700,
                    format!("parse error: the body is not JSON: {err}"),
                ),
                _ => (
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    -32600,
                    format!("invalid request: the body must be a JSON-RPC 2.0 message: {err}"),
                ),
            },
        };
        tracing::info!(transport = "http", code, %id, "refused a message: {message}");
        return (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            batch::error(id, code, &message).to_string(),
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// A JSON-RPC batch POSTed to `/mcp`. At protocol revision 2025-03-26 (the
/// `MCP-Protocol-Version` header, or no header, which the transport says means 2025-03-26)
/// each element goes through rmcp as a request of its own, in order, and the answers to its
/// requests come back as one JSON array (202 and no body when it held none); at any other
/// revision the batch is refused as before, with one invalid-request error.
async fn mcp_batch(
    parts: axum::http::request::Parts,
    elements: Vec<Value>,
    next: Next,
) -> Response {
    let json_rpc_error = |message: &str| {
        (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            batch::error(Value::Null, -32600, message).to_string(),
        )
            .into_response()
    };
    let revision = parts
        .headers
        .get("mcp-protocol-version")
        .map(|value| value.to_str().unwrap_or("?"));
    if !batch::accepts_batches(revision.unwrap_or(batch::BATCH_REVISION)) {
        return json_rpc_error(&batch::refused_message(revision));
    }
    if elements.is_empty() {
        return json_rpc_error(batch::EMPTY_MESSAGE);
    }
    let mut answers = Vec::new();
    for element in elements {
        let message = match batch::Element::of(element) {
            batch::Element::Message(message) => message,
            batch::Element::Answer(answer) => {
                answers.push(answer);
                continue;
            }
            batch::Element::Nothing => continue,
        };
        let body = serde_json::to_vec(&message).unwrap_or_default();
        let request = Request::from_parts(parts.clone(), Body::from(body));
        let response = next.clone().run(request).await;
        if response.status() == StatusCode::ACCEPTED {
            continue;
        }
        let (response_parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let answered = json_rpc_answers(&response_parts.headers, &bytes);
        if answered.is_empty() {
            // Not a JSON-RPC answer (a wrong Accept header, a forbidden Origin): a refusal of
            // the request as a whole, the same for every element.
            return Response::from_parts(response_parts, Body::from(bytes));
        }
        answers.extend(answered);
    }
    if answers.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Value::Array(answers).to_string(),
    )
        .into_response()
}

/// The JSON-RPC answers (results and errors) in a response from rmcp: a JSON body, or the
/// `data:` lines of an event stream.
fn json_rpc_answers(headers: &HeaderMap, body: &[u8]) -> Vec<Value> {
    let is_answer = |message: &Value| {
        message.get("jsonrpc").is_some()
            && message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some())
    };
    let event_stream = headers
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h.starts_with("text/event-stream"));
    if event_stream {
        return String::from_utf8_lossy(body)
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .filter(is_answer)
            .collect();
    }
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(is_answer)
        .into_iter()
        .collect()
}

/// Reads a request's whole body before any handler sees it: at most `MAX_BODY_BYTES` (413),
/// within the body timeout (408). Without the timeout a client that announces a body and never
/// sends it holds its connection, and a slot, forever. Both refusals close the connection, as
/// the rest of the body may still be on its way.
async fn read_body(State(state): State<Arc<HttpState>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(
        state.body_timeout,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await;
    let mut refusal = match read {
        Ok(Ok(bytes)) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
        Ok(Err(_)) => problem_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the body is over {MAX_BODY_BYTES} bytes"),
        ),
        Err(_) => problem_response(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the body did not arrive within {} s",
                state.body_timeout.as_secs_f64()
            ),
        ),
    };
    refusal
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    refusal
}

/// Host and Origin checks for every request, a CORS preflight included: a request from a host
/// or an origin not served here is refused before CORS could mark its answer readable.
async fn guard(State(state): State<Arc<HttpState>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok())
        && !host_allowed(host, &state.allowed_hosts)
    {
        return problem_response(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!("Host {host:?} is not served here"),
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok())
        && !origin_allowed(origin, &state.allowed_origins)
    {
        return problem_response(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!("Origin {origin:?} is not allowed"),
        );
    }
    next.run(request).await
}

/// The bearer-token check; sets the request's `Scope`, and proves the request's connection
/// (`ConnectionProof`) when it carried a valid token or none is needed.
async fn authenticate(
    State(state): State<Arc<HttpState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let path = request.uri().path();
    let needs_auth = path.starts_with("/mcp") || path.starts_with("/v1/") || path == "/metrics";
    let client = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("Bearer"))
        .and_then(|(_, token)| state.tokens.get(token.trim()));
    // Only a request with a valid token proves its connection where tokens are required, even
    // on `/health`: anyone may ask for that, so answering it proves nothing about the client.
    if (state.tokens.is_empty() || client.is_some())
        && let Some(proof) = request.extensions().get::<ConnectionProof>()
    {
        proof.authenticated();
    }
    let scope = if state.tokens.is_empty() || !needs_auth {
        state.default_scope.clone()
    } else {
        match client {
            Some(client) => Scope(client.clone()),
            None => {
                let mut response = problem_response(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "a valid bearer token is required (Authorization: Bearer TOKEN)".into(),
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
        }
    };
    request.extensions_mut().insert(scope);
    next.run(request).await
}

fn host_allowed(host: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// Patterns are `scheme://host` or `scheme://host:port`, with `*` as a port wildcard.
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    allowed
        .iter()
        .any(|pattern| match pattern.strip_suffix(":*") {
            Some(base) => {
                origin == base
                    || origin
                        .strip_prefix(base)
                        .and_then(|rest| rest.strip_prefix(':'))
                        .is_some_and(|port| {
                            !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                        })
            }
            None => origin == pattern,
        })
}

async fn health(State(state): State<Arc<HttpState>>) -> Response {
    let agent = state.agent.clone();
    let (generation, ledger, semantic) = tokio::task::spawn_blocking(move || {
        (
            agent.generation().ok(),
            agent.ledger_reachable(),
            agent.semantic_status(),
        )
    })
    .await
    .unwrap_or((None, Ok(()), None));
    // The mode a search would run in now, and why meaning takes no or partial part: still 200,
    // words answer, but an operator sees the reason (`semantic.reason`).
    let (mode, semantic) = match semantic {
        Some((mode, semantic)) => (json!(mode), json!(semantic)),
        None => (json!(null), json!(null)),
    };
    // A host that cannot reach its shared ledger still searches its replica: 200, read-only.
    match ledger {
        Ok(()) => axum::Json(json!({
            "status": "ok",
            "generation": generation,
            "mode": mode,
            "semantic": semantic,
        }))
        .into_response(),
        Err((since, error)) => axum::Json(json!({
            "status": "read_only",
            "generation": generation,
            "mode": mode,
            "semantic": semantic,
            "ledger": {"reachable": false, "since": clock::rfc3339(since), "error": error},
        }))
        .into_response(),
    }
}

/// The page every problem `type` points into.
async fn problems() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        problems_page(),
    )
        .into_response()
}

async fn metrics(State(state): State<Arc<HttpState>>) -> Response {
    let agent = state.agent.clone();
    let (generation, last_ingest, shared) = tokio::task::spawn_blocking(move || {
        (
            agent.generation().ok(),
            agent.last_ingest_ms().ok().flatten(),
            agent.shared_state(),
        )
    })
    .await
    .unwrap_or((None, None, None));
    let age = last_ingest.map(|ms| ((clock::now_ms() - ms).max(0)) as f64 / 1000.0);
    let mut text = state.metrics.render(generation, age);
    if let Some((reachable, spooled)) = shared {
        text.push_str(&crate::server::metrics::render_shared(reachable, spooled));
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The `Idempotency-Key` header: an RFC 8941 sf-string (`"abc"`) or, leniently, a bare token.
fn header_key(headers: &HeaderMap) -> Result<Option<String>, CallError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| CallError::InvalidKey("Idempotency-Key must be visible ASCII".into()))?
        .trim();
    let key = match text.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .filter(|inner| !inner.contains(['"', '\\']))
            .ok_or_else(|| {
                CallError::InvalidKey("Idempotency-Key is not a valid sf-string".into())
            })?,
        None => text,
    };
    Ok(Some(key.to_string()))
}

async fn call_tool(
    State(state): State<Arc<HttpState>>,
    Path(tool): Path<String>,
    request: Request,
) -> Response {
    let scope = request
        .extensions()
        .get::<Scope>()
        .cloned()
        .unwrap_or_else(|| state.default_scope.clone());
    let headers = request.headers().clone();
    let started = std::time::Instant::now();
    let tool_name = tool.clone();
    let body: Bytes = match axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(_) => {
            return problem_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the body is over {MAX_BODY_BYTES} bytes"),
            );
        }
    };
    let outcome = match (header_key(&headers), serde_json::from_slice::<Value>(&body)) {
        (Err(error), _) => Err(error),
        (_, Err(err)) if NumberOutOfRange::of(&body).is_some() => {
            Err(CallError::InvalidArguments(format!(
                "the body holds a number out of range ({err}); a number must fit a 64-bit float"
            )))
        }
        (_, Err(err)) => Err(CallError::InvalidArguments(format!(
            "the body is not JSON: {err}"
        ))),
        (Ok(key), Ok(arguments)) => {
            let call = ToolCall {
                scope: scope.0.clone(),
                key: key.map(CallKey::Direct),
                tool,
                arguments,
            };
            let agent = state.agent.clone();
            tokio::task::spawn_blocking(move || agent.call(&call, clock::now_ms()))
                .await
                .unwrap_or_else(|err| Err(CallError::Unavailable(err.to_string())))
        }
    };
    log_call(&tool_name, "http", &outcome, started.elapsed());
    state
        .metrics
        .record(&tool_name, "http", Outcome::of(&outcome), started.elapsed());
    let agent = state.agent.clone();
    let scope_name = scope.0.clone();
    let quota = tokio::task::spawn_blocking(move || agent.quota(&scope_name, clock::now_ms()))
        .await
        .ok()
        .and_then(Result::ok);
    let mut response = match outcome {
        Ok(answer) => answer_response(answer),
        Err(error) => error_response(&error),
    };
    if let Some(quota) = quota {
        rate_limit_headers(response.headers_mut(), &quota);
    }
    response
}

/// A call's answer over HTTP: its body (an executed error as a problem, made from the stored
/// answer alone, so a replay repeats it byte for byte), its key, and whether it was replayed
/// or answered read-only.
fn answer_response(answer: crate::agent::CallResponse) -> Response {
    // An executed error (an unknown chunk) is a problem like every other error; its
    // body is made from the stored answer alone, so a replay repeats it byte for byte.
    let (status, content_type, body) = if answer.is_error {
        let (status, body) = answer_problem(&answer.body);
        (status, "application/problem+json", body.to_string())
    } else {
        (StatusCode::OK, "application/json", answer.body)
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(key) = HeaderValue::from_str(&answer.key) {
        response.headers_mut().insert("idempotency-key", key);
    }
    // A late answer (its key was pruned by `gc`) is fresh, not the stored one: it says
    // `late`, as MCP's `_meta["groundidx/replayed"]` does, never `true`.
    let replayed = match answer.replayed {
        Replayed::No => None,
        Replayed::Yes => Some("true"),
        Replayed::Late => Some("late"),
    };
    if let Some(replayed) = replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static(replayed));
    }
    if answer.read_only {
        response
            .headers_mut()
            .insert("groundidx-read-only", HeaderValue::from_static("1"));
    }
    response
}

/// A refused call over HTTP: a problem, with `Retry-After` when a retry may succeed.
fn error_response(error: &CallError) -> Response {
    let mut response = (
        http_status(error),
        [(header::CONTENT_TYPE, "application/problem+json")],
        problem(error).to_string(),
    )
        .into_response();
    let retry_after = match *error {
        CallError::RateLimited {
            retry_after_seconds,
        }
        | CallError::Busy {
            retry_after_seconds,
        } => Some(retry_after_seconds),
        CallError::Unavailable(_) => Some(1),
        _ => None,
    };
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// Binds `listen` and serves until Ctrl-C or SIGTERM, within `limits`; `on_listen` gets the
/// bound address.
pub async fn serve(
    state: Arc<HttpState>,
    listen: SocketAddr,
    limits: ConnectionLimits,
    on_listen: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    let limits = connections::fitted_to_open_files(limits);
    let cancel = tokio_util::sync::CancellationToken::new();
    let listener = tokio::net::TcpListener::bind(listen).await?;
    on_listen(listener.local_addr()?);
    let app = router(state, cancel.clone());
    let shutdown = cancel.clone();
    tokio::spawn(async move {
        crate::server::shutdown_signal().await;
        shutdown.cancel();
    });
    connections::serve(listener, app, limits, cancel).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{host_allowed, origin_allowed};

    #[test]
    fn origins_and_hosts() {
        let origins = vec![
            "http://localhost:*".to_string(),
            "https://app.example".to_string(),
        ];
        assert!(origin_allowed("http://localhost:3000", &origins));
        assert!(origin_allowed("http://localhost", &origins));
        assert!(!origin_allowed("http://localhost.evil:3000", &origins));
        assert!(!origin_allowed("http://evil.example", &origins));
        assert!(origin_allowed("https://app.example", &origins));
        let hosts = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        assert!(host_allowed("127.0.0.1:7878", &hosts));
        assert!(host_allowed("[::1]:7878", &hosts));
        assert!(!host_allowed("attacker.example", &hosts));
    }
}
