//! The agent tools: `search_docs` and `get_chunk` here, `read_document` and `list_documents`
//! in `read`; their arguments, checked strictly (the filters they share in `filter`), and
//! their execution against a store reader. Read-only: nothing here writes.
//!
//! A call's answer is the JSON text of its structured result, produced once here, so the same
//! bytes go into the idempotency record, the MCP result and the HTTP body.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::cursor::{Cursor, CursorKey};
use crate::error::Result;
use crate::ids::ChunkId;
use crate::index::Snapshot;
use crate::search::{self, ChunkRecord, MAX_TOP_K, MIN_SCORE_RANGE, Mode, SearchRequest, Sources};
use crate::store::StoreReader;
use crate::vectors::VectorSet;

pub mod filter;
pub mod read;

pub use read::Span;

pub use read::{ListRequest, ReadRequest};

/// The tools, in the order `tools/list` gives them.
pub const TOOL_NAMES: [&str; 4] = [
    "search_docs",
    "get_chunk",
    "read_document",
    "list_documents",
];
/// The longest query accepted.
pub const MAX_QUERY_CHARS: usize = 10_000;
/// Hits when `top_k` is not given.
pub(crate) const DEFAULT_TOP_K: usize = 10;

/// A validated tool call.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolRequest {
    SearchDocs(SearchRequest),
    /// `search_docs` with the `cursor` a previous page gave; checked against the store's key
    /// when it runs (`keys`).
    SearchPage {
        request: SearchRequest,
        cursor: String,
    },
    GetChunk(ChunkId),
    ReadDocument(ReadRequest),
    ListDocuments(ListRequest),
}

/// Why a tool did not answer: the store failed, or a cursor cannot be continued.
#[derive(Debug)]
pub enum ToolError {
    Store(crate::error::Error),
    /// Not a cursor this store gave for this call: why.
    InvalidCursor(String),
    /// A cursor of a generation the store has moved past.
    CursorExpired {
        generation: u64,
    },
}

impl From<crate::error::Error> for ToolError {
    fn from(error: crate::error::Error) -> ToolError {
        ToolError::Store(error)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchDocsArgs {
    query: String,
    top_k: Option<serde_json::Number>,
    // The filter's fields, read by `filter::parse`.
    #[serde(rename = "root")]
    _root: Option<Value>,
    #[serde(rename = "path_prefix")]
    _path_prefix: Option<Value>,
    #[serde(rename = "path_glob")]
    _path_glob: Option<Value>,
    #[serde(rename = "tags")]
    _tags: Option<Value>,
    #[serde(rename = "fields")]
    _fields: Option<Value>,
    cursor: Option<String>,
    mode: Option<String>,
    min_score: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetChunkArgs {
    chunk_id: String,
}

/// Why a call's arguments were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgumentError {
    UnknownTool(String),
    Invalid(String),
}

/// Checks a call's arguments. Defaults are applied here, after the fingerprint was taken.
pub fn parse(tool: &str, arguments: &Value) -> Result<ToolRequest, ArgumentError> {
    if !arguments.is_object() {
        return Err(ArgumentError::Invalid(
            "arguments must be a JSON object".into(),
        ));
    }
    let invalid = |err: serde_json::Error| ArgumentError::Invalid(format!("{tool}: {err}"));
    match tool {
        "search_docs" => {
            check_types(
                arguments,
                &[
                    ("query", "a string", Value::is_string),
                    // `null` is not absent: the schema says integer, so it is refused.
                    // As JSON Schema counts: 3.0 and 3e0 are the integer 3, 3.5 is none.
                    ("top_k", "an integer", |v| {
                        v.as_f64().is_some_and(|x| x.fract() == 0.0)
                    }),
                    ("cursor", "a string (a next_cursor)", Value::is_string),
                    ("min_score", "a number between -1 and 1", |v| {
                        v.as_f64().is_some_and(|x| {
                            (f64::from(*MIN_SCORE_RANGE.start())
                                ..=f64::from(*MIN_SCORE_RANGE.end()))
                                .contains(&x)
                        })
                    }),
                    (
                        "mode",
                        "one of \"hybrid\", \"lexical\", \"semantic\"",
                        |v| v.as_str().is_some_and(|m| Mode::NAMES.contains(&m)),
                    ),
                ],
            )?;
            let filter = filter::parse(arguments)?;
            let args: SearchDocsArgs =
                serde_json::from_value(arguments.clone()).map_err(invalid)?;
            let query = args.query.trim();
            if query.is_empty() {
                return Err(ArgumentError::Invalid("query must not be empty".into()));
            }
            if args.query.chars().count() > MAX_QUERY_CHARS {
                return Err(ArgumentError::Invalid(format!(
                    "query is longer than {MAX_QUERY_CHARS} characters"
                )));
            }
            let top_k = match &args.top_k {
                None => DEFAULT_TOP_K,
                Some(number) => top_k_in_range(number)?,
            };
            let request = SearchRequest {
                query: query.to_string(),
                top_k,
                filter,
                mode: args
                    .mode
                    .as_deref()
                    .map(str::parse)
                    .transpose()
                    .map_err(ArgumentError::Invalid)?,
                min_score: args.min_score.map(|x| x as f32),
            };
            Ok(match args.cursor {
                Some(cursor) => ToolRequest::SearchPage { request, cursor },
                None => ToolRequest::SearchDocs(request),
            })
        }
        "get_chunk" => {
            check_types(
                arguments,
                &[(
                    "chunk_id",
                    "a string of 64 lowercase hex digits",
                    Value::is_string,
                )],
            )?;
            let args: GetChunkArgs = serde_json::from_value(arguments.clone()).map_err(invalid)?;
            let id = args.chunk_id.parse::<ChunkId>().map_err(|_| {
                ArgumentError::Invalid(
                    "chunk_id must be 64 lowercase hex digits, as search_docs returns it".into(),
                )
            })?;
            Ok(ToolRequest::GetChunk(id))
        }
        "read_document" => read::parse_read(arguments).map(ToolRequest::ReadDocument),
        "list_documents" => read::parse_list(arguments).map(ToolRequest::ListDocuments),
        other => Err(ArgumentError::UnknownTool(other.to_string())),
    }
}

/// `top_k` as a count of hits, or the range it must be in (for `-1` as for `1000000`).
fn top_k_in_range(number: &serde_json::Number) -> Result<usize, ArgumentError> {
    number
        .as_u64()
        .or_else(|| {
            number
                .as_f64()
                .filter(|n| *n >= 0.0 && n.fract() == 0.0)
                .map(|n| n as u64)
        })
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| (1..=MAX_TOP_K).contains(n))
        .ok_or_else(|| {
            ArgumentError::Invalid(format!(
                "top_k must be between 1 and {MAX_TOP_K}, not {number}"
            ))
        })
}

/// A field's name, what it must be, and the check that it is.
pub(crate) type FieldType = (&'static str, &'static str, fn(&Value) -> bool);

/// Refuses a field of the wrong JSON type with a message that names it: serde's own says only
/// "invalid type: floating point `2.5`, expected u64". Absent fields are left to serde.
pub(crate) fn check_types(arguments: &Value, fields: &[FieldType]) -> Result<(), ArgumentError> {
    for (name, expected, fits) in fields {
        if let Some(value) = arguments.get(*name)
            && !fits(value)
        {
            return Err(ArgumentError::Invalid(format!(
                "{name} must be {expected}, not {}",
                shown(value)
            )));
        }
    }
    Ok(())
}

/// A value as an error message shows it: its JSON, cut at 40 characters.
pub(crate) fn shown(value: &Value) -> String {
    let mut shown: String = value.to_string().chars().take(41).collect();
    if shown.chars().count() > 40 {
        shown = shown.chars().take(40).chain(['…']).collect();
    }
    shown
}

/// An executed call's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolAnswer {
    /// The structured result as JSON text.
    pub body: String,
    /// An executed business error (an unknown chunk): still an answer, stored and replayed.
    pub is_error: bool,
    /// `ok` or `not_found`, for the audit log.
    pub outcome: &'static str,
    pub n_hits: u64,
    pub index_generation: u64,
}

/// A search answer as the tool gives it: the search's fields, and `next_cursor` when more hits
/// follow.
#[derive(Serialize)]
struct SearchAnswer<'a> {
    #[serde(flatten)]
    response: &'a search::SearchResponse,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// What a page cursor is bound to: the query, filters and relevance floor (not `top_k`, which
/// may change from page to page). A floor is bound only when given, so a cursor made before
/// floors existed still continues its search.
pub(crate) fn cursor_request(request: &SearchRequest) -> Vec<u8> {
    let mut bound = serde_json::json!({
        "query": request.query,
        "path_prefix": request.filter.path_prefix,
        "tags": request.filter.tags,
        "mode": request.mode.map(Mode::as_str),
    });
    if let Some(floor) = request.min_score {
        bound["min_score"] = serde_json::json!(floor);
    }
    if let Value::Object(bound) = &mut bound {
        filter::bound(&request.filter, bound);
    }
    bound.to_string().into_bytes()
}

/// Runs `search_docs` on one snapshot from hit `offset` on; with `pages`, an answer with more
/// hits after it carries the `next_cursor` that continues it on the same snapshot.
pub fn search_docs(
    reader: &StoreReader,
    snapshot: &Snapshot,
    vectors: Option<&VectorSet>,
    request: &SearchRequest,
    offset: u32,
    pages: Option<&CursorKey>,
) -> Result<ToolAnswer> {
    let ledger = reader.ledger()?;
    let mut resolved;
    let mut request = request;
    if let Some(named) = &request.filter.root {
        match filter::resolve_root(&ledger, named)? {
            Ok(root) => {
                resolved = request.clone();
                resolved.filter.root = Some(root);
                request = &resolved;
            }
            Err(why) => {
                let generation = snapshot.generation().0;
                return Ok(ToolAnswer {
                    body: serde_json::json!({"error": {"code": "not_found", "message": why}})
                        .to_string(),
                    is_error: true,
                    outcome: "not_found",
                    n_hits: 0,
                    index_generation: generation,
                });
            }
        }
    }
    let embedder = reader.embedder();
    let model_problem = reader.model_problem();
    let sources = Sources {
        snapshot,
        vectors,
        embedder: embedder.as_deref(),
        model_problem: model_problem.as_ref(),
    };
    let page = search::search_page(sources, &ledger, request, offset as usize)?;
    // The floor embeds the query in lexical mode too: its pages continue on the same vectors.
    let used_vectors = match page.used_vectors {
        false => 0,
        true => vectors.map_or(0, |v| v.marker.key()),
    };
    let next_cursor = match pages {
        Some(key) if page.more => Some(key.seal(
            &Cursor {
                generation: snapshot.generation(),
                layout: snapshot.layout(),
                vectors: used_vectors,
                offset: offset + page.response.hits.len() as u32,
            },
            &cursor_request(request),
        )),
        _ => None,
    };
    let response = page.response;
    Ok(ToolAnswer {
        n_hits: response.hits.len() as u64,
        index_generation: response.generation,
        body: serde_json::to_string(&SearchAnswer {
            response: &response,
            next_cursor,
        })
        .expect("a search response serialises"),
        is_error: false,
        outcome: "ok",
    })
}

#[derive(Serialize)]
struct ChunkAnswer<'a> {
    generation: u64,
    last_ingest: Option<String>,
    chunk: &'a ChunkRecord,
}

/// Runs `get_chunk` against the reader's ledger; the answer names the generation searches see.
pub fn get_chunk(reader: &StoreReader, id: &ChunkId) -> Result<ToolAnswer> {
    // The generation of the snapshot searches see, as a search would answer it.
    let generation = reader.index().snapshot().generation().0;
    match search::get_chunk(reader, id)? {
        Some(chunk) => Ok(ToolAnswer {
            body: serde_json::to_string(&ChunkAnswer {
                generation,
                last_ingest: reader
                    .ledger()?
                    .last_ingest_ms()?
                    .map(crate::clock::rfc3339),
                chunk: &chunk,
            })
            .expect("a chunk serialises"),
            is_error: false,
            outcome: "ok",
            n_hits: 1,
            index_generation: generation,
        }),
        None => Ok(ToolAnswer {
            body: serde_json::json!({"error": {
                "code": "not_found",
                "message": format!("no chunk {id} in the store; it may have been removed by a later ingest"),
            }})
            .to_string(),
            is_error: true,
            outcome: "not_found",
            n_hits: 0,
            index_generation: generation,
        }),
    }
}
