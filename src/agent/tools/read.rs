//! `read_document` and `list_documents`: reading around a hit, and finding documents, from the
//! ledger (where every passage's text, heading, lines and pages live). Read-only.
//!
//! A document is served as what the store holds of it: its passages in order, each with its
//! heading path, lines (and pages, for a PDF) and text. A caller may name the generation it
//! searched at: the document is then served only if it has not changed since (each source
//! records the generation from which it has held its content), else the call answers
//! `document_changed`, so that a passage and its context never come from two versions of a
//! file. Long answers are cut at whole passages and continue with a cursor pinned to the same
//! generation.

use serde::Serialize;
use serde_json::{Value, json};

use crate::agent::cursor::{Cursor, CursorKey};
use crate::agent::tools::filter;
use crate::agent::tools::{ArgumentError, FieldType, ToolAnswer, ToolError, check_types, shown};
use crate::error::Result;
use crate::ids::{ChunkId, Generation};
use crate::ledger::{ChunkFilter, DocumentEntry, Ledger, Passage};
use crate::store::StoreReader;

/// Characters of passage text in one answer when `max_chars` is not given.
pub(crate) const DEFAULT_MAX_CHARS: usize = 20_000;
/// The most `max_chars` may ask for.
pub const MAX_MAX_CHARS: usize = 200_000;
/// The least `max_chars` may ask for.
pub const MIN_MAX_CHARS: usize = 500;
/// Passages on each side of `chunk_id` when `around` is not given.
pub(crate) const DEFAULT_AROUND: u32 = 2;
/// The most passages on each side `around` may ask for.
pub const MAX_AROUND: u32 = 50;
/// Documents in one `list_documents` answer when `limit` is not given.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// The most documents one `list_documents` answer may hold.
pub const MAX_LIMIT: usize = 1000;

/// What part of a document to read.
#[derive(Clone, Debug, PartialEq)]
pub enum Span {
    Whole,
    /// Passages that overlap these lines (first, last; from 1).
    Lines(u32, u32),
    /// Passages that overlap these pages (a document with pages).
    Pages(u32, u32),
    /// This passage and `around` passages on each side of it.
    Around(ChunkId, u32),
}

/// A validated `read_document` call.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadRequest {
    pub root: Option<String>,
    /// Relative to its root; with `Span::Around` it may be absent (the passage's first source).
    pub path: Option<String>,
    pub span: Span,
    /// The generation the caller searched at; the current one when absent.
    pub generation: Option<u64>,
    pub max_chars: usize,
    pub cursor: Option<String>,
}

/// A validated `list_documents` call.
#[derive(Clone, Debug, PartialEq)]
pub struct ListRequest {
    pub filter: ChunkFilter,
    /// Keep documents whose title holds this, ignoring case.
    pub title: Option<String>,
    pub limit: usize,
    pub cursor: Option<String>,
}

const READ_TYPES: [FieldType; 9] = [
    (
        "root",
        "a string (a root as sources[].root gives it, or its folder name)",
        Value::is_string,
    ),
    (
        "path",
        "a string (a path relative to its root, as a hit's paths give it)",
        Value::is_string,
    ),
    (
        "chunk_id",
        "a string of 64 lowercase hex digits",
        Value::is_string,
    ),
    ("around", "a whole number", is_whole),
    (
        "lines",
        "an array of two whole numbers [first, last]",
        is_pair,
    ),
    (
        "pages",
        "an array of two whole numbers [first, last]",
        is_pair,
    ),
    (
        "generation",
        "a whole number (a search answer's generation)",
        is_whole,
    ),
    ("max_chars", "a whole number", is_whole),
    ("cursor", "a string (a next_cursor)", Value::is_string),
];

fn is_whole(value: &Value) -> bool {
    whole(value).is_some()
}

/// A JSON number with no fractional part (3 and 3.0 alike), as JSON Schema's integer.
fn whole(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x <= u32::MAX as f64)
            .map(|x| x as u64)
    })
}

fn is_pair(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|pair| pair.len() == 2 && pair.iter().all(is_whole))
}

/// A `[first, last]` range from 1, or why not.
fn range(arguments: &Value, name: &str) -> Result<Option<(u32, u32)>, ArgumentError> {
    let Some(pair) = arguments.get(name).and_then(Value::as_array) else {
        return Ok(None);
    };
    let number = |i: usize| whole(&pair[i]).and_then(|n| u32::try_from(n).ok());
    match (number(0), number(1)) {
        (Some(first), Some(last)) if first >= 1 && first <= last => Ok(Some((first, last))),
        _ => Err(ArgumentError::Invalid(format!(
            "{name} must be [first, last] with 1 <= first <= last, not {}",
            shown(&Value::Array(pair.clone()))
        ))),
    }
}

/// A whole-number argument within `range`, or its default.
fn bounded(
    arguments: &Value,
    name: &str,
    default: usize,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, ArgumentError> {
    match arguments.get(name) {
        None => Ok(default),
        Some(value) => whole(value)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                ArgumentError::Invalid(format!(
                    "{name} must be between {} and {}, not {}",
                    range.start(),
                    range.end(),
                    shown(value)
                ))
            }),
    }
}

/// Refuses fields that are not in `known`.
fn only(tool: &str, arguments: &Value, known: &[&str]) -> Result<(), ArgumentError> {
    let object = arguments
        .as_object()
        .ok_or_else(|| ArgumentError::Invalid("arguments must be a JSON object".into()))?;
    match object.keys().find(|key| !known.contains(&key.as_str())) {
        Some(unknown) => Err(ArgumentError::Invalid(format!(
            "{tool}: unknown field {unknown:?}; the fields are {}",
            known.join(", ")
        ))),
        None => Ok(()),
    }
}

/// Checks a `read_document` call.
pub(crate) fn parse_read(arguments: &Value) -> Result<ReadRequest, ArgumentError> {
    let names: Vec<&str> = READ_TYPES.iter().map(|(name, _, _)| *name).collect();
    only("read_document", arguments, &names)?;
    check_types(arguments, &READ_TYPES)?;
    let text = |name: &str| arguments.get(name).and_then(Value::as_str);
    let path = match text("path") {
        Some(path) => Some(ChunkFilter::normalise_path(path).ok_or_else(|| {
            ArgumentError::Invalid("path must name a file, relative to its root".into())
        })?),
        None => None,
    };
    let chunk_id = match text("chunk_id") {
        Some(id) => Some(id.parse::<ChunkId>().map_err(|_| {
            ArgumentError::Invalid(
                "chunk_id must be 64 lowercase hex digits, as search_docs returns it".into(),
            )
        })?),
        None => None,
    };
    let lines = range(arguments, "lines")?;
    let pages = range(arguments, "pages")?;
    let around = bounded(
        arguments,
        "around",
        DEFAULT_AROUND as usize,
        0..=MAX_AROUND as usize,
    )? as u32;
    if arguments.get("around").is_some() && chunk_id.is_none() {
        return Err(ArgumentError::Invalid(
            "around needs chunk_id: it counts passages on each side of that one".into(),
        ));
    }
    let span = match (chunk_id, lines, pages) {
        (None, None, None) => Span::Whole,
        (Some(id), None, None) => Span::Around(id, around),
        (None, Some((first, last)), None) => Span::Lines(first, last),
        (None, None, Some((first, last))) => Span::Pages(first, last),
        _ => {
            return Err(ArgumentError::Invalid(
                "give at most one of chunk_id, lines and pages".into(),
            ));
        }
    };
    if path.is_none() && !matches!(span, Span::Around(..)) {
        return Err(ArgumentError::Invalid(
            "read_document needs path (relative to its root, as a hit's paths give it) or chunk_id"
                .into(),
        ));
    }
    Ok(ReadRequest {
        root: text("root").map(str::to_string),
        path,
        span,
        generation: arguments.get("generation").and_then(whole),
        max_chars: bounded(
            arguments,
            "max_chars",
            DEFAULT_MAX_CHARS,
            MIN_MAX_CHARS..=MAX_MAX_CHARS,
        )?,
        cursor: text("cursor").map(str::to_string),
    })
}

/// Checks a `list_documents` call.
pub(crate) fn parse_list(arguments: &Value) -> Result<ListRequest, ArgumentError> {
    let mut names: Vec<&str> = filter::FILTER_TYPES
        .iter()
        .map(|(name, _, _)| *name)
        .collect();
    names.extend(["title", "limit", "cursor"]);
    only("list_documents", arguments, &names)?;
    check_types(
        arguments,
        &[
            ("title", "a string", Value::is_string),
            ("limit", "a whole number", is_whole),
            ("cursor", "a string (a next_cursor)", Value::is_string),
        ],
    )?;
    let filter = filter::parse(arguments)?;
    let title = arguments
        .get("title")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    if title
        .as_ref()
        .is_some_and(|t| t.len() > filter::MAX_FILTER_BYTES)
    {
        return Err(ArgumentError::Invalid(format!(
            "title must be at most {} bytes",
            filter::MAX_FILTER_BYTES
        )));
    }
    Ok(ListRequest {
        filter,
        title,
        limit: bounded(arguments, "limit", DEFAULT_LIMIT, 1..=MAX_LIMIT)?,
        cursor: arguments
            .get("cursor")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// A passage as `read_document` gives it.
#[derive(Serialize)]
struct PassageOut<'a> {
    chunk_id: String,
    ordinal: u32,
    heading: String,
    lines: [u32; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    pages: Option<[u32; 2]>,
    text: &'a str,
}

/// A document's head, as both tools give it.
#[derive(Serialize)]
struct DocumentOut<'a> {
    root: &'a str,
    path: &'a str,
    title: Option<&'a str>,
    tags: &'a [String],
    fields: &'a std::collections::BTreeMap<String, String>,
    chunks: u64,
    /// Read: the lines (and pages) its passages span.
    #[serde(skip_serializing_if = "Option::is_none")]
    lines: Option<[u32; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pages: Option<[u32; 2]>,
}

fn document_out<'a>(entry: &'a DocumentEntry, passages: Option<&[Passage]>) -> DocumentOut<'a> {
    let span = |of: &dyn Fn(&Passage) -> Option<(u32, u32)>| -> Option<[u32; 2]> {
        let spans: Vec<(u32, u32)> = passages?.iter().filter_map(of).collect();
        Some([
            spans.iter().map(|s| s.0).min()?,
            spans.iter().map(|s| s.1).max()?,
        ])
    };
    DocumentOut {
        root: &entry.root,
        path: &entry.path,
        title: entry.title.as_deref(),
        tags: &entry.tags,
        fields: &entry.fields,
        chunks: entry.chunks,
        lines: span(&|p| Some(p.lines)),
        pages: span(&|p| p.pages),
    }
}

/// An executed call's error answer: stored under its key and replayed like any other.
fn error_answer(code: &'static str, message: String, generation: u64) -> ToolAnswer {
    ToolAnswer {
        body: json!({"error": {"code": code, "message": message}}).to_string(),
        is_error: true,
        outcome: code,
        n_hits: 0,
        index_generation: generation,
    }
}

/// What a `read_document` cursor is bound to: the document and the span, as the caller named
/// them (not `max_chars`, which may change from page to page).
fn read_bound(request: &ReadRequest) -> Vec<u8> {
    let span = match &request.span {
        Span::Whole => json!("whole"),
        Span::Lines(a, b) => json!(["lines", a, b]),
        Span::Pages(a, b) => json!(["pages", a, b]),
        Span::Around(id, n) => json!(["around", id.to_hex(), n]),
    };
    json!({"tool": "read_document", "root": request.root, "path": request.path, "span": span, "generation": request.generation})
        .to_string()
        .into_bytes()
}

fn list_bound(request: &ListRequest) -> Vec<u8> {
    let mut bound = serde_json::Map::new();
    bound.insert("tool".into(), json!("list_documents"));
    bound.insert("path_prefix".into(), json!(request.filter.path_prefix));
    bound.insert("tags".into(), json!(request.filter.tags));
    bound.insert("title".into(), json!(request.title));
    filter::bound(&request.filter, &mut bound);
    Value::Object(bound).to_string().into_bytes()
}

fn last_ingest(ledger: &Ledger) -> Result<Option<String>> {
    Ok(ledger.last_ingest_ms()?.map(crate::clock::rfc3339))
}

/// Runs `read_document` on the reader's ledger.
pub fn read_document(
    reader: &StoreReader,
    request: &ReadRequest,
    key: &CursorKey,
) -> Result<ToolAnswer, ToolError> {
    let cursor = match &request.cursor {
        Some(text) => Some(
            key.open(text, &read_bound(request))
                .map_err(ToolError::InvalidCursor)?,
        ),
        None => None,
    };
    let ledger = reader.ledger()?;
    let answer = ledger.read_snapshot(|ledger| read_in(ledger, request, cursor, key))?;
    Ok(answer)
}

fn read_in(
    ledger: &Ledger,
    request: &ReadRequest,
    cursor: Option<Cursor>,
    key: &CursorKey,
) -> Result<ToolAnswer> {
    let current = ledger.generation()?.0;
    // The generation the answer is of: the cursor's (its first page's), else the caller's.
    let pinned = cursor.map(|c| c.generation.0).or(request.generation);
    let answered = pinned.unwrap_or(current);
    if answered > current {
        return Ok(error_answer(
            "not_found",
            format!(
                "the store has no generation {answered} yet (it is at generation {current}); pass the generation of a search answer, or none for the current version"
            ),
            current,
        ));
    }
    let entry = match locate(ledger, request, answered)? {
        Ok(entry) => entry,
        Err(answer) => return Ok(answer),
    };
    let entry = &entry;
    if let Some(generation) = pinned
        && entry.since > Generation(generation)
    {
        return Ok(error_answer(
            "document_changed",
            format!(
                "{} changed after generation {generation} (it holds what it holds now since generation {}); search again, or read it without generation for the current version",
                entry.path, entry.since.0
            ),
            current,
        ));
    }
    let passages = ledger.passages(&entry.doc_hash)?;
    let selected = match select(&passages, &request.span, entry, answered) {
        Ok(selected) => selected,
        Err(answer) => return Ok(answer),
    };
    let start = cursor.map_or(0, |c| c.offset);
    let mut page: Vec<&Passage> = Vec::new();
    let mut chars = 0;
    let mut rest = selected.iter().filter(|p| p.ordinal >= start).peekable();
    while let Some(passage) = rest.peek() {
        let size = passage.text.chars().count();
        // Whole passages only, and always at least one.
        if !page.is_empty() && chars + size > request.max_chars {
            break;
        }
        chars += size;
        page.push(passage);
        rest.next();
    }
    let next_cursor = rest.peek().map(|next| {
        key.seal(
            &Cursor {
                generation: Generation(answered),
                layout: 0,
                vectors: 0,
                offset: next.ordinal,
            },
            &read_bound(request),
        )
    });
    let body = json!({
        "generation": answered,
        "last_ingest": last_ingest(ledger)?,
        "document": document_out(entry, Some(&passages)),
        "passages": page.iter().map(|p| PassageOut {
            chunk_id: p.chunk_id.to_hex(),
            ordinal: p.ordinal,
            heading: p.heading_path.join(" > "),
            lines: [p.lines.0, p.lines.1],
            pages: p.pages.map(|(a, b)| [a, b]),
            text: &p.text,
        }).collect::<Vec<_>>(),
    });
    let mut body = body;
    if let Some(cursor) = next_cursor {
        body["next_cursor"] = json!(cursor);
    }
    Ok(ToolAnswer {
        n_hits: page.len() as u64,
        body: body.to_string(),
        is_error: false,
        outcome: "ok",
        index_generation: answered,
    })
}

/// The one document a read names (by path, or by the passage's first source), or the error
/// answer that says why there is none.
fn locate(
    ledger: &Ledger,
    request: &ReadRequest,
    answered: u64,
) -> Result<Result<DocumentEntry, ToolAnswer>> {
    let root = match &request.root {
        Some(named) => match filter::resolve_root(ledger, named)? {
            Ok(root) => Some(root),
            Err(why) => return Ok(Err(error_answer("not_found", why, answered))),
        },
        None => None,
    };
    let (root, path) = match (&request.path, &request.span) {
        // Around a passage: its own source names the root (and the path, when not given).
        (given, Span::Around(id, _)) if root.is_none() || given.is_none() => {
            let source = ledger.sources_of_chunk(id)?.into_iter().find(|s| {
                root.as_ref().is_none_or(|root| *root == s.root)
                    && given.as_ref().is_none_or(|path| *path == s.path)
            });
            match (source, given) {
                (Some(source), _) => (Some(source.root), source.path),
                // Not at that path: the document is read, and says the passage is not in it.
                (None, Some(path)) => (root, path.clone()),
                (None, None) => {
                    return Ok(Err(error_answer(
                        "not_found",
                        format!(
                            "no chunk {id} in the store; a later ingest may have removed it: search again for a current id"
                        ),
                        answered,
                    )));
                }
            }
        }
        (Some(path), _) if root.is_none() => match under_a_root(ledger, path)? {
            Some((root, relative)) => (Some(root), relative),
            None => (None, path.clone()),
        },
        (Some(path), _) => (root, path.clone()),
        (None, _) => {
            return Ok(Err(error_answer(
                "not_found",
                "read_document names a document by path, or a passage by chunk_id".into(),
                answered,
            )));
        }
    };
    let mut found = ledger.documents_at(root.as_deref(), &path)?;
    Ok(match found.len() {
        0 => Err(error_answer(
            "not_found",
            format!(
                "no document at {path:?}{}; list_documents shows the paths the store holds",
                root.as_ref()
                    .map(|r| format!(" under {r}"))
                    .unwrap_or_default()
            ),
            answered,
        )),
        1 => Ok(found.remove(0)),
        _ => Err(error_answer(
            "ambiguous_path",
            format!(
                "{path:?} is under more than one root: {}; give root",
                found
                    .iter()
                    .map(|e| e.root.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            answered,
        )),
    })
}

/// A path given whole (`/srv/docs/guide/intro.md`, as a file-based agent holds it) as the
/// root it is under (the deepest, if roots nest) and its path relative to that root.
fn under_a_root(ledger: &Ledger, path: &str) -> Result<Option<(String, String)>> {
    if !path.starts_with('/') {
        return Ok(None);
    }
    Ok(ledger
        .root_counts()?
        .into_iter()
        .filter_map(|(root, _)| {
            let relative = path.strip_prefix(root.as_str())?.strip_prefix('/')?;
            (!relative.is_empty()).then(|| (root.clone(), relative.to_string()))
        })
        .max_by_key(|(root, _)| root.len()))
}

/// The passages of `span`, in document order, or the error answer that says why there are none.
fn select<'a>(
    passages: &'a [Passage],
    span: &Span,
    entry: &DocumentEntry,
    answered: u64,
) -> Result<Vec<&'a Passage>, ToolAnswer> {
    Ok(match span {
        Span::Whole => passages.iter().collect(),
        Span::Lines(first, last) => passages
            .iter()
            .filter(|p| p.lines.0 <= *last && p.lines.1 >= *first)
            .collect(),
        Span::Pages(first, last) => {
            if passages.iter().all(|p| p.pages.is_none()) {
                return Err(error_answer(
                    "not_found",
                    format!(
                        "{} has no pages (only PDFs have them); read it by lines",
                        entry.path
                    ),
                    answered,
                ));
            }
            passages
                .iter()
                .filter(|p| p.pages.is_some_and(|(a, b)| a <= *last && b >= *first))
                .collect()
        }
        Span::Around(id, around) => match passages.iter().position(|p| p.chunk_id == *id) {
            Some(at) => {
                let from = at.saturating_sub(*around as usize);
                let to = (at + *around as usize + 1).min(passages.len());
                passages[from..to].iter().collect()
            }
            None => {
                return Err(error_answer(
                    "not_found",
                    format!(
                        "chunk {id} is not in {} (now); search again for a current id",
                        entry.path
                    ),
                    answered,
                ));
            }
        },
    })
}

/// Runs `list_documents` on the reader's ledger. A cursor continues only while the ledger is
/// at the generation of its first page: a listing never mixes two states of the store.
pub fn list_documents(
    reader: &StoreReader,
    request: &ListRequest,
    key: &CursorKey,
) -> Result<ToolAnswer, ToolError> {
    let cursor = match &request.cursor {
        Some(text) => Some(
            key.open(text, &list_bound(request))
                .map_err(ToolError::InvalidCursor)?,
        ),
        None => None,
    };
    let ledger = reader.ledger()?;
    ledger.read_snapshot(|ledger| list_in(ledger, request, cursor, key))?
}

fn list_in(
    ledger: &Ledger,
    request: &ListRequest,
    cursor: Option<Cursor>,
    key: &CursorKey,
) -> Result<Result<ToolAnswer, ToolError>> {
    let current = ledger.generation()?.0;
    if let Some(cursor) = cursor
        && cursor.generation.0 != current
    {
        return Ok(Err(ToolError::CursorExpired {
            generation: cursor.generation.0,
        }));
    }
    let mut filter = request.filter.clone();
    if let Some(named) = &request.filter.root {
        match filter::resolve_root(ledger, named)? {
            Ok(root) => filter.root = Some(root),
            Err(why) => return Ok(Ok(error_answer("not_found", why, current))),
        }
    }
    let offset = cursor.map_or(0, |c| c.offset as usize);
    let listing =
        ledger.documents_matching(&filter, request.title.as_deref(), offset, request.limit)?;
    let next_cursor = listing.more.then(|| {
        key.seal(
            &Cursor {
                generation: Generation(current),
                layout: 0,
                vectors: 0,
                offset: (offset + listing.documents.len()) as u32,
            },
            &list_bound(request),
        )
    });
    let roots: Vec<Value> = ledger
        .root_counts()?
        .into_iter()
        .map(|(root, documents)| json!({"root": root, "documents": documents}))
        .collect();
    let mut body = json!({
        "generation": current,
        "last_ingest": last_ingest(ledger)?,
        "roots": roots,
        "documents": listing.documents.iter().map(|e| document_out(e, None)).collect::<Vec<_>>(),
    });
    if let Some(cursor) = next_cursor {
        body["next_cursor"] = json!(cursor);
    }
    Ok(Ok(ToolAnswer {
        n_hits: listing.documents.len() as u64,
        body: body.to_string(),
        is_error: false,
        outcome: "ok",
        index_generation: current,
    }))
}
