//! The documents as MCP resources: `groundidx://ROOT/PATH` URIs, and the answers of
//! `list_documents` and `read_document` (which `resources/list` and `resources/read` are, keyed
//! and audited as those tools) as resource lists and contents.
//!
//! ROOT is the root's folder name when no other root has the same name, else its whole path
//! (percent-encoded into one segment); `tools::filter::resolve_root` accepts both. PATH keeps
//! its `/` and percent-encodes every other byte outside RFC 3986's unreserved set; a `/` a
//! client encodes (`%2F`, as RFC 6570 expands `{path}`) reads the same document.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rmcp::model::{Resource, ResourceContents, ResourceTemplate};
use serde_json::Value;

/// The URI scheme of a document.
pub(crate) const SCHEME: &str = "groundidx://";

/// The one template: a document by root and path (RFC 6570 level 1: a client that expands it
/// encodes the path's `/` as `%2F`, which `parse_uri` reads back).
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{SCHEME}{{root}}/{{path}}"), "document")
            .with_title("An indexed document")
            .with_description(
                "A document as the store holds it: its passages in order, under their headings. root is the folder name of one of the store's roots (its full path when two share a name), path the document's path under it, as list_documents gives them.",
            ),
    ]
}

/// Every byte but RFC 3986's unreserved ones is encoded (a root's `/` too).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path keeps its `/`.
const PATH: &AsciiSet = &SEGMENT.remove(b'/');

fn decode(text: &str) -> Option<String> {
    percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// The name a URI gives each root: its folder name when unique among `roots`, else its path.
pub(crate) fn root_name(root: &str, roots: &[String]) -> String {
    let name_of = |root: &str| {
        std::path::Path::new(root)
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
    };
    match name_of(root) {
        Some(name)
            if roots
                .iter()
                .filter(|r| name_of(r).as_deref() == Some(&name))
                .count()
                == 1 =>
        {
            name
        }
        _ => root.to_string(),
    }
}

/// The URI of the document at `path` under the root named `root_name`.
pub fn uri(root_name: &str, path: &str) -> String {
    format!(
        "{SCHEME}{}/{}",
        utf8_percent_encode(root_name, SEGMENT),
        utf8_percent_encode(path, PATH)
    )
}

/// The root name and path a document URI names, or why it names none.
pub(crate) fn parse_uri(uri: &str) -> Result<(String, String), String> {
    let wrong = || {
        format!(
            "{uri:?} is not a document URI: expected {SCHEME}ROOT/PATH, as resources/list gives them"
        )
    };
    let rest = uri.strip_prefix(SCHEME).ok_or_else(wrong)?;
    let (root, path) = rest.split_once('/').ok_or_else(wrong)?;
    let root = decode(root).filter(|r| !r.is_empty()).ok_or_else(wrong)?;
    let path = decode(path).filter(|p| !p.is_empty()).ok_or_else(wrong)?;
    Ok((root, path))
}

/// The MIME type of a document's text as served: Markdown stays Markdown; every other format
/// is served as its extracted text.
fn mime_type(path: &str) -> &'static str {
    let extension = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match extension.as_deref() {
        Some("md" | "markdown" | "mdx") => "text/markdown",
        _ => "text/plain",
    }
}

/// A `list_documents` answer as resources.
pub fn resources(answer: &Value) -> Vec<Resource> {
    let roots: Vec<String> = answer["roots"]
        .as_array()
        .map(|roots| {
            roots
                .iter()
                .filter_map(|r| r["root"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let empty = Vec::new();
    answer["documents"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(|document| {
            let root = document["root"].as_str()?;
            let path = document["path"].as_str()?;
            let mut resource = Resource::new(uri(&root_name(root, &roots), path), path)
                .with_mime_type(mime_type(path))
                .with_description(match document["chunks"].as_u64().unwrap_or(0) {
                    1 => format!("1 passage, under {root}"),
                    n => format!("{n} passages, under {root}"),
                });
            if let Some(title) = document["title"].as_str() {
                resource = resource.with_title(title);
            }
            Some(resource)
        })
        .collect()
}

/// A `read_document` answer as the contents of the resource at `uri`: its passages' text in
/// order, each after its heading path when that changes. A document longer than one answer
/// ends with a line that says so and how to read on.
pub fn contents(uri: &str, answer: &Value) -> ResourceContents {
    let path = answer["document"]["path"].as_str().unwrap_or_default();
    let mime = mime_type(path);
    let mut text = String::new();
    let mut heading_before = "";
    let empty = Vec::new();
    for passage in answer["passages"].as_array().unwrap_or(&empty) {
        let heading = passage["heading"].as_str().unwrap_or_default();
        if heading != heading_before && !heading.is_empty() {
            push_block(&mut text, &heading_line(heading, mime));
        }
        heading_before = heading;
        push_block(&mut text, passage["text"].as_str().unwrap_or_default());
    }
    if answer.get("next_cursor").is_some() {
        push_block(
            &mut text,
            &format!(
                "[the document goes on: read_document with path {path:?} and the cursor of an answer reads the rest]"
            ),
        );
    }
    ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type: Some(mime.to_string()),
        text,
        meta: None,
    }
}

/// A passage's heading path as a line of its own: a Markdown heading as
/// deep as the path (`Guide > Install` is `## Install`), else the path.
fn heading_line(heading: &str, mime: &str) -> String {
    if mime != "text/markdown" {
        return heading.to_string();
    }
    let depth = heading.split(" > ").count().min(6);
    let last = heading.rsplit(" > ").next().unwrap_or(heading);
    format!("{} {last}", "#".repeat(depth))
}

fn push_block(text: &mut String, block: &str) {
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(block);
}

#[cfg(test)]
mod tests {
    use super::{contents, parse_uri, root_name, uri};
    use rmcp::model::ResourceContents;
    use serde_json::json;

    #[test]
    fn contents_show_each_heading_once_before_its_passages() {
        let answer = json!({
            "document": {"path": "guide.md"},
            "passages": [
                {"heading": "Guide", "text": "Intro."},
                {"heading": "Guide > Install", "text": "Step one."},
                {"heading": "Guide > Install", "text": "Step two."},
            ],
            "next_cursor": "c",
        });
        let ResourceContents::TextResourceContents {
            text, mime_type, ..
        } = contents("groundidx://docs/guide.md", &answer)
        else {
            panic!("text contents expected");
        };
        assert_eq!(mime_type.as_deref(), Some("text/markdown"));
        let (body, tail) = text.split_once("\n\n[the document goes on").unwrap();
        assert_eq!(
            body,
            "# Guide\n\nIntro.\n\n## Install\n\nStep one.\n\nStep two."
        );
        assert!(tail.contains("cursor"), "{tail}");
    }

    #[test]
    fn a_uri_names_its_root_and_path_back() {
        for (root, path) in [
            ("docs", "guide/intro.md"),
            ("/srv/a b/docs", "a b/c#d?e%f.md"),
            ("notes", "ünïcode/ファイル.md"),
        ] {
            let made = uri(root, path);
            assert!(
                !made.contains(' ') && !made.contains('#') && !made.contains('?'),
                "{made}"
            );
            assert_eq!(parse_uri(&made), Ok((root.to_string(), path.to_string())));
        }
        assert!(parse_uri("file:///etc/passwd").is_err());
        assert!(parse_uri("groundidx://docs").is_err());
        assert_eq!(
            parse_uri("groundidx://docs/guide%2Fintro.md"),
            Ok(("docs".to_string(), "guide/intro.md".to_string())),
            "a / encoded by a client's template expansion"
        );
        assert!(parse_uri("groundidx://docs/%ff").is_err(), "not UTF-8");
    }

    #[test]
    fn a_root_is_named_by_its_folder_unless_another_root_shares_the_name() {
        let roots = vec![
            "/a/docs".to_string(),
            "/b/docs".to_string(),
            "/c/notes".to_string(),
        ];
        assert_eq!(root_name("/c/notes", &roots), "notes");
        assert_eq!(root_name("/a/docs", &roots), "/a/docs");
    }
}
