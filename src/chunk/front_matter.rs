//! Front matter: a YAML (`---`) or TOML (`+++`) block at the very top of a Markdown file.
//!
//! It becomes metadata (title, tags) and is never body text. A block that does not parse is
//! still cut from the body (it is metadata by its shape) and gives a warning; a block that is
//! never closed is not front matter at all and stays body text.

use yaml_rust2::{Yaml, YamlLoader};

/// What the front matter says, and where the body starts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FrontMatter {
    pub title: Option<String>,
    pub tags: Vec<String>,
    /// Byte offset of the first body byte in the file's text.
    pub body_start: usize,
    /// Set when the block was found but did not parse.
    pub warning: Option<String>,
}

/// Splits the front matter from `text`. Never fails.
pub fn split(text: &str) -> FrontMatter {
    let Some((fence, syntax)) = [("---", Syntax::Yaml), ("+++", Syntax::Toml)]
        .into_iter()
        .find(|(fence, _)| first_line(text) == *fence)
    else {
        return FrontMatter::default();
    };
    let open_end = line_end(text, 0);
    let mut pos = open_end;
    while pos < text.len() {
        let end = line_end(text, pos);
        let line = text[pos..end].trim_end_matches(['\n', '\r']);
        let closes =
            line.trim_end() == fence || (syntax == Syntax::Yaml && line.trim_end() == "...");
        if closes {
            let block = &text[open_end..pos];
            let mut front = match syntax {
                Syntax::Yaml => parse_yaml(block),
                Syntax::Toml => parse_toml(block),
            };
            front.body_start = end;
            return front;
        }
        pos = end;
    }
    FrontMatter::default()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Syntax {
    Yaml,
    Toml,
}

fn first_line(text: &str) -> &str {
    text[..line_end(text, 0)]
        .trim_end_matches(['\n', '\r'])
        .trim_end()
}

/// The offset just past the line that starts at `start` (past its `\n`, or the end of text).
fn line_end(text: &str, start: usize) -> usize {
    text[start..]
        .find('\n')
        .map_or(text.len(), |i| start + i + 1)
}

fn parse_yaml(block: &str) -> FrontMatter {
    let docs = match YamlLoader::load_from_str(block) {
        Ok(docs) => docs,
        Err(err) => return unparsed(format!("front matter is not valid YAML: {err}")),
    };
    let Some(Yaml::Hash(map)) = docs.into_iter().next() else {
        return FrontMatter::default();
    };
    let get = |name: &str| map.get(&Yaml::String(name.to_string()));
    let title = get("title").and_then(yaml_scalar);
    let tags = match get("tags") {
        Some(Yaml::Array(items)) => items.iter().filter_map(yaml_scalar).collect(),
        Some(other) => yaml_scalar(other)
            .map(|s| split_tags(&s))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    FrontMatter {
        title: title.filter(|t| !t.is_empty()),
        tags: clean_tags(tags),
        ..FrontMatter::default()
    }
}

fn yaml_scalar(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) | Yaml::Real(s) => Some(s.trim().to_string()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn parse_toml(block: &str) -> FrontMatter {
    let table: toml::Table = match block.parse() {
        Ok(table) => table,
        Err(err) => {
            return unparsed(format!("front matter is not valid TOML: {}", err.message()));
        }
    };
    let title = table
        .get("title")
        .and_then(|v| v.as_str())
        .map(|s| s.trim().to_string());
    let tags = match table.get("tags") {
        Some(toml::Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(toml::Value::String(s)) => split_tags(s),
        _ => Vec::new(),
    };
    FrontMatter {
        title: title.filter(|t| !t.is_empty()),
        tags: clean_tags(tags),
        ..FrontMatter::default()
    }
}

fn unparsed(warning: String) -> FrontMatter {
    FrontMatter {
        warning: Some(warning),
        ..FrontMatter::default()
    }
}

fn split_tags(s: &str) -> Vec<String> {
    s.split([',', ' ']).map(str::to_string).collect()
}

/// Tags are trimmed, lower-cased, de-duplicated and sorted, so `tags: [B, a]` and
/// `tags: "a, b"` mean the same filter.
fn clean_tags(tags: Vec<String>) -> Vec<String> {
    let mut tags: Vec<String> = tags
        .into_iter()
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

#[cfg(test)]
mod tests {
    use super::{FrontMatter, split};

    #[test]
    fn yaml_title_and_tags() {
        let text = "---\ntitle: Key rotation\ntags: [Security, ops]\n---\n# Body\n";
        let front = split(text);
        assert_eq!(front.title.as_deref(), Some("Key rotation"));
        assert_eq!(front.tags, ["ops", "security"]);
        assert_eq!(&text[front.body_start..], "# Body\n");
    }

    #[test]
    fn toml_title_and_tags() {
        let text = "+++\ntitle = \"T\"\ntags = \"a, b\"\n+++\nbody";
        let front = split(text);
        assert_eq!(front.title.as_deref(), Some("T"));
        assert_eq!(front.tags, ["a", "b"]);
        assert_eq!(&text[front.body_start..], "body");
    }

    #[test]
    fn crlf_and_unclosed() {
        let crlf = split("---\r\ntitle: x\r\n---\r\nbody");
        assert_eq!(crlf.title.as_deref(), Some("x"));
        assert_eq!(split("---\ntitle: x\nno close"), FrontMatter::default());
        assert_eq!(split("no front matter"), FrontMatter::default());
    }

    #[test]
    fn broken_yaml_is_cut_with_a_warning() {
        let text = "---\ntitle: [unclosed\n---\nbody";
        let front = split(text);
        assert!(front.warning.is_some());
        assert_eq!(&text[front.body_start..], "body");
    }

    #[test]
    fn only_front_matter() {
        let text = "---\ntitle: x\n---\n";
        assert_eq!(split(text).body_start, text.len());
    }
}
