//! The tools as MCP describes them, and the one place call outcomes become MCP tool results and
//! HTTP responses.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::keys::{CallError, CallResponse, QuotaState, Replayed};
use crate::tools::{DEFAULT_TOP_K, MAX_QUERY_CHARS, MAX_TOP_K};

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are written as objects"),
    }
}

const KEYS: &str = "Idempotency: pass a key in _meta[\"groundidx/idempotencyKey\"] (1-255 visible ASCII characters; derive it from your checkpointed run id, step and tool-call id, never a fresh random value), or _meta[\"groundidx/runId\"] plus _meta[\"groundidx/step\"]. A retry with the same key and arguments returns the first answer and is audited and counted once; the same key with other arguments is refused. Keys are kept for the configured TTL (7 days by default, never less than 24 hours). Without a key the call is served but cannot be deduplicated: each retry is logged and counted again.";

/// Where a passage appears. Not in any `required` list: answers stored before it existed are
/// replayed as they were.
fn sources_schema() -> Value {
    json!({
        "type": "array",
        "description": "every file the passage appears in: the folder it was ingested from (root), its path relative to that folder, and the passage's lines there; tells the same relative path under two roots apart",
        "items": {
            "type": "object",
            "properties": {
                "root": {"type": "string"},
                "path": {"type": "string"},
                "lines": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
            },
            "required": ["root", "path", "lines"]
        }
    })
}

fn hit_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "chunk_id": {"type": "string", "description": "64 lowercase hex digits"},
            "score": {"type": "number"},
            "paths": {"type": "array", "items": {"type": "string"}, "description": "each path relative to its root, once; see sources for the roots"},
            "sources": sources_schema(),
            "heading": {"type": "string"},
            "lines": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            "snippet": {"type": "string"},
            "text": {"type": "string"}
        },
        "required": ["chunk_id", "score", "paths", "heading", "lines", "snippet", "text"]
    })
}

/// `search_docs` and `get_chunk`, in that order.
pub fn tool_list(ttl_days: i64) -> Vec<Tool> {
    let annotations = || {
        ToolAnnotations::new()
            .read_only(true)
            .idempotent(true)
            .open_world(false)
    };
    let freshness = json!({
        "generation": {"type": "integer", "description": "the index generation the answer comes from"},
        "last_ingest": {"type": ["string", "null"], "description": "when the last ingest finished (RFC 3339)"}
    });
    let mut search_output = json!({
        "type": "object",
        "properties": {
            "hits": {"type": "array", "items": hit_schema()},
            "next_cursor": {"type": "string", "description": "present when more hits follow: pass it as cursor, with the same query and filters, for the next page from the same index generation"}
        },
        "required": ["generation", "last_ingest", "hits"]
    });
    let mut chunk_output = json!({
        "type": "object",
        "properties": {"chunk": {
            "type": "object",
            "properties": {
                "chunk_id": {"type": "string"},
                "paths": {"type": "array", "items": {"type": "string"}},
                "sources": sources_schema(),
                "heading": {"type": "string"},
                "lines": {"type": "array", "items": {"type": "integer"}},
                "text": {"type": "string"}
            },
            "required": ["chunk_id", "paths", "heading", "lines", "text"]
        }},
        "required": ["generation", "last_ingest", "chunk"]
    });
    for output in [&mut search_output, &mut chunk_output] {
        for (name, schema) in freshness.as_object().expect("an object") {
            output["properties"][name] = schema.clone();
        }
    }
    let ttl = format!(" The key TTL of this server is {ttl_days} days.");
    vec![
        Tool::new(
            "search_docs",
            format!(
                "Search the indexed documents (BM25 with English stemming; titles and headings weigh more). Returns up to top_k passages, best first, never the same passage twice; each hit lists every file it appears in, its heading path, line range, a snippet with matched terms in **bold**, and the full passage. Read-only. {KEYS}{ttl}"
            ),
            object(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "description": "free text; quotes make a phrase; never fails for its syntax"},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": DEFAULT_TOP_K},
                    "path_prefix": {"type": "string", "description": "only passages from files whose path starts with this"},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "only documents carrying every one of these front-matter tags"},
                    "cursor": {"type": "string", "description": "the next_cursor of the previous page; with the same query and filters it gives the next top_k hits from the same index generation"}
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        )
        .with_title("Search documents")
        .with_raw_output_schema(object(search_output))
        .with_annotations(annotations()),
        Tool::new(
            "get_chunk",
            format!(
                "Fetch one passage by the chunk_id a search returned, with every file it appears in. Read-only; an unknown id is an error result (the passage may have been removed by a later ingest). {KEYS}{ttl}"
            ),
            object(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "chunk_id": {"type": "string", "pattern": "^[0-9a-f]{64}$"}
                },
                "required": ["chunk_id"],
                "additionalProperties": false
            })),
        )
        .with_title("Get a passage")
        .with_raw_output_schema(object(chunk_output))
        .with_annotations(annotations()),
    ]
}

/// The `_meta` of a tool result.
fn result_meta(
    key: Option<&str>,
    replayed: Option<Replayed>,
    key_source: Option<&str>,
) -> MetaObject {
    let mut meta = MetaObject::new();
    if let Some(key) = key {
        meta.insert("groundidx/idempotencyKey".into(), json!(key));
    }
    if let Some(replayed) = replayed {
        let value = match replayed {
            Replayed::No => json!(false),
            Replayed::Yes => json!(true),
            Replayed::Late => json!("late"),
        };
        meta.insert("groundidx/replayed".into(), value);
    }
    if let Some(source) = key_source {
        meta.insert("groundidx/keySource".into(), json!(source));
    }
    meta
}

/// An answer as an MCP tool result: the stored bytes as the text block, the same JSON as
/// `structuredContent`.
pub fn mcp_result(response: &CallResponse) -> CallToolResult {
    let structured: Value = serde_json::from_str(&response.body).unwrap_or(Value::Null);
    let mut result = if response.is_error {
        CallToolResult::error(vec![ContentBlock::text(response.body.clone())])
    } else {
        CallToolResult::success(vec![ContentBlock::text(response.body.clone())])
    };
    result.structured_content = Some(structured);
    result.with_meta(Some(result_meta(
        Some(&response.key),
        Some(response.replayed),
        Some(response.key_source.as_str()),
    )))
}

/// A refused call as an MCP tool error the model can read and act on.
pub fn mcp_error(error: &CallError, key: Option<&str>) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(error.message())]);
    result.structured_content = Some(error.to_json());
    result.with_meta(Some(result_meta(key, None, None)))
}

/// The HTTP status of a refused call.
pub fn http_status(error: &CallError) -> StatusCode {
    match error {
        CallError::InvalidKey(_) | CallError::InvalidArguments(_) => StatusCode::BAD_REQUEST,
        CallError::UnknownTool(_) => StatusCode::NOT_FOUND,
        CallError::KeyReused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        CallError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        CallError::Busy { .. } | CallError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        CallError::CursorExpired { .. } => StatusCode::GONE,
    }
}

/// The problem+json body of a refused call (RFC 9457).
pub fn problem(error: &CallError) -> Value {
    let status = http_status(error).as_u16();
    match error {
        CallError::KeyReused { key } => json!({
            "type": "/problems#idempotency-key-reused",
            "title": "Idempotency-Key is already used",
            "status": status,
            "detail": format!("key '{key}' was first used with different arguments"),
            "code": error.code(),
        }),
        CallError::RateLimited {
            retry_after_seconds,
        } => json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Rate limit exceeded",
            "status": status,
            "detail": error.message(),
            "code": error.code(),
            "violated-policies": ["per-client"],
            "retry_after_seconds": retry_after_seconds,
        }),
        _ => json!({
            "type": format!("/problems#{}", error.code().replace('_', "-")),
            "title": error.code().replace('_', " "),
            "status": status,
            "detail": error.message(),
            "code": error.code(),
        }),
    }
}

/// `RateLimit-Policy` and `RateLimit` (IETF RateLimit header fields) for a scope's quota.
pub fn rate_limit_headers(headers: &mut HeaderMap, quota: &QuotaState) {
    let policy = format!("\"per-client\";q={};w={}", quota.limit, quota.window_secs);
    let current = format!(
        "\"per-client\";r={};t={}",
        quota.remaining, quota.reset_seconds
    );
    for (name, value) in [("ratelimit-policy", policy), ("ratelimit", current)] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}
