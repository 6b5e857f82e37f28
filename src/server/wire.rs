//! The tools as MCP describes them, and the one place call outcomes become MCP tool results and
//! HTTP responses.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::agent::tools::{DEFAULT_TOP_K, MAX_QUERY_CHARS};
use crate::agent::{CallError, CallResponse, QuotaState, Replayed};
use crate::search::MAX_TOP_K;

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("tool schemas are written as objects"),
    }
}

/// The pages of a passage in a document with pages (PDF); its lines are then lines of those
/// pages' text.
fn pages_schema() -> Value {
    json!({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2, "description": "first and last page, for a document with pages (PDF); lines are then lines of those pages' text"})
}

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
                "lines": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
                "pages": pages_schema()
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
            "pages": pages_schema(),
            "snippet": {"type": "string"},
            "text": {"type": "string"},
            "similarity": {"type": "number", "description": "cosine of the query's and the passage's embeddings (-1 to 1), comparable across queries and modes, unlike score; present when the query was embedded and the passage has an embedding"},
            "exact_match": {"type": "boolean", "description": "present (true) when the query is this passage's document's file name, title or identifier; such hits come first"}
        },
        "required": ["chunk_id", "score", "paths", "heading", "lines", "snippet", "text"]
    })
}

/// The shape of every tool error, executed (`not_found`) or refused.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "description": "a tool error (isError: true); code is stable, message says what to do",
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "retry_after_seconds": {"type": "integer"},
            "policy": {"type": "string"},
            "key": {"type": "string"}
        },
        "required": ["code", "message"]
    })
}

/// Makes an output schema admit error results too: `structuredContent` is either the answer
/// (its `required` fields) or `{"error": …}`, exactly one of them. SDKs that check an error's
/// `structuredContent` against the output schema (the TypeScript SDK does) then accept it.
fn admit_errors(output: &mut Value) {
    let answer_required = output
        .as_object_mut()
        .and_then(|schema| schema.remove("required"))
        .expect("an output schema lists its required fields");
    output["properties"]["error"] = error_schema();
    output["oneOf"] = json!([
        {"required": answer_required, "not": {"required": ["error"]}},
        {"required": ["error"]}
    ]);
}

/// The `semantic` object of a search answer: whether meaning took part, and why not fully.
fn semantic_schema() -> serde_json::Value {
    let reasons: Vec<&str> = crate::search::SemanticReason::ALL
        .iter()
        .map(|reason| reason.as_str())
        .collect();
    json!({
        "type": "object",
        "description": "whether meaning took part in the ranking: on (every chunk has a vector and the query was embedded by the store's model), partial (some chunks have no vector yet) or off (words alone); reason says why when not on",
        "properties": {
            "state": {"type": "string", "enum": ["on", "partial", "off"]},
            "reason": {
                "type": ["string", "null"],
                "enum": reasons.iter().map(|r| json!(r)).chain([json!(null)]).collect::<Vec<_>>(),
                "description": "no_model: the store has no embedding model; lexical_asked: mode lexical was asked for; model_missing: the folder of the store's model is gone; model_changed: another model is there now; model_unreadable: the folder is there but cannot be loaded; model_unreachable: the model's server cannot be reached; model_not_loaded: no model was given to the search; embedding_incomplete: some chunks have no vector yet; query_not_embedded: the model failed to embed this query"
            },
            "message": {"type": ["string", "null"], "description": "what reason means here, one line"},
            "hint": {"type": ["string", "null"], "description": "what to do about it"},
            "model": {"type": ["string", "null"], "description": "the store's model: its folder, or name and server"},
            "coverage": {
                "type": "object",
                "properties": {"vectors": {"type": "integer"}, "chunks": {"type": "integer"}},
                "required": ["vectors", "chunks"]
            }
        },
        "required": ["state", "reason", "message", "hint", "model", "coverage"]
    })
}

/// The filter arguments `search_docs` and `list_documents` share (`tools::filter`).
fn filter_properties() -> Value {
    json!({
        "root": {"type": "string", "description": "only documents under this root: a root as sources[].root gives it, or its folder name"},
        "path_prefix": {"type": "string", "description": "only files whose path (relative to its root) starts with this"},
        "path_glob": {"type": "string", "description": "only files whose path matches this glob: * within a folder, ** across folders, {a,b}, [abc]; e.g. guides/**/*.md"},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "only documents carrying every one of these front-matter tags"},
        "fields": {"type": "object", "additionalProperties": {"type": "string"}, "description": "only documents whose front-matter fields have these values (ignoring case), e.g. {\"status\": \"final\"}"}
    })
}

/// A tool's input schema: `properties` (plus the filter's when `filtered`), `required`, and no
/// other field.
fn input_schema(properties: Value, filtered: bool, required: &[&str]) -> Arc<JsonObject> {
    let mut properties = properties;
    if filtered {
        for (name, schema) in filter_properties().as_object().expect("an object") {
            properties[name] = schema.clone();
        }
    }
    object(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    }))
}

/// A document's head, as `read_document` and `list_documents` give it.
fn document_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "root": {"type": "string"},
            "path": {"type": "string", "description": "relative to root"},
            "title": {"type": ["string", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "fields": {"type": "object", "additionalProperties": {"type": "string"}, "description": "front-matter fields"},
            "chunks": {"type": "integer", "description": "how many passages it is made of"},
            "lines": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2, "description": "the lines its passages span"},
            "pages": pages_schema()
        },
        "required": ["root", "path", "title", "tags", "fields", "chunks"]
    })
}

/// The tools, in `TOOL_NAMES` order. The descriptions speak to the model about the search
/// alone: idempotency keys are the orchestrator's to give (in `_meta`), never the model's.
pub(crate) fn tool_list(key_ttl_ms: i64) -> Vec<Tool> {
    let annotations = || {
        ToolAnnotations::new()
            .read_only(true)
            .idempotent(true)
            .open_world(false)
    };
    let freshness = json!({
        "generation": {"type": "integer", "description": "the store generation the answer comes from"},
        "last_ingest": {"type": ["string", "null"], "description": "when the last ingest finished (RFC 3339)"}
    });
    let mut search_output = json!({
        "type": "object",
        "properties": {
            "hits": {"type": "array", "items": hit_schema()},
            "next_cursor": {"type": "string", "description": "present when more hits follow: pass it as cursor, with the same query and filters, for the next page from the same index generation"},
            "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic"], "description": "how the hits were ranked"},
            "semantic_coverage": {
                "type": "object",
                "description": "chunks with a vector (what semantic ranking can see) of all chunks; below chunks while the store is still embedding",
                "properties": {"vectors": {"type": "integer"}, "chunks": {"type": "integer"}},
                "required": ["vectors", "chunks"]
            },
            "semantic_unavailable": {"type": "string", "description": "present when the hits were ranked by words alone though the store has embeddings: why (the model that made them is not the one that would embed the query, or the query could not be embedded); semantic.message says the same"},
            "semantic": semantic_schema(),
            "min_score_unapplied": {"type": "string", "description": "present when min_score was given but could not be applied (the query was not embedded): why; no hit was dropped"}
        },
        // Not `semantic`: an answer stored before it existed is replayed byte for byte.
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
                "pages": pages_schema(),
                "text": {"type": "string"}
            },
            "required": ["chunk_id", "paths", "heading", "lines", "text"]
        }},
        "required": ["generation", "last_ingest", "chunk"]
    });
    let mut read_output = json!({
        "type": "object",
        "properties": {
            "document": document_schema(),
            "passages": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "chunk_id": {"type": "string"},
                    "ordinal": {"type": "integer", "description": "its place in the document, from 0"},
                    "heading": {"type": "string"},
                    "lines": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
                    "pages": pages_schema(),
                    "text": {"type": "string"}
                },
                "required": ["chunk_id", "ordinal", "heading", "lines", "text"]
            }},
            "next_cursor": {"type": "string", "description": "present when more passages follow: pass it as cursor, with the same arguments, for the next part of the same version"}
        },
        "required": ["generation", "last_ingest", "document", "passages"]
    });
    let mut list_output = json!({
        "type": "object",
        "properties": {
            "roots": {"type": "array", "items": {
                "type": "object",
                "properties": {"root": {"type": "string"}, "documents": {"type": "integer"}},
                "required": ["root", "documents"]
            }, "description": "every folder the store holds documents from, with how many"},
            "documents": {"type": "array", "items": document_schema()},
            "next_cursor": {"type": "string", "description": "present when more documents follow: pass it as cursor, with the same filters"}
        },
        "required": ["generation", "last_ingest", "roots", "documents"]
    });
    for output in [
        &mut search_output,
        &mut chunk_output,
        &mut read_output,
        &mut list_output,
    ] {
        for (name, schema) in freshness.as_object().expect("an object") {
            output["properties"][name] = schema.clone();
        }
        admit_errors(output);
    }
    let range = |what: &str| json!({"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2, "description": what});
    let tools = vec![
        Tool::new(
            "search_docs",
            "Search the indexed documents by words and, when the store has embeddings, by meaning. Identifiers, file names and titles weigh most: a query that names a document exactly finds it first. Returns up to top_k passages, best first, never the same passage twice, each with every file it appears in (root, path, lines; pages for a PDF), its heading path, a snippet and the full text. To read around a hit, call read_document with its chunk_id.",
            input_schema(
                json!({
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "description": "free text; quotes make a phrase; never fails for its syntax"},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": DEFAULT_TOP_K},
                    "cursor": {"type": "string", "description": "the next_cursor of the previous page; with the same query and filters it gives the next top_k hits from the same index generation"},
                    "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic"], "description": "lexical: by words; semantic: by meaning; hybrid: both fused. Default: hybrid when the store has embeddings, else lexical. The answer says the mode used and the semantic coverage."},
                    "min_score": {"type": "number", "minimum": -1, "maximum": 1, "description": "drop hits whose similarity to the query is below this, so that an answer with no hit means nothing relevant was found; documents named exactly by the query always stay, and so do passages not embedded yet (no similarity: while semantic.state is partial). Needs embeddings: if the query could not be embedded, min_score_unapplied says so and nothing is dropped"}
                }),
                true,
                &["query"],
            ),
        )
        .with_title("Search documents")
        .with_raw_output_schema(object(search_output))
        .with_annotations(annotations()),
        Tool::new(
            "get_chunk",
            "Fetch one passage by the chunk_id a search returned, with every file it appears in. An unknown id is an error result: a later ingest may have removed the passage, so search again.",
            input_schema(
                json!({"chunk_id": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}),
                false,
                &["chunk_id"],
            ),
        )
        .with_title("Get a passage")
        .with_raw_output_schema(object(chunk_output))
        .with_annotations(annotations()),
        Tool::new(
            "read_document",
            "Read a document, or the part of it around a passage: by path (as a hit's paths give it), whole or by lines (pages for a PDF), or by a hit's chunk_id with `around` passages on each side. Pass the search answer's generation to read the version the search saw: if the document changed since, the answer is a document_changed error. Long documents come in parts of whole passages; pass next_cursor to go on.",
            input_schema(
                json!({
                    "path": {"type": "string", "description": "the document's path relative to its root, as a hit's paths give it (or its full path); optional with chunk_id"},
                    "root": {"type": "string", "description": "the root the path is under (sources[].root, or its folder name); needed only when two roots hold the same path"},
                    "chunk_id": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "read around this passage (a hit's chunk_id)"},
                    "around": {"type": "integer", "minimum": 0, "maximum": crate::agent::tools::read::MAX_AROUND, "default": crate::agent::tools::read::DEFAULT_AROUND, "description": "with chunk_id: how many passages before and after it"},
                    "lines": range("only the passages that overlap these lines, [first, last]"),
                    "pages": range("only the passages on these pages, [first, last] (a PDF)"),
                    "generation": {"type": "integer", "minimum": 0, "description": "the generation of the search answer the hit came from: the document is read as that search saw it, or the answer says it has changed"},
                    "max_chars": {"type": "integer", "minimum": crate::agent::tools::read::MIN_MAX_CHARS, "maximum": crate::agent::tools::read::MAX_MAX_CHARS, "default": crate::agent::tools::read::DEFAULT_MAX_CHARS, "description": "at most this many characters of passage text in one answer (at least one whole passage)"},
                    "cursor": {"type": "string", "description": "the next_cursor of the previous part, with the same arguments"}
                }),
                false,
                &[],
            ),
        )
        .with_title("Read a document")
        .with_raw_output_schema(object(read_output))
        .with_annotations(annotations()),
        Tool::new(
            "list_documents",
            "List the indexed documents and the roots they come from: each document's path, title, tags and front-matter fields. Filter by root, path prefix or glob, words of the title, tags and field values. Answers limit documents at a time; pass next_cursor for more.",
            input_schema(
                json!({
                    "title": {"type": "string", "description": "only documents whose title contains this (ignoring case)"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": crate::agent::tools::read::MAX_LIMIT, "default": crate::agent::tools::read::DEFAULT_LIMIT},
                    "cursor": {"type": "string", "description": "the next_cursor of the previous answer, with the same filters"}
                }),
                true,
                &[],
            ),
        )
        .with_title("List documents")
        .with_raw_output_schema(object(list_output))
        .with_annotations(annotations()),
    ];
    let policy = key_policy(key_ttl_ms);
    tools
        .into_iter()
        .map(|mut tool| {
            let mut meta = MetaObject::new();
            meta.insert(KEY_POLICY_META.into(), policy.clone());
            tool.meta = Some(meta);
            tool
        })
        .collect()
}

/// Where each tool's `_meta` publishes the key policy. It is for the host or orchestrator
/// that makes keys, never for the model: the descriptions the model reads say nothing of keys.
pub(crate) const KEY_POLICY_META: &str = "groundidx/idempotency";

/// The key policy as data: where a key goes, its form, how long its answer is kept, and what
/// happens without one (README's "Idempotency keys" says the same in words).
fn key_policy(key_ttl_ms: i64) -> Value {
    json!({
        "meta_key": "groundidx/idempotencyKey",
        "meta_run_step": ["groundidx/runId", "groundidx/step"],
        "http_header": "Idempotency-Key",
        "key_format": format!("1 to {} visible ASCII characters", crate::agent::MAX_KEY_LEN),
        "max_length": crate::agent::MAX_KEY_LEN,
        "ttl_seconds": key_ttl_ms / 1000,
        "same_key_same_arguments": "the first answer again, marked replayed, counted and audited once",
        "same_key_other_arguments": "refused with idempotency_key_reused; the first answer is kept",
        "without_key": "executes every time under a key the server makes; not deduplicated",
        "made_by": "the orchestrator, from checkpointed identity (run, step, call); never by the model"
    })
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
pub(crate) fn mcp_result(response: &CallResponse) -> CallToolResult {
    let structured: Value = serde_json::from_str(&response.body).unwrap_or(Value::Null);
    let mut result = if response.is_error {
        CallToolResult::error(vec![ContentBlock::text(response.body.clone())])
    } else {
        CallToolResult::success(vec![ContentBlock::text(response.body.clone())])
    };
    result.structured_content = Some(structured);
    let mut meta = result_meta(
        Some(&response.key),
        Some(response.replayed),
        Some(response.key_source.as_str()),
    );
    if response.read_only {
        meta.insert("groundidx/readOnly".into(), json!(true));
    }
    result.with_meta(Some(meta))
}

/// A refused call as an MCP tool error the model can read and act on: the same shape as an
/// executed error answer (`not_found`), `{"error": {"code", "message", …}}` as
/// `structuredContent` and as the JSON of the text block, which the output schemas admit.
pub(crate) fn mcp_error(error: &CallError, key: Option<&str>) -> CallToolResult {
    let structured = error.to_json();
    let mut result = CallToolResult::error(vec![ContentBlock::text(structured.to_string())]);
    result.structured_content = Some(structured);
    result.with_meta(Some(result_meta(key, None, None)))
}

/// The HTTP status of a refused call.
pub(crate) fn http_status(error: &CallError) -> StatusCode {
    match error {
        CallError::InvalidKey(_) | CallError::InvalidArguments(_) => StatusCode::BAD_REQUEST,
        CallError::UnknownTool(_) => StatusCode::NOT_FOUND,
        CallError::KeyReused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        CallError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        // Only MCP cancels; should a cancelled call ever reach HTTP, it is one to retry.
        CallError::Busy { .. } | CallError::Unavailable(_) | CallError::Cancelled => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        CallError::CursorExpired { .. } => StatusCode::GONE,
    }
}

/// Every problem type the HTTP server answers with: code, title, and what the caller does about
/// it. `GET /problems` shows them; a problem's `type` is `/problems#` and the code with dashes
/// (the quota's is the IANA registry's `quota-exceeded`).
pub(crate) const PROBLEM_TYPES: &[(&str, &str, &str)] = &[
    (
        "invalid_arguments",
        "Invalid arguments",
        "The arguments do not fit the tool's input schema (tools/list has it); the detail names the field. Nothing was stored: correct the arguments and retry, with the same key if you like.",
    ),
    (
        "idempotency_key_invalid",
        "Invalid idempotency key",
        "A key is 1 to 255 visible ASCII characters: an Idempotency-Key header (\"abc\" or abc), or _meta[\"groundidx/idempotencyKey\"] over MCP. Nothing was stored.",
    ),
    (
        "idempotency_key_reused",
        "Idempotency-Key is already used",
        "The key was first used with other arguments or another tool. Nothing was written and the first answer is kept: retry with the original arguments, or give this call a new key (fix the key generation, not the arguments).",
    ),
    (
        "unknown_tool",
        "Unknown tool",
        "The tools are search_docs, get_chunk, read_document and list_documents.",
    ),
    (
        "not_found",
        "Not found",
        "The tool ran and found nothing by that name: get_chunk and read_document a chunk id the store no longer holds (a later ingest may have removed it; search again for a current id), read_document a path no document has, a root the store does not have. The answer is stored under its key and replayed like any other.",
    ),
    (
        "ambiguous_path",
        "Path under several roots",
        "read_document ran and more than one root holds this path; the detail lists them. Call again with root. The answer is stored under its key and replayed like any other.",
    ),
    (
        "document_changed",
        "Document changed",
        "read_document ran with the generation of an earlier search, and the document has changed since (its path now holds other content, or it was chunked again). Search again, or read it without generation for the current version. The answer is stored under its key and replayed like any other.",
    ),
    (
        "cursor_expired",
        "Cursor expired",
        "The cursor is of a store generation this server no longer serves: search_docs keeps a few index snapshots, list_documents pages only the generation it began in. Nothing was stored: call again without the cursor for the current generation's first page.",
    ),
    (
        "rate_limited",
        "Rate limit exceeded",
        "The client's quota for this window is used up (type https://iana.org/assignments/http-problem-types#quota-exceeded). Nothing was stored: retry after Retry-After seconds with the same key. Replays are served even over the quota.",
    ),
    (
        "busy",
        "Store busy",
        "The ledger's write lock was not free in time. Nothing was written: retry after Retry-After seconds with the same key.",
    ),
    (
        "unavailable",
        "Index unavailable",
        "The index could not be read or the call could not be recorded. Nothing was stored: retry with the same key; groundidx verify and groundidx rebuild repair a damaged index.",
    ),
    (
        "cancelled",
        "Cancelled",
        "The caller cancelled the call (MCP notifications/cancelled) before it was recorded. Nothing was written: a retry with the same key executes.",
    ),
    (
        "body_too_large",
        "Body too large",
        "A request body is at most 1 MiB.",
    ),
    (
        "body_timeout",
        "Body not received in time",
        "The request body did not arrive in full within the server's --body-timeout (30 s by default), counted from the end of the headers. The connection is closed and nothing was run: send the request again, body and all.",
    ),
    (
        "host_not_allowed",
        "Host not allowed",
        "On a loopback address only localhost, 127.0.0.1 and ::1 are served (a defence against DNS rebinding).",
    ),
    (
        "origin_not_allowed",
        "Origin not allowed",
        "Browsers may call only from the loopback origins and those given with --allow-origin.",
    ),
    (
        "unauthorized",
        "Unauthorized",
        "This server needs Authorization: Bearer TOKEN, with a token from its --tokens file.",
    ),
    (
        "route_not_found",
        "No such route",
        "Nothing is served at this path. The routes are POST /v1/tools/{tool}, POST /mcp, GET /health, GET /metrics and GET /problems.",
    ),
    (
        "method_not_allowed",
        "Method not allowed",
        "The route does not serve this method; the Allow header lists those it does (POST for /v1/tools/{tool} and /mcp, GET for the others).",
    ),
];

/// The `type` of a problem with this code.
pub(crate) fn problem_type(code: &str) -> String {
    if code == "rate_limited" {
        return "https://iana.org/assignments/http-problem-types#quota-exceeded".into();
    }
    format!("/problems#{}", code.replace('_', "-"))
}

/// A problem+json body (RFC 9457) with the code's type and title.
pub(crate) fn problem_body(status: StatusCode, code: &str, detail: String) -> Value {
    let title = PROBLEM_TYPES
        .iter()
        .find(|(known, _, _)| *known == code)
        .map_or_else(|| code.replace('_', " "), |(_, title, _)| title.to_string());
    json!({
        "type": problem_type(code),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
        "code": code,
    })
}

/// The problem+json body of a refused call (RFC 9457).
pub fn problem(error: &CallError) -> Value {
    let mut body = problem_body(http_status(error), error.code(), error.message());
    match error {
        CallError::KeyReused { key } => {
            body["detail"] = json!(format!(
                "key '{key}' was first used with different arguments"
            ));
        }
        CallError::RateLimited {
            retry_after_seconds,
        } => {
            body["violated-policies"] = json!(["per-client"]);
            body["retry_after_seconds"] = json!(retry_after_seconds);
        }
        _ => {}
    }
    body
}

/// An executed call's error answer (a stored `{"error": {"code", "message"}}`, such as
/// `not_found`) as its HTTP status and problem+json body. Made from the stored bytes alone, so a
/// replay's body is byte for byte the first one's.
pub(crate) fn answer_problem(body: &str) -> (StatusCode, Value) {
    let stored: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let code = stored["error"]["code"].as_str().unwrap_or("unavailable");
    let message = stored["error"]["message"]
        .as_str()
        .unwrap_or("the stored answer is unreadable")
        .to_string();
    let status = match code {
        "not_found" => StatusCode::NOT_FOUND,
        "ambiguous_path" | "document_changed" => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, problem_body(status, code, message))
}

/// `GET /problems`: one short section per problem type, each with the anchor its `type` names.
pub(crate) fn problems_page() -> String {
    let mut page = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>groundidx problem types</title></head>\n<body>\n<h1>groundidx problem types</h1>\n<p>Every error of the JSON API is application/problem+json (RFC 9457) with a stable <code>code</code>; its <code>type</code> points here. Over MCP the same code is in <code>structuredContent.error.code</code>.</p>\n",
    );
    for (code, title, what) in PROBLEM_TYPES {
        page.push_str(&format!(
            "<h2 id=\"{}\">{title}</h2>\n<p><code>{code}</code>: {what}</p>\n",
            code.replace('_', "-"),
        ));
    }
    page.push_str("</body>\n</html>\n");
    page
}

/// `RateLimit-Policy` and `RateLimit` (IETF RateLimit header fields) for a scope's quota.
pub(crate) fn rate_limit_headers(headers: &mut HeaderMap, quota: &QuotaState) {
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
