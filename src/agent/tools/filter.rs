//! The filter arguments `search_docs` and `list_documents` share (`root`, `path_prefix`,
//! `path_glob`, `tags`, `fields`), checked one way for both, and a root named by a caller
//! resolved to the store's canonical root.

use serde_json::Value;

use crate::agent::tools::{ArgumentError, FieldType, check_types, shown};
use crate::error::Result;
use crate::ledger::{ChunkFilter, Ledger, path_glob};

/// At most this many tags, or fields, in one filter.
pub(crate) const MAX_FILTER_TERMS: usize = 32;
/// A tag, a field's key or value, a root, a prefix or a glob is at most this many bytes.
pub(crate) const MAX_FILTER_BYTES: usize = 1024;

/// The filter's fields and what each must be.
pub(crate) const FILTER_TYPES: [FieldType; 5] = [
    (
        "root",
        "a string (a root as sources[].root gives it, or its folder name)",
        Value::is_string,
    ),
    ("path_prefix", "a string", Value::is_string),
    (
        "path_glob",
        "a string (a glob such as docs/**/*.md)",
        Value::is_string,
    ),
    ("tags", "an array of strings", |v| {
        v.as_array()
            .is_some_and(|tags| tags.iter().all(Value::is_string))
    }),
    (
        "fields",
        "an object of strings (front-matter field: value)",
        |v| {
            v.as_object()
                .is_some_and(|fields| fields.values().all(Value::is_string))
        },
    ),
];

/// The filter in `arguments` (absent fields filter nothing). The root stays as the caller
/// named it until `resolve_root`.
pub fn parse(arguments: &Value) -> Result<ChunkFilter, ArgumentError> {
    check_types(arguments, &FILTER_TYPES)?;
    let text = |name: &str| arguments.get(name).and_then(Value::as_str);
    let too_long = |name: &str, value: &str| {
        ArgumentError::Invalid(format!(
            "{name} must be at most {MAX_FILTER_BYTES} bytes, not {}",
            shown(&Value::String(value.to_string()))
        ))
    };
    for name in ["root", "path_prefix", "path_glob"] {
        if let Some(value) = text(name)
            && value.len() > MAX_FILTER_BYTES
        {
            return Err(too_long(name, value));
        }
    }
    let tags: Vec<String> = arguments
        .get("tags")
        .and_then(Value::as_array)
        .map(|tags| {
            tags.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if tags.len() > MAX_FILTER_TERMS || tags.iter().any(|t| t.is_empty() || t.len() > 256) {
        return Err(ArgumentError::Invalid(format!(
            "tags must be at most {MAX_FILTER_TERMS} non-empty strings of at most 256 bytes"
        )));
    }
    let fields: Vec<(String, String)> = arguments
        .get("fields")
        .and_then(Value::as_object)
        .map(|fields| {
            fields
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    if fields.len() > MAX_FILTER_TERMS
        || fields
            .iter()
            .any(|(k, v)| k.is_empty() || k.len() > MAX_FILTER_BYTES || v.len() > MAX_FILTER_BYTES)
    {
        return Err(ArgumentError::Invalid(format!(
            "fields must be at most {MAX_FILTER_TERMS} front-matter fields, each a non-empty name and a value of at most {MAX_FILTER_BYTES} bytes"
        )));
    }
    let glob = text("path_glob").map(str::to_string);
    if let Some(pattern) = &glob {
        path_glob(pattern).map_err(ArgumentError::Invalid)?;
    }
    Ok(ChunkFilter {
        path_prefix: text("path_prefix").and_then(ChunkFilter::normalise_path),
        path_glob: glob,
        tags,
        root: text("root").map(str::to_string),
        fields,
    })
}

/// The filter as a page cursor binds it; only what is set, so that a cursor made before a
/// filter existed still continues its listing.
pub fn bound(filter: &ChunkFilter, bound: &mut serde_json::Map<String, Value>) {
    if let Some(root) = &filter.root {
        bound.insert("root".into(), Value::from(root.as_str()));
    }
    if let Some(glob) = &filter.path_glob {
        bound.insert("path_glob".into(), Value::from(glob.as_str()));
    }
    if !filter.fields.is_empty() {
        bound.insert(
            "fields".into(),
            Value::Array(
                filter
                    .fields
                    .iter()
                    .map(|(k, v)| serde_json::json!([k, v]))
                    .collect(),
            ),
        );
    }
}

/// The root a caller named, as the store records it: its canonical path exactly (a trailing
/// `/` ignored), else the one root whose folder has that name, among the roots that hold
/// documents. `Ok(Err(why))` when there is no
/// such root, or more than one by that name: the message lists the roots.
pub(crate) fn resolve_root(ledger: &Ledger, named: &str) -> Result<Result<String, String>> {
    // The roots that hold documents: those a listing names (and a resource URI by folder name).
    let roots: Vec<String> = ledger
        .root_counts()?
        .into_iter()
        .map(|(root, _)| root)
        .collect();
    let wanted = match named.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    };
    if let Some(root) = roots.iter().find(|root| root.as_str() == wanted) {
        return Ok(Ok(root.clone()));
    }
    let by_name: Vec<&String> = roots
        .iter()
        .filter(|root| {
            std::path::Path::new(root.as_str())
                .file_name()
                .and_then(|n| n.to_str())
                == Some(wanted)
        })
        .collect();
    let listed = || {
        if roots.is_empty() {
            "the store has no roots yet".to_string()
        } else {
            format!("the roots are {}", roots.join(", "))
        }
    };
    Ok(match by_name.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!("no root {named:?} in the store; {}", listed())),
        _ => Err(format!(
            "more than one root is named {named:?}; name it by its full path: {}",
            by_name
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    })
}
