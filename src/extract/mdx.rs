//! MDX: Markdown with JSX and ES modules (Docusaurus, Astro/Starlight, Next.js).
//!
//! The file is read as Markdown after what renders no words is taken out of its text:
//! - ESM `import` and `export` statements at the start of a line (across lines while their
//!   brackets are open);
//! - JSX tags, opening, closing and self-closing (`<Steps>`, `</Steps>`, `<Since v="4.0" />`),
//!   attributes and all, while the text between them stays; fragments `<>` and `</>`;
//! - `{…}` expressions, comments `{/* … */}` among them.
//!
//! Admonitions (`:::note`, `:::caution[Title]`) become a line of text naming them
//! ("Note:", "Caution: Title") and their closing `:::` a blank line. Fenced code blocks and
//! inline code spans are kept as written; front matter is read as Markdown's is.
//!
//! Every line keeps its place (what is taken out leaves its line breaks), so a passage's lines
//! are the file's. A tag or expression that never closes is text from there on: each byte is
//! looked at a bounded number of times, however the brackets are nested.
//!
//! It does not run JavaScript: an expression's value (`{frontmatter.title}`) and the text a
//! component renders from its attributes (`<LinkCard title="…">`) are not in the text.
//! Indented code blocks, which MDX itself does not have, are read as Markdown reads them.

use super::{Deadline, Extracted, Limits, Structure};

pub(crate) const VERSION: u32 = 1;

pub(crate) fn extract(text: &str, limits: &Limits, deadline: &Deadline) -> Extracted {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let body_start = crate::extract::front_matter::split(text).body_start;
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..body_start]);
    let mut warnings = Vec::new();
    let mut reader = Reader {
        text,
        out,
        fence: None,
        unclosed_tag_from: usize::MAX,
        unclosed_brace_from: usize::MAX,
        max_depth: limits.max_depth.max(1),
    };
    let mut at = body_start;
    let mut lines_read = 0usize;
    while at < text.len() {
        lines_read += 1;
        if lines_read.is_multiple_of(256) && deadline.passed() {
            warnings.push(format!(
                "took over {} s; the rest is left out",
                limits.time.as_secs()
            ));
            break;
        }
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i + 1);
        at = reader.line(at, end);
    }
    Extracted {
        text: reader.out,
        structure: Structure::Markdown,
        meta: Default::default(),
        locations: super::Locations::SameLines,
        warnings,
    }
}

/// A fenced code block being read: its fence character and length.
#[derive(Clone, Copy)]
struct Fence {
    marker: u8,
    len: usize,
}

struct Reader<'a> {
    text: &'a str,
    out: String,
    fence: Option<Fence>,
    /// Where a tag was found that never closes: every `<` from there on is text.
    unclosed_tag_from: usize,
    /// Likewise for `{`.
    unclosed_brace_from: usize,
    max_depth: usize,
}

impl Reader<'_> {
    /// Reads the line `start..end` (with its line break); returns where reading goes on (past
    /// the line, or past a statement or tag that spans lines).
    fn line(&mut self, start: usize, end: usize) -> usize {
        let line = &self.text[start..end];
        let trimmed = line.trim_start();
        if let Some(fence) = self.fence {
            self.out.push_str(line);
            if closes(trimmed, fence) {
                self.fence = None;
            }
            return end;
        }
        if let Some(fence) = opens(trimmed) {
            self.fence = Some(fence);
            self.out.push_str(line);
            return end;
        }
        if line.len() == trimmed.len() && is_esm(trimmed) {
            let stop = self.statement_end(start);
            self.blank(start, stop);
            return stop;
        }
        if let Some(rest) = trimmed.strip_prefix(":::") {
            let rest = rest.trim();
            if rest.is_empty() {
                self.out.push('\n');
            } else {
                self.out.push_str(&admonition(rest));
                self.out.push('\n');
            }
            return end;
        }
        self.inline(start, end)
    }

    /// Copies `start..` up to the end of its line, taking out tags and expressions; a tag or
    /// expression may run over later lines. Returns where the next line starts.
    fn inline(&mut self, start: usize, end: usize) -> usize {
        let bytes = self.text.as_bytes();
        let mut at = start;
        let mut end = end;
        while at < end {
            match bytes[at] {
                b'`' => {
                    // A code span: as written, to its closing run of the same length on
                    // this line (else the backticks are text).
                    let run = bytes[at..end].iter().take_while(|b| **b == b'`').count();
                    let ticks = &self.text[at..at + run];
                    let close = self.text[at + run..end]
                        .find(ticks)
                        .map(|i| at + run + i + run);
                    let stop = close.unwrap_or(at + run);
                    self.out.push_str(&self.text[at..stop]);
                    at = stop;
                }
                b'<' if at < self.unclosed_tag_from && starts_tag(&bytes[at + 1..]) => {
                    match self.tag_end(at) {
                        TagEnd::At(stop) => {
                            self.blank(at, stop);
                            at = stop;
                            end = end.max(line_end(self.text, at));
                        }
                        TagEnd::NotATag => {
                            self.out.push('<');
                            at += 1;
                        }
                        TagEnd::Never => {
                            self.unclosed_tag_from = at;
                            self.out.push('<');
                            at += 1;
                        }
                    }
                }
                b'{' if at < self.unclosed_brace_from => match self.brace_end(at) {
                    Some(stop) => {
                        self.blank(at, stop);
                        at = stop;
                        end = end.max(line_end(self.text, at));
                    }
                    None => {
                        self.unclosed_brace_from = at;
                        self.out.push('{');
                        at += 1;
                    }
                },
                b'\\' if at + 1 < end && matches!(bytes[at + 1], b'{' | b'}' | b'<') => {
                    // An escaped bracket is the bracket as text.
                    self.out.push(bytes[at + 1] as char);
                    at += 2;
                }
                _ => {
                    let next = self.text[at..end]
                        .find(['`', '<', '{', '\\'])
                        .map_or(end, |i| if i == 0 { at + 1 } else { at + i });
                    let next = if next <= at { at + 1 } else { next };
                    let next = ceil_char_boundary(self.text, next.min(end));
                    self.out.push_str(&self.text[at..next]);
                    at = next;
                }
            }
        }
        end
    }

    /// Writes the line breaks of `start..stop` and nothing else.
    fn blank(&mut self, start: usize, stop: usize) {
        let breaks = self.text[start..stop].matches('\n').count();
        self.out.extend(std::iter::repeat_n('\n', breaks));
    }

    /// The end of the ESM statement starting at `start`: the end of the first line at which
    /// its brackets are all closed.
    fn statement_end(&self, start: usize) -> usize {
        let mut depth = 0usize;
        let mut quote: Option<u8> = None;
        let bytes = self.text.as_bytes();
        let mut at = start;
        while at < bytes.len() {
            let b = bytes[at];
            match quote {
                Some(q) if b == q => quote = None,
                Some(_) if b == b'\\' => at += 1,
                Some(_) => {}
                None => match b {
                    b'"' | b'\'' | b'`' => quote = Some(b),
                    b'{' | b'(' | b'[' => depth += 1,
                    b'}' | b')' | b']' => depth = depth.saturating_sub(1),
                    b'\n' if depth == 0 => return at + 1,
                    _ => {}
                },
            }
            // A string never spans lines in an import; an unclosed quote ends at its line.
            if b == b'\n' && quote.is_some_and(|q| q != b'`') {
                quote = None;
                if depth == 0 {
                    return at + 1;
                }
            }
            at += 1;
        }
        bytes.len()
    }

    /// The end (past `>`) of the JSX tag at `start`, skipping quoted attribute values and
    /// `{…}` attribute expressions.
    fn tag_end(&self, start: usize) -> TagEnd {
        let bytes = self.text.as_bytes();
        let mut at = start + 1;
        let mut quote: Option<u8> = None;
        while at < bytes.len() {
            let b = bytes[at];
            match quote {
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None => match b {
                    b'"' | b'\'' => quote = Some(b),
                    b'{' => match self.brace_end(at) {
                        Some(stop) => at = stop - 1,
                        None => return TagEnd::Never,
                    },
                    b'>' => return TagEnd::At(at + 1),
                    // A new tag before this one closed: this was text, not a tag.
                    b'<' => return TagEnd::NotATag,
                    _ => {}
                },
            }
            at += 1;
        }
        TagEnd::Never
    }

    /// The end (past `}`) of the expression at `start`, skipping strings; `None` when it never
    /// closes, or nests deeper than the limit.
    fn brace_end(&self, start: usize) -> Option<usize> {
        let bytes = self.text.as_bytes();
        let mut depth = 0usize;
        let mut quote: Option<u8> = None;
        let mut at = start;
        while at < bytes.len() {
            let b = bytes[at];
            match quote {
                Some(q) if b == q => quote = None,
                Some(_) if b == b'\\' => at += 1,
                Some(_) => {}
                None => match b {
                    b'"' | b'\'' | b'`' => quote = Some(b),
                    b'{' => {
                        depth += 1;
                        if depth > self.max_depth {
                            return None;
                        }
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                },
            }
            at += 1;
        }
        None
    }
}

/// Where a tag ends.
enum TagEnd {
    /// Past its `>`.
    At(usize),
    /// Another `<` came first: the `<` was text.
    NotATag,
    /// Nothing closes it before the end of the file (or an expression in it never closes).
    Never,
}

/// The end of the line `at` is on (past its line break).
fn line_end(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |i| at + i + 1)
}

fn ceil_char_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// Whether what follows a `<` makes it a tag: a name (`Steps`, `a`, `Foo.Bar`), a closing
/// tag, or a fragment. An autolink (`<https://…>`) and a comparison (`a < b`) are text.
fn starts_tag(rest: &[u8]) -> bool {
    let rest = rest.strip_prefix(b"/").unwrap_or(rest);
    match rest.first() {
        Some(b'>') => true,
        Some(c) if c.is_ascii_alphabetic() => {
            let name_len = rest
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'))
                .count();
            // `<https://…>`, `<mailto:…>`: a scheme's colon is followed by `/` or the address.
            let name = &rest[..name_len];
            let autolink =
                name.contains(&b':') || rest.get(name_len..name_len + 3) == Some(b"://".as_slice());
            !autolink
                && matches!(
                    rest.get(name_len),
                    None | Some(b' ' | b'\t' | b'\n' | b'\r' | b'>' | b'/' | b'{')
                )
        }
        _ => false,
    }
}

/// An ESM statement's first line.
fn is_esm(line: &str) -> bool {
    ["import ", "import{", "import\t", "export ", "export{"]
        .iter()
        .any(|start| line.starts_with(start))
        && !line.starts_with("import ->")
}

/// A fence that opens a code block on this line (indented or not: MDX nests them in JSX).
fn opens(trimmed: &str) -> Option<Fence> {
    let marker = *trimmed.as_bytes().first()?;
    if marker != b'`' && marker != b'~' {
        return None;
    }
    let len = trimmed.bytes().take_while(|b| *b == marker).count();
    // A backtick fence's info string has no backtick.
    if len < 3 || (marker == b'`' && trimmed[len..].contains('`')) {
        return None;
    }
    Some(Fence { marker, len })
}

fn closes(trimmed: &str, fence: Fence) -> bool {
    let len = trimmed.bytes().take_while(|b| *b == fence.marker).count();
    len >= fence.len && trimmed[len..].trim().is_empty()
}

/// `note[Custom title]` → `Note: Custom title`; `tip{icon="x"}` → `Tip:`.
fn admonition(rest: &str) -> String {
    let kind_len = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(rest.len());
    let kind = &rest[..kind_len];
    let mut label: String = kind
        .chars()
        .take(1)
        .flat_map(char::to_uppercase)
        .chain(kind.chars().skip(1))
        .collect();
    label.push(':');
    let after = &rest[kind_len..];
    if let Some(title) = after.strip_prefix('[')
        && let Some(end) = title.find(']')
        && !title[..end].trim().is_empty()
    {
        label.push(' ');
        label.push_str(title[..end].trim());
    }
    label
}

#[cfg(test)]
mod tests {
    use super::extract;
    use crate::extract::{Deadline, Limits};

    fn read(text: &str) -> String {
        let limits = Limits::default();
        extract(text, &limits, &Deadline::after(limits.time)).text
    }

    #[test]
    fn imports_and_tags_go_and_text_stays_on_its_lines() {
        let text = "---\ntitle: Deploy\n---\nimport { Steps } from '@astrojs/starlight/components';\nimport ReadMore from '~/components/ReadMore.astro'\n\n# Deploy\n\n<Steps>\n1. Run <Since v=\"4.0\" /> the **build**.\n2. Push it.\n</Steps>\n\n<ReadMore>See [guides](/en/guides/).</ReadMore>\n";
        let out = read(text);
        assert_eq!(out.lines().count(), text.lines().count());
        assert!(
            out.starts_with("---\ntitle: Deploy\n---\n\n\n\n# Deploy\n"),
            "{out}"
        );
        assert!(
            out.contains("1. Run  the **build**.\n2. Push it.\n"),
            "{out}"
        );
        assert!(out.contains("\nSee [guides](/en/guides/).\n"), "{out}");
        assert!(!out.contains('<') && !out.contains("import"), "{out}");
    }

    #[test]
    fn multi_line_imports_tags_and_expressions() {
        let text = "import {\n  Tabs,\n  TabItem,\n} from 'x';\n\nText {/* a comment\n spanning */} here.\n<LinkCard\n  title=\"a > b\"\n  href={`/x/${y}`}\n/>\nAfter.\n";
        let out = read(text);
        assert_eq!(out.lines().count(), text.lines().count(), "{out:?}");
        assert_eq!(out, "\n\n\n\n\nText \n here.\n\n\n\n\nAfter.\n");
    }

    #[test]
    fn code_is_kept_as_written() {
        let text = "Use `<Steps>` and `{x}`.\n\n  ```jsx\n  import A from 'a';\n  <A prop={1} />\n  ```\n<B>done</B>\n";
        let out = read(text);
        assert!(out.contains("Use `<Steps>` and `{x}`."), "{out}");
        assert!(
            out.contains("  import A from 'a';\n  <A prop={1} />\n"),
            "{out}"
        );
        assert!(out.ends_with("done\n"), "{out}");
    }

    #[test]
    fn admonitions_are_named() {
        let out = read(":::note\nMind this.\n:::\n\n:::caution[Breaking change]\nGone.\n:::\n");
        assert_eq!(
            out,
            "Note:\nMind this.\n\n\nCaution: Breaking change\nGone.\n\n"
        );
    }

    #[test]
    fn comparisons_autolinks_and_escapes_are_text() {
        let out = read("If a < b and c<d, see <https://x.org>. Use \\{braces\\}.\n");
        assert_eq!(
            out,
            "If a < b and c<d, see <https://x.org>. Use {braces}.\n"
        );
    }

    #[test]
    fn what_never_closes_is_text_and_costs_its_size() {
        let text = "<Tag attr=\"".to_string() + &"<{ ".repeat(200_000);
        let out = read(&text);
        assert!(out.len() >= text.len() / 2, "kept as text");
        let braces = "{".repeat(100_000) + "\ntext\n";
        let out = read(&braces);
        assert!(out.ends_with("text\n"));
    }
}
