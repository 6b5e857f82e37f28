//! Front matter: a YAML (`---`) or TOML (`+++`) block at the very top of a Markdown file.
//!
//! It becomes metadata (title, tags, and the other top-level scalar fields) and is never body
//! text. A block that does not parse is still cut from the body (it is metadata by its shape) and
//! gives a warning; a block that is never closed is not front matter at all and stays body text.
//!
//! Front matter is untrusted input, so reading it costs at most its size: a block over
//! `MAX_FRONT_MATTER_BYTES` is not read, YAML is read as a stream of parser events (never loaded
//! into a tree), nesting deeper than `MAX_FRONT_MATTER_DEPTH` is refused, and YAML aliases are
//! never expanded (a nine-deep "billion laughs" block of 512 bytes would otherwise grow to
//! gigabytes). Each of these gives a warning; the body is indexed either way.

use std::collections::BTreeMap;

use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::TScalarStyle;

/// The largest front matter read, in bytes; a larger block is cut from the body unread.
pub const MAX_FRONT_MATTER_BYTES: usize = 64 * 1024;
/// The deepest nesting of YAML sequences and mappings read; the title and tags need 2.
pub(crate) const MAX_FRONT_MATTER_DEPTH: usize = 32;

/// What the front matter says, and where the body starts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FrontMatter {
    pub title: Option<String>,
    pub tags: Vec<String>,
    /// Every top-level field whose value is a scalar, as text (`title` included), by key.
    pub fields: BTreeMap<String, String>,
    /// Byte offset of the first body byte in the file's text.
    pub body_start: usize,
    /// Set when the block was found but was not read, or not all of it.
    pub warning: Option<String>,
}

/// Splits the front matter from `text`. Never fails, and costs time and memory linear in the
/// size of `text`.
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
            let mut front = if block.len() > MAX_FRONT_MATTER_BYTES {
                unparsed(format!(
                    "front matter of {} bytes is over the {} KiB limit and was not read",
                    block.len(),
                    MAX_FRONT_MATTER_BYTES / 1024
                ))
            } else {
                match syntax {
                    Syntax::Yaml => parse_yaml(block),
                    Syntax::Toml => parse_toml(block),
                }
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

/// A top-level value the front matter keeps: a scalar, or a sequence's scalar items.
#[derive(Debug)]
enum Value {
    Scalar(Option<String>),
    List(Vec<String>),
}

/// What comes next in the top-level mapping.
enum Slot {
    Key,
    /// The value of this key (`None`: a key that is not a plain string, whose value is skipped).
    Value(Option<String>),
}

/// The top-level mapping of a YAML block, read from parser events with nothing expanded.
struct YamlReader {
    depth: usize,
    /// The document's root node is a mapping.
    root_is_mapping: bool,
    slot: Slot,
    /// The scalar items of the top-level sequence being read, when its key is wanted.
    items: Option<Vec<String>>,
    values: BTreeMap<String, Value>,
    aliases: usize,
}

enum Flow {
    Continue,
    /// The first document is over; nothing after it is read.
    Done,
    /// The block is refused, with this warning.
    Refuse(String),
}

impl YamlReader {
    fn new() -> YamlReader {
        YamlReader {
            depth: 0,
            root_is_mapping: false,
            slot: Slot::Key,
            items: None,
            values: BTreeMap::new(),
            aliases: 0,
        }
    }

    fn on(&mut self, event: Event) -> Flow {
        match event {
            Event::StreamEnd | Event::DocumentEnd => return Flow::Done,
            Event::Nothing | Event::StreamStart | Event::DocumentStart => {}
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let sequence = matches!(event, Event::SequenceStart(..));
                self.depth += 1;
                if self.depth > MAX_FRONT_MATTER_DEPTH {
                    return Flow::Refuse(format!(
                        "front matter nests deeper than {MAX_FRONT_MATTER_DEPTH} levels and was not read"
                    ));
                }
                if self.depth == 1 {
                    self.root_is_mapping = !sequence;
                } else if self.depth == 2
                    && self.root_is_mapping
                    && sequence
                    && let Slot::Value(Some(key)) = &self.slot
                    && key == "tags"
                {
                    self.items = Some(Vec::new());
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 1 && self.root_is_mapping {
                    // A nested node at the top level is over: a key (skip its value) or a value.
                    let value = self.items.take().map(Value::List);
                    self.set(value);
                }
            }
            Event::Scalar(text, style, _anchor, tag) => {
                if self.depth == 1 && self.root_is_mapping {
                    match self.slot {
                        Slot::Key => self.slot = Slot::Value(Some(text)),
                        Slot::Value(_) => {
                            let value = Value::Scalar(resolve(text, style, tag.as_ref()));
                            self.set(Some(value));
                        }
                    }
                } else if self.depth == 2
                    && let Some(items) = self.items.as_mut()
                    && let Some(item) = resolve(text, style, tag.as_ref())
                {
                    items.push(item);
                }
            }
            Event::Alias(_) => {
                // Never expanded: an alias stands for nothing.
                self.aliases += 1;
                if self.depth == 1 && self.root_is_mapping {
                    self.set(None);
                }
            }
        }
        Flow::Continue
    }

    /// A top-level node is complete: a key, or the value `value` of the pending key (`None`
    /// when it is one the front matter does not keep, which also drops an earlier one).
    fn set(&mut self, value: Option<Value>) {
        self.slot = match std::mem::replace(&mut self.slot, Slot::Key) {
            Slot::Key => Slot::Value(None),
            Slot::Value(Some(key)) => {
                match value {
                    Some(value) => self.values.insert(key, value),
                    None => self.values.remove(&key),
                };
                Slot::Key
            }
            Slot::Value(None) => Slot::Key,
        };
    }
}

fn parse_yaml(block: &str) -> FrontMatter {
    let mut parser = Parser::new_from_str(block);
    let mut reader = YamlReader::new();
    // Only the first document's events are read, one at a time, so the cost is the block's size.
    loop {
        let event = match parser.next_token() {
            Ok((event, _mark)) => event,
            Err(err) => return unparsed(format!("front matter is not valid YAML: {err}")),
        };
        match reader.on(event) {
            Flow::Continue => {}
            Flow::Done => break,
            Flow::Refuse(warning) => return unparsed(warning),
        }
    }
    let mut fields = BTreeMap::new();
    let mut tags = Vec::new();
    for (key, value) in reader.values {
        match value {
            Value::Scalar(Some(text)) => {
                if key == "tags" {
                    tags = split_tags(&text);
                }
                fields.insert(key, text);
            }
            Value::Scalar(None) => {}
            Value::List(items) => {
                if key == "tags" {
                    tags = items;
                }
            }
        }
    }
    let fields = without_nul(fields);
    FrontMatter {
        title: fields.get("title").filter(|t| !t.is_empty()).cloned(),
        tags: clean_tags(tags),
        fields,
        warning: (reader.aliases > 0).then(|| {
            format!(
                "front matter uses YAML aliases ({}), which are not expanded: their values are ignored",
                reader.aliases
            )
        }),
        ..FrontMatter::default()
    }
}

/// A scalar as text, typed as the YAML loader types it (so `title: 1.0` stays `1.0` and
/// `title: ~` is no title), trimmed; `None` for null and for a value its tag refuses.
fn resolve(text: String, style: TScalarStyle, tag: Option<&Tag>) -> Option<String> {
    let value = if style != TScalarStyle::Plain {
        Yaml::String(text)
    } else {
        match tag {
            Some(Tag { handle, suffix }) if handle == "tag:yaml.org,2002:" => {
                match suffix.as_str() {
                    "bool" => match text.as_str() {
                        "true" | "True" | "TRUE" => Yaml::Boolean(true),
                        "false" | "False" | "FALSE" => Yaml::Boolean(false),
                        _ => Yaml::BadValue,
                    },
                    "int" => text.parse::<i64>().map_or(Yaml::BadValue, Yaml::Integer),
                    "float" => match Yaml::from_str(&text) {
                        Yaml::Real(_) | Yaml::Integer(_) => Yaml::Real(text),
                        _ => Yaml::BadValue,
                    },
                    "null" => match text.as_str() {
                        "~" | "null" => Yaml::Null,
                        _ => Yaml::BadValue,
                    },
                    _ => Yaml::String(text),
                }
            }
            Some(_) => Yaml::String(text),
            None => Yaml::from_str(&text),
        }
    };
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
    let fields = table
        .iter()
        .filter_map(|(key, value)| {
            let text = match value {
                toml::Value::String(s) => s.trim().to_string(),
                toml::Value::Integer(i) => i.to_string(),
                // Debug, not Display: `1e300` stays short instead of 301 digits.
                toml::Value::Float(f) => format!("{f:?}"),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Datetime(d) => d.to_string(),
                toml::Value::Array(_) | toml::Value::Table(_) => return None,
            };
            Some((key.clone(), text))
        })
        .collect();
    FrontMatter {
        title: title
            .filter(|t| !t.is_empty())
            .map(|t| t.replace('\0', "\u{FFFD}")),
        tags: clean_tags(tags),
        fields: without_nul(fields),
        ..FrontMatter::default()
    }
}

/// Fields with every NUL replaced by U+FFFD: metadata is text, and a text column of
/// PostgreSQL (a shared ledger) cannot hold a NUL.
fn without_nul(fields: BTreeMap<String, String>) -> BTreeMap<String, String> {
    fields
        .into_iter()
        .map(|(key, value)| {
            (
                key.replace('\0', "\u{FFFD}"),
                value.replace('\0', "\u{FFFD}"),
            )
        })
        .collect()
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
        .map(|t| t.trim().to_lowercase().replace('\0', "\u{FFFD}"))
        .filter(|t| !t.is_empty())
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

#[cfg(test)]
mod tests {
    use super::{FrontMatter, MAX_FRONT_MATTER_BYTES, MAX_FRONT_MATTER_DEPTH, split};

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

    /// Nine levels of aliases, each naming the level below ten times: 10^9 strings once expanded.
    pub(crate) fn billion_laughs() -> String {
        let mut text = String::from("---\ntitle: Laughs\na: &a [\"lol\"]\n");
        for level in 1..9u8 {
            let name = char::from(b'a' + level);
            let below = char::from(b'a' + level - 1);
            let refs = vec![format!("*{below}"); 10].join(", ");
            text.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        text.push_str("tags: *i\n---\n# Body\n\nThe body is indexed.\n");
        text
    }

    #[test]
    fn aliases_are_not_expanded() {
        let text = billion_laughs();
        assert!(text.len() < 1024, "{} bytes", text.len());
        let front = split(&text);
        assert_eq!(front.title.as_deref(), Some("Laughs"));
        assert!(front.tags.is_empty(), "{:?}", front.tags);
        let warning = front.warning.expect("a warning");
        assert!(warning.contains("aliases"), "{warning}");
        assert_eq!(
            &text[front.body_start..],
            "# Body\n\nThe body is indexed.\n"
        );
    }

    #[test]
    fn an_alias_stands_for_nothing_and_an_anchor_for_its_value() {
        let front = split("---\ntitle: &t Named\nslug: *t\ntags: [a, *t, b]\n---\n");
        assert_eq!(front.title.as_deref(), Some("Named"));
        assert_eq!(front.tags, ["a", "b"]);
        assert_eq!(front.fields.get("slug"), None);
        assert!(front.warning.is_some());
    }

    #[test]
    fn deep_nesting_is_refused_with_a_warning() {
        let depth = MAX_FRONT_MATTER_DEPTH + 1;
        let text = format!(
            "---\ntitle: Deep\nx: {}{}\n---\nbody",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let front = split(&text);
        assert_eq!(front.title, None);
        assert!(front.warning.expect("a warning").contains("deeper"));
        assert_eq!(&text[front.body_start..], "body");
        let block = format!(
            "---\nx:\n{}---\nbody",
            (1..=depth)
                .map(|level| format!("{}- \n", "  ".repeat(level)))
                .collect::<String>()
        );
        assert!(split(&block).warning.is_some());
        let nested_ok = "---\ntitle: Shallow\nx: [[[a]]]\n---\n";
        assert_eq!(split(nested_ok).title.as_deref(), Some("Shallow"));
    }

    #[test]
    fn a_front_matter_over_the_limit_is_cut_unread() {
        for fence in ["---", "+++"] {
            let filler = "# padding\n".repeat(MAX_FRONT_MATTER_BYTES / 10 + 1);
            let text = format!("{fence}\n{filler}{fence}\nbody");
            let front = split(&text);
            assert!(front.warning.expect("a warning").contains("KiB"));
            assert_eq!(&text[front.body_start..], "body");
        }
    }

    #[test]
    fn toml_nesting_at_the_size_limit_does_not_overflow() {
        let depth = MAX_FRONT_MATTER_BYTES / 2 - 8;
        let text = format!(
            "+++\nx = {}{}\n+++\nbody",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let front = split(&text);
        assert_eq!(&text[front.body_start..], "body");
        let text = format!(
            "---\nx: {}{}\n---\nbody",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(split(&text).warning.is_some());
    }

    #[test]
    fn top_level_scalars_are_fields_as_the_loader_types_them() {
        let text = "---\ntitle: \"  T  \"\nid: 0x10\nratio: 1.50\ndraft: true\nnothing: ~\nnested: {a: 1}\nlist: [1]\n? [complex]\n: skipped\nslug: after\n---\n";
        let front = split(text);
        let fields: Vec<(&str, &str)> = front
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("draft", "true"),
                ("id", "16"),
                ("ratio", "1.50"),
                ("slug", "after"),
                ("title", "T")
            ]
        );
        assert_eq!(front.warning, None);
        let toml = split("+++\ntitle = \"T\"\neip = 1559\n[table]\nx = 1\n+++\n");
        assert_eq!(toml.fields.get("eip").map(String::as_str), Some("1559"));
        assert!(!toml.fields.contains_key("table"));
    }
}
