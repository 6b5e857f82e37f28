//! AsciiDoc: a small, bounded, line-based reader of the parts of AsciiDoc that carry words.
//!
//! No maintained Rust crate reads AsciiDoc well enough to index real documentation, so this
//! reads it line by line in one pass, after the rules of Asciidoctor's block parser:
//!
//! - Kept as headings: the document title (`= Title`, also `meta.title`) and section titles
//!   `==` … `======` (and Markdown-style `#` … `######`), each at the level of its marker count,
//!   outside delimited blocks only.
//! - Kept as text: paragraphs and lists (line by line, each with its source line), admonitions
//!   (`NOTE: x` and `[NOTE]` blocks begin with "Note: "), block titles (`.Title`) as a line,
//!   example `====`, sidebar `****`, quote `____` and open `--` blocks and `[tabs]` (their
//!   content read as the document is), table rows (`|===`: one line per source line, cells
//!   joined by " | "), the alt text of images.
//! - Kept as code: listing `----`, `[source]` and literal `....` blocks and indented literal
//!   paragraphs, verbatim, line by line.
//! - Inline: `xref:target[text]`, `link:url[text]`, `https://url[text]` and `<<id,text>>`
//!   become their text (or their target when the text is empty); `{name}` becomes the value of
//!   the document attribute `name` where one is defined, and is kept as written otherwise;
//!   `*bold*`, `_em_` and `` `mono` `` are kept as written.
//! - Header attributes (`:name: value` between the title and the first blank line) go to
//!   `meta.fields`; `:keywords:` also to `meta.tags`. Attribute entries later in the body only
//!   define values for `{name}`.
//! - Dropped: comments (`//` lines, `////` blocks, `[comment]` blocks), passthrough `++++`
//!   blocks, attribute lines (`[[anchor]]`, `[#id]`, `[.role]`, `[source,java]` …), list
//!   continuation `+` lines, preprocessor directives (`ifdef::`, `endif::` …: the lines inside
//!   are kept, the condition is not evaluated), and every block macro (`toc::[]`), above all
//!   `include::` and `include-code::`, also inside listings: nothing outside the file is ever
//!   read, whatever its path says.
//!
//! Not understood: conditionals (both branches are kept), `subs=` settings (listings are never
//! substituted), counters and built-in attributes (`{nbsp}` stays as written), description
//! lists and callouts (kept as written), cell specifiers beyond a leading `2+|`/`a|`, rows
//! spread over several lines (each line is a row), and section titles inside delimited blocks
//! (kept as a line of text; `[discrete]` is not needed outside them, where every title is a
//! heading).
//!
//! Bounds: one pass over the lines; nested delimited blocks up to `Limits::max_depth` (deeper
//! delimiters are read as text); inline constructs find their closing brackets through a
//! remembered next-occurrence search (`NextFinder`), so a 10 MB line of openers costs one
//! pass, not one per opener; attribute values at most `MAX_ATTRIBUTE_BYTES`, and all
//! attribute references of a file together may add at most the file's own size to its text
//! (an attribute bomb is cut, with a warning); the deadline checked every few hundred lines.

use std::collections::BTreeMap;

use super::{Deadline, Extracted, Limits, Meta, TextBuilder, line as at_line};

pub(crate) const VERSION: u32 = 2;

/// The longest attribute value kept; a longer one is cut at a character boundary.
const MAX_ATTRIBUTE_BYTES: usize = 4096;

/// The longest attribute name a reference `{name}` is read with.
const MAX_ATTRIBUTE_NAME: usize = 128;

/// How many lines pass between two looks at the deadline.
const DEADLINE_EVERY: usize = 256;

/// A delimited block that is open.
#[derive(Clone, Debug)]
struct OpenBlock {
    delimiter: String,
    kind: BlockKind,
    /// The source line it opened on (for the warning when it is never closed).
    line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockKind {
    /// Listing or literal: lines kept verbatim until the closing delimiter.
    Verbatim,
    /// Passthrough or comment: lines dropped until the closing delimiter.
    Dropped,
    /// A table: rows until the closing delimiter.
    Table,
    /// Example, sidebar, quote, open: content read as the document is.
    Compound,
}

/// What the last block attribute line (`[source]`, `[NOTE]`, `[comment]`) says about the block
/// that follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Pending {
    #[default]
    None,
    /// The next paragraph or block is code.
    Code,
    /// The next paragraph or block is dropped.
    Drop,
    /// The next paragraph or block begins with this label ("Note").
    Admonition(&'static str),
}

/// Reads an AsciiDoc file: see the module documentation for what is kept.
pub(crate) fn extract(text: &str, limits: &Limits, deadline: &Deadline) -> Extracted {
    let mut reader = Reader {
        builder: TextBuilder::new(limits),
        meta: Meta::default(),
        warnings: Vec::new(),
        attributes: BTreeMap::new(),
        expansion_budget: text.len(),
        budget_warned: false,
        stack: Vec::new(),
        max_depth: limits.max_depth,
        depth_warned: false,
        pending: Pending::None,
        paragraph: Vec::new(),
        paragraph_code: false,
        paragraph_label: None,
        paragraph_dropped: false,
        verbatim: Vec::new(),
        time_limit: limits.time,
    };
    reader.read(text, deadline);
    let Reader {
        builder,
        meta,
        warnings,
        ..
    } = reader;
    builder.finish(meta, warnings)
}

struct Reader {
    builder: TextBuilder,
    meta: Meta,
    warnings: Vec<String>,
    attributes: BTreeMap<String, String>,
    /// Bytes attribute references may still add to the text.
    expansion_budget: usize,
    budget_warned: bool,
    stack: Vec<OpenBlock>,
    max_depth: usize,
    depth_warned: bool,
    pending: Pending,
    /// The lines of the paragraph being read, substituted, with their source line numbers.
    paragraph: Vec<(String, usize)>,
    /// Whether the paragraph being read is code (kept verbatim).
    paragraph_code: bool,
    /// The admonition label the paragraph begins with.
    paragraph_label: Option<&'static str>,
    /// Whether the paragraph being read is dropped (under `[comment]` or `[pass]`).
    paragraph_dropped: bool,
    /// The lines of the verbatim or table block being read.
    verbatim: Vec<(String, usize)>,
    /// The time limit, for the warning when the deadline passes.
    time_limit: std::time::Duration,
}

impl Reader {
    fn read(&mut self, text: &str, deadline: &Deadline) {
        let mut in_header = false;
        let mut header_done = false;
        let mut continued_attribute: Option<(String, String)> = None;
        for (index, raw) in text.split('\n').enumerate() {
            let number = index + 1;
            if index.is_multiple_of(DEADLINE_EVERY) && index > 0 && deadline.passed() {
                self.warnings.push(format!(
                    "took over {} s; the rest is left out",
                    self.time_limit.as_secs()
                ));
                break;
            }
            if self.builder.is_full() {
                break;
            }
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if let Some((name, mut value)) = continued_attribute.take() {
                // An attribute value continued with a trailing ` \`.
                let (piece, more) = continuation(line.trim());
                push_bounded(&mut value, " ");
                push_bounded(&mut value, piece);
                if more {
                    continued_attribute = Some((name, value));
                } else {
                    self.define(&name, &value, in_header);
                }
                continue;
            }
            if self.in_raw_block(line, number) {
                continue;
            }
            let trimmed = line.trim_end();
            // The header: the title, then attribute entries and author lines, up to a blank.
            if !header_done && !in_header {
                if trimmed.is_empty() || is_comment_line(trimmed) {
                    continue;
                }
                if let Some(title) = trimmed.strip_prefix("= ").map(str::trim)
                    && !title.is_empty()
                {
                    in_header = true;
                    let title = self.inline(title);
                    self.meta.title = Some(super::fold_space(&title));
                    self.builder.heading(1, &title, at_line(number));
                    continue;
                }
                if attribute_entry(trimmed).is_none() {
                    header_done = true;
                }
            } else if in_header {
                if trimmed.is_empty() {
                    in_header = false;
                    header_done = true;
                    continue;
                }
                if attribute_entry(trimmed).is_none() && !is_comment_line(trimmed) {
                    // An author or revision line, directly under the title.
                    continue;
                }
            }
            if let Some((name, value)) = attribute_entry(trimmed) {
                self.flush_paragraph();
                let (value, more) = continuation(value);
                if more {
                    continued_attribute = Some((name.to_string(), value.to_string()));
                } else {
                    let header = in_header || !header_done;
                    self.define(name, value, header);
                }
                continue;
            }
            self.body_line(trimmed, number);
        }
        if let Some((name, value)) = continued_attribute {
            self.define(&name, &value, in_header);
        }
        self.flush_paragraph();
        if let Some(block) = self.stack.last().cloned() {
            self.flush_verbatim(block.kind);
            self.warnings.push(format!(
                "the block opened by {:?} at line {} is never closed; it runs to the end of the file",
                block.delimiter, block.line
            ));
        }
    }

    /// Handles a line inside a listing, literal, passthrough, comment or table block: whether
    /// it was one (consumed).
    fn in_raw_block(&mut self, line: &str, number: usize) -> bool {
        let Some(top) = self.stack.last() else {
            return false;
        };
        let kind = top.kind;
        if kind == BlockKind::Compound {
            return false;
        }
        if line.trim_end() == top.delimiter {
            self.flush_verbatim(kind);
            self.stack.pop();
            return true;
        }
        match kind {
            // An include is a preprocessor directive: it is one in a listing too.
            BlockKind::Verbatim if is_include(line) => {}
            BlockKind::Verbatim => self.verbatim.push((line.to_string(), number)),
            BlockKind::Table => {
                if !line.trim().is_empty() {
                    let row = self.table_row(line);
                    if !row.is_empty() {
                        self.verbatim.push((row, number));
                    }
                }
            }
            BlockKind::Dropped | BlockKind::Compound => {}
        }
        true
    }

    /// A line of the body outside listing, literal, passthrough, comment and table blocks.
    fn body_line(&mut self, line: &str, number: usize) {
        if line.trim().is_empty() {
            self.flush_paragraph();
            return;
        }
        if self.paragraph_code {
            // An indented literal paragraph or a `[source]` paragraph runs to a blank line.
            self.paragraph.push((line.to_string(), number));
            return;
        }
        if let Some(delimiter) = block_delimiter(line) {
            self.flush_paragraph();
            self.open_or_close(delimiter, number);
            return;
        }
        if is_comment_line(line) || is_preprocessor_line(line) {
            return;
        }
        if line == "+" {
            // A list continuation: the next block belongs to the item; nothing to keep.
            self.flush_paragraph();
            return;
        }
        if let Some(attributes) = block_attribute_line(line) {
            self.flush_paragraph();
            // An anchor (`[[id]]`) leaves what a style line above it said in force.
            if !attributes.starts_with('[') {
                self.pending = pending_of(attributes);
            }
            return;
        }
        if let Some((level, title)) = section_title(line) {
            self.flush_paragraph();
            self.pending = Pending::None;
            if self.stack.is_empty() {
                let title = self.inline(title);
                if level == 1 && self.meta.title.is_none() {
                    // A document title under an anchor or a comment, past the header.
                    self.meta.title = Some(super::fold_space(&title));
                }
                self.builder.heading(level, &title, at_line(number));
            } else {
                let title = self.inline(title);
                self.paragraph.push((title, number));
                self.flush_paragraph();
            }
            return;
        }
        if let Some(alt) = block_macro(line) {
            self.flush_paragraph();
            self.pending = Pending::None;
            if let Some(alt) = alt {
                let alt = self.inline(alt);
                self.paragraph.push((alt, number));
                self.flush_paragraph();
            }
            return;
        }
        if self.paragraph.is_empty() {
            if let Some(title) = block_title(line) {
                let title = self.inline(title);
                self.builder
                    .block_lines(std::iter::once((title.as_str(), at_line(number))));
                return;
            }
            match std::mem::take(&mut self.pending) {
                Pending::Drop => {
                    self.paragraph_code = true;
                    self.paragraph_dropped = true;
                }
                Pending::Code => self.paragraph_code = true,
                Pending::Admonition(label) => self.paragraph_label = Some(label),
                Pending::None => {
                    if line.starts_with([' ', '\t']) {
                        self.paragraph_code = true;
                    } else if let Some((label, rest)) = admonition_paragraph(line) {
                        self.paragraph_label = Some(label);
                        let rest = self.inline(rest);
                        self.paragraph.push((rest, number));
                        return;
                    }
                }
            }
            if self.paragraph_code {
                self.paragraph.push((line.to_string(), number));
                return;
            }
        }
        let line = line.strip_suffix(" +").unwrap_or(line);
        let line = self.inline(line);
        self.paragraph.push((line, number));
    }

    /// A delimiter line outside raw blocks: closes the open compound block it matches, or
    /// opens a block.
    fn open_or_close(&mut self, delimiter: &str, number: usize) {
        if self
            .stack
            .last()
            .is_some_and(|top| top.delimiter == delimiter)
        {
            self.stack.pop();
            self.pending = Pending::None;
            self.paragraph_label = None;
            return;
        }
        if self.stack.len() >= self.max_depth {
            if !self.depth_warned {
                self.depth_warned = true;
                self.warnings.push(format!(
                    "blocks nest over {} deep at line {number}; deeper delimiters are read as text",
                    self.max_depth
                ));
            }
            self.paragraph.push((delimiter.to_string(), number));
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let kind = match (delimiter_kind(delimiter), pending) {
            (_, Pending::Drop) => BlockKind::Dropped,
            (BlockKind::Compound, Pending::Code) => BlockKind::Verbatim,
            (kind, _) => kind,
        };
        if let (BlockKind::Compound, Pending::Admonition(label)) = (kind, pending) {
            // `[NOTE]` over a delimited block: its first paragraph begins with the label.
            self.paragraph_label = Some(label);
        }
        self.stack.push(OpenBlock {
            delimiter: delimiter.to_string(),
            kind,
            line: number,
        });
    }

    /// Writes the paragraph read so far as one unit.
    fn flush_paragraph(&mut self) {
        let lines = std::mem::take(&mut self.paragraph);
        let code = std::mem::take(&mut self.paragraph_code);
        let label = self.paragraph_label.take();
        if std::mem::take(&mut self.paragraph_dropped) {
            // A paragraph under `[comment]` or `[pass]`.
            return;
        }
        if lines.is_empty() {
            // `[NOTE]` over a block: the label waits for the block's first paragraph.
            self.paragraph_label = label;
            return;
        }
        let mut lines = lines;
        if let (Some(label), Some((first, _))) = (label, lines.first_mut())
            && !code
        {
            *first = format!("{label}: {first}");
        }
        self.builder.block_lines(
            lines
                .iter()
                .map(|(text, number)| (text.as_str(), at_line(*number))),
        );
    }

    /// Writes the verbatim lines or table rows of the block being closed.
    fn flush_verbatim(&mut self, kind: BlockKind) {
        let lines = std::mem::take(&mut self.verbatim);
        if matches!(kind, BlockKind::Verbatim | BlockKind::Table) {
            self.builder.block_lines(
                lines
                    .iter()
                    .map(|(text, number)| (text.as_str(), at_line(*number))),
            );
        }
    }

    /// Defines (or, for `name!`, unsets) an attribute; header attributes go to the metadata.
    fn define(&mut self, name: &str, value: &str, header: bool) {
        if let Some(name) = name.strip_suffix('!') {
            self.attributes.remove(name);
            return;
        }
        let mut value = self.inline(value.trim());
        truncate_at_boundary(&mut value, MAX_ATTRIBUTE_BYTES);
        if header && !value.is_empty() {
            if name == "keywords" {
                let mut tags: Vec<String> = value
                    .split(',')
                    .map(|tag| tag.trim().to_lowercase())
                    .filter(|tag| !tag.is_empty())
                    .collect();
                tags.sort();
                tags.dedup();
                self.meta.tags = tags;
            }
            self.meta.fields.insert(name.to_string(), value.clone());
        }
        self.attributes.insert(name.to_string(), value);
    }

    /// A table line as a row: cells joined by " | ", cell specifiers (`2+|`, `a|`) left out.
    fn table_row(&mut self, line: &str) -> String {
        let pieces: Vec<&str> = line.trim().split('|').collect();
        let last = pieces.len() - 1;
        let mut row: Vec<String> = Vec::with_capacity(pieces.len());
        for (index, piece) in pieces.into_iter().enumerate() {
            // A specifier is the last word of the piece before a `|`, written against it.
            let piece = if index < last {
                match piece.rsplit_once(char::is_whitespace) {
                    Some((text, spec)) if is_cell_spec(spec) => text,
                    None if is_cell_spec(piece) => "",
                    _ => piece,
                }
            } else {
                piece
            };
            let cell = piece.trim();
            if !cell.is_empty() {
                row.push(self.inline(cell));
            }
        }
        row.join(" | ")
    }

    /// Inline markup replaced by the words it shows (see the module documentation).
    fn inline(&mut self, line: &str) -> String {
        let mut out = String::with_capacity(line.len());
        let mut finders = LineFinders::default();
        let mut at = 0;
        while let Some(found) = line[at..].find(['x', 'l', 'h', 'm', '<', '{', 'i']) {
            out.push_str(&line[at..at + found]);
            at += found;
            match self.inline_at(line, at, &mut finders) {
                Some((shown, end)) => {
                    out.push_str(&shown);
                    at = end;
                }
                None => {
                    // Every candidate starts with an ASCII byte.
                    out.push_str(&line[at..at + 1]);
                    at += 1;
                }
            }
        }
        out.push_str(&line[at..]);
        out
    }

    /// The construct starting at byte `at` of `line`, if any: what it shows and where it ends.
    fn inline_at(
        &mut self,
        line: &str,
        at: usize,
        finders: &mut LineFinders,
    ) -> Option<(String, usize)> {
        let text = &line[at..];
        if text.starts_with("<<") {
            let body = at + 2;
            let end = finders.close_angles.next(line, body, |s| s.find(">>"))?;
            let inner_angle = finders.open_angle.next(line, body, |s| s.find('<'));
            if end == body || inner_angle.is_some_and(|angle| angle < end) {
                return None;
            }
            let inner = &line[body..end];
            let shown = match inner.split_once(',') {
                Some((_, label)) if !label.trim().is_empty() => label.trim(),
                Some((target, _)) => target,
                None => inner,
            };
            return Some((shown.to_string(), end + 2));
        }
        if text.starts_with('{') {
            let body = at + 1;
            let end = finders.close_brace.next(line, body, |s| s.find('}'))?;
            let name = &line[body..end];
            if name.is_empty()
                || name.len() > MAX_ATTRIBUTE_NAME
                || !name.bytes().all(is_attribute_name_byte)
            {
                return None;
            }
            let value = self.attributes.get(name)?;
            let used = end + 1 - at;
            let growth = value.len().saturating_sub(used);
            if growth > self.expansion_budget {
                if !self.budget_warned {
                    self.budget_warned = true;
                    self.warnings.push(
                        "its attribute references would make its text over twice its size; \
                         the rest are left as written"
                            .to_string(),
                    );
                }
                return None;
            }
            self.expansion_budget -= growth;
            return Some((value.clone(), end + 1));
        }
        for prefix in ["xref:", "link:", "image:", "https://", "http://", "mailto:"] {
            if !text.starts_with(prefix) {
                continue;
            }
            let target_start = at + prefix.len();
            let target_end = finders.target_end.next(line, target_start, |s| {
                s.find(|c: char| c == '[' || c.is_whitespace())
            })?;
            if !line[target_end..].starts_with('[') {
                return None;
            }
            let label_end = finders
                .close_bracket
                .next(line, target_end + 1, |s| s.find(']'))?;
            let target = &line[target_start..target_end];
            let label = line[target_end + 1..label_end].trim();
            let label = if prefix == "image:" || label.starts_with('"') {
                label.split(',').next().unwrap_or_default()
            } else {
                label
            };
            let label = label.trim().trim_matches('"');
            let shown = match (label.is_empty(), prefix) {
                (false, _) => label.to_string(),
                (true, "image:") => String::new(),
                (true, "https://" | "http://" | "mailto:") => format!("{prefix}{target}"),
                (true, _) => target.to_string(),
            };
            return Some((shown, label_end + 1));
        }
        None
    }
}

/// The next place at or after a position where something occurs in a line, remembered, so
/// that looking from every position of a line in turn costs one pass over it, not one per
/// position (a 10 MB line of `xref:xref:…` or `<<<<…` stays linear).
#[derive(Default)]
struct NextFinder {
    /// The last search: from where, and what it found (`None`: nowhere after `from`).
    last: Option<(usize, Option<usize>)>,
}

impl NextFinder {
    fn next(
        &mut self,
        line: &str,
        from: usize,
        find: impl Fn(&str) -> Option<usize>,
    ) -> Option<usize> {
        if let Some((searched_from, found)) = self.last
            && from >= searched_from
            && found.is_none_or(|at| from <= at)
        {
            return found;
        }
        let found = line.get(from..).and_then(find).map(|at| from + at);
        self.last = Some((from, found));
        found
    }
}

/// The finders of one line's inline constructs.
#[derive(Default)]
struct LineFinders {
    close_bracket: NextFinder,
    close_angles: NextFinder,
    open_angle: NextFinder,
    close_brace: NextFinder,
    target_end: NextFinder,
}

fn is_attribute_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// `:name: value` (or `:name!:`): the name and the value.
fn attribute_entry(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix(':')?;
    let end = rest.find(':')?;
    let name = &rest[..end];
    let bare = name.strip_suffix('!').unwrap_or(name);
    let bare = bare.strip_prefix('!').unwrap_or(bare);
    if bare.is_empty() || !bare.bytes().all(is_attribute_name_byte) {
        return None;
    }
    let value = &rest[end + 1..];
    if !value.is_empty() && !value.starts_with([' ', '\t']) {
        return None;
    }
    Some((name, value.trim()))
}

/// An attribute value without its trailing ` \`, and whether it continues on the next line.
fn continuation(value: &str) -> (&str, bool) {
    match value.strip_suffix('\\') {
        Some(value) if value.is_empty() || value.ends_with(' ') => (value.trim_end(), true),
        _ => (value, false),
    }
}

/// Appends to an attribute value up to `MAX_ATTRIBUTE_BYTES`.
fn push_bounded(value: &mut String, piece: &str) {
    if value.len() < MAX_ATTRIBUTE_BYTES {
        value.push_str(piece);
        truncate_at_boundary(value, MAX_ATTRIBUTE_BYTES);
    }
}

fn truncate_at_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// A `//` comment line (not a `////` block delimiter).
fn is_comment_line(line: &str) -> bool {
    line.starts_with("//") && block_delimiter(line).is_none()
}

/// An `include::` or `include-code::` directive line.
fn is_include(line: &str) -> bool {
    (line.starts_with("include::") || line.starts_with("include-code::"))
        && line.trim_end().ends_with(']')
}

/// `ifdef::`, `ifndef::`, `ifeval::` and `endif::` lines.
fn is_preprocessor_line(line: &str) -> bool {
    ["ifdef::", "ifndef::", "ifeval::", "endif::"]
        .iter()
        .any(|prefix| line.starts_with(prefix))
        && line.ends_with(']')
}

/// A delimited block's delimiter line: four or more of `-`, `.`, `=`, `*`, `_`, `+`, `/`;
/// exactly `--` (open block); or a table's `|===` (also `,===`, `:===`, `!===`).
fn block_delimiter(line: &str) -> Option<&str> {
    let line = line.trim_end();
    if line == "--" {
        return Some(line);
    }
    let bytes = line.as_bytes();
    if bytes.len() >= 4 && matches!(bytes[0], b'|' | b',' | b':' | b'!') && &line[1..] == "===" {
        return Some(line);
    }
    let first = *bytes.first()?;
    if bytes.len() >= 4
        && matches!(first, b'-' | b'.' | b'=' | b'*' | b'_' | b'+' | b'/')
        && bytes.iter().all(|b| *b == first)
    {
        return Some(line);
    }
    None
}

fn delimiter_kind(delimiter: &str) -> BlockKind {
    match delimiter.as_bytes().first() {
        Some(b'-') if delimiter != "--" => BlockKind::Verbatim,
        Some(b'.') => BlockKind::Verbatim,
        Some(b'+' | b'/') => BlockKind::Dropped,
        Some(b'|' | b',' | b':' | b'!') => BlockKind::Table,
        _ => BlockKind::Compound,
    }
}

/// `[...]` alone on a line: a block attribute line (`[source,java]`, `[[id]]`, `[NOTE]`).
fn block_attribute_line(line: &str) -> Option<&str> {
    let inner = line.strip_prefix('[')?.strip_suffix(']')?;
    if inner.trim().is_empty() && !line.starts_with("[[") {
        return None;
    }
    Some(inner)
}

/// What a block attribute line says about the block under it.
fn pending_of(attributes: &str) -> Pending {
    if attributes.starts_with('[') {
        return Pending::None;
    }
    let style = attributes
        .split(',')
        .next()
        .unwrap_or_default()
        .split(['#', '.', '%'])
        .next()
        .unwrap_or_default()
        .trim();
    match style {
        "source" | "listing" | "literal" => Pending::Code,
        "comment" | "pass" => Pending::Drop,
        _ => admonition_label(style).map_or(Pending::None, Pending::Admonition),
    }
}

/// The label an admonition's text begins with ("Note"), for its style name.
fn admonition_label(style: &str) -> Option<&'static str> {
    match style {
        "NOTE" => Some("Note"),
        "TIP" => Some("Tip"),
        "IMPORTANT" => Some("Important"),
        "WARNING" => Some("Warning"),
        "CAUTION" => Some("Caution"),
        _ => None,
    }
}

/// `NOTE: text`: the label and the text.
fn admonition_paragraph(line: &str) -> Option<(&'static str, &str)> {
    let (style, rest) = line.split_once(": ")?;
    Some((admonition_label(style)?, rest.trim_start()))
}

/// A section title (`== Title`, `## Title`): its level and text.
fn section_title(line: &str) -> Option<(u8, &str)> {
    let marker = line.as_bytes().first().copied()?;
    if marker != b'=' && marker != b'#' {
        return None;
    }
    let count = line.bytes().take_while(|b| *b == marker).count();
    if !(1..=6).contains(&count) {
        return None;
    }
    let title = line[count..].strip_prefix([' ', '\t'])?;
    let title = title.trim_end_matches(char::from(marker)).trim();
    if title.is_empty() {
        return None;
    }
    Some((u8::try_from(count).unwrap_or(6), title))
}

/// A block title line (`.Title`, not `..` nor `. item`).
fn block_title(line: &str) -> Option<&str> {
    let title = line.strip_prefix('.')?;
    let first = title.chars().next()?;
    if first == '.' || first.is_whitespace() {
        return None;
    }
    Some(title)
}

/// A block macro line (`name::target[attributes]`): `Some(Some(alt))` for an image with alt
/// text, `Some(None)` for any other macro (`include::`, `include-code::`, `toc::[]`), which is
/// dropped.
fn block_macro(line: &str) -> Option<Option<&str>> {
    let (name, rest) = line.split_once("::")?;
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        || !rest.ends_with(']')
        || rest.starts_with([' ', '\t'])
    {
        return None;
    }
    let open = rest.find('[')?;
    if rest[..open].contains(char::is_whitespace) {
        return None;
    }
    if name != "image" {
        return Some(None);
    }
    let attributes = &rest[open + 1..rest.len() - 1];
    let alt = attributes.split(',').next().unwrap_or_default().trim();
    let alt = alt.trim_matches('"');
    Some((!alt.is_empty()).then_some(alt))
}

/// A table cell specifier (`2+`, `a`, `.2+^.^`, `3*`), which stands before a `|`.
fn is_cell_spec(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 12
        && text.bytes().all(|b| {
            b.is_ascii_digit()
                || matches!(b, b'+' | b'*' | b'.' | b'^' | b'<' | b'>')
                || matches!(b, b'a' | b'd' | b'e' | b'h' | b'l' | b'm' | b's' | b'v')
        })
        && text.bytes().filter(u8::is_ascii_alphabetic).count() <= 1
}

#[cfg(test)]
mod tests {
    use super::{Limits, extract};
    use crate::extract::line as at;
    use crate::extract::{Deadline, Extracted, Locations, Structure, Unit};

    fn read(text: &str) -> Extracted {
        let limits = Limits::default();
        extract(text, &limits, &Deadline::after(limits.time))
    }

    fn headings(extracted: &Extracted) -> Vec<(u8, String)> {
        let Structure::Units(units) = &extracted.structure else {
            panic!("units")
        };
        units
            .iter()
            .filter_map(|unit| match unit {
                Unit::Heading { level, text, .. } => Some((*level, text.clone())),
                _ => None,
            })
            .collect()
    }

    fn locations(extracted: &Extracted) -> &[crate::extract::Location] {
        let Locations::Mapped(locations) = &extracted.locations else {
            panic!("mapped")
        };
        locations
    }

    #[test]
    fn titles_sections_and_header_attributes() {
        let doc = "= Getting Started\nJane Doe\n:keywords: Security, OAuth, security\n\
                   :description: How to start\n:gh-url: https://example.com/repo\n\n\
                   Intro with {gh-url}/x and {missing}.\n\n== Setup\n\n=== Deeper ===\n\n\
                   ## Markdown style\n\nText.\n";
        let extracted = read(doc);
        assert_eq!(extracted.meta.title.as_deref(), Some("Getting Started"));
        assert_eq!(extracted.meta.tags, ["oauth", "security"]);
        assert_eq!(extracted.meta.fields["description"], "How to start");
        assert_eq!(
            headings(&extracted),
            [
                (1, "Getting Started".to_string()),
                (2, "Setup".to_string()),
                (3, "Deeper".to_string()),
                (2, "Markdown style".to_string()),
            ]
        );
        assert!(
            extracted
                .text
                .contains("Intro with https://example.com/repo/x and {missing}.")
        );
        assert!(!extracted.text.contains("Jane Doe"));
        assert_eq!(locations(&extracted).len(), extracted.text.lines().count());
    }

    #[test]
    fn code_is_kept_and_comments_passthrough_and_includes_are_dropped() {
        let doc = "== Code\n\n[source,java]\n----\nclass A {} // not a comment\n\n  int x;\n----\n\
                   \n....\nliteral *text*\n....\n\n// a comment line\n////\nblock comment\n////\n\
                   ++++\n<div>raw</div>\n++++\ninclude::../../../etc/passwd[]\n\
                   include-code::./SecurityConfig[tag=x]\n[[anchor-id]]\n[#other.role]\nAfter.\n";
        let extracted = read(doc);
        let text = &extracted.text;
        assert!(
            text.contains("class A {} // not a comment\n\n  int x;\n"),
            "{text}"
        );
        assert!(text.contains("literal *text*"));
        for gone in [
            "a comment line",
            "block comment",
            "raw",
            "passwd",
            "SecurityConfig",
            "anchor-id",
            "role",
        ] {
            assert!(!text.contains(gone), "{gone} in {text}");
        }
        assert!(text.contains("After."));
        let listing = read(
            "[[top]]\n= Under an anchor\n\n----\ninclude::example$Config.java[tags=a]\nkept();\n----\n",
        );
        assert_eq!(listing.meta.title.as_deref(), Some("Under an anchor"));
        assert!(
            !listing.text.contains("include::") && listing.text.contains("kept();"),
            "{}",
            listing.text
        );
        let locations = locations(&extracted);
        let line = text
            .lines()
            .position(|l| l.starts_with("class A"))
            .expect("code line");
        assert_eq!(locations[line], at(5));
        assert_eq!(locations[line + 2], at(7));
    }

    #[test]
    fn admonitions_tabs_compound_blocks_and_titles() {
        let doc = "NOTE: Read this first.\n\n[WARNING]\n====\nDanger inside.\n\nSecond.\n====\n\n\
                   [tabs]\n======\nJava::\n+\n[source,java]\n----\nhttp.csrf();\n----\n\nKotlin::\n+\n\
                   ----\nhttp { csrf }\n----\n======\n\n.A block title\n****\nSidebar words.\n****\n\n\
                   ____\nQuoted words.\n____\n\n--\nOpen words.\n--\n";
        let extracted = read(doc);
        let text = &extracted.text;
        for kept in [
            "Note: Read this first.",
            "Warning: Danger inside.",
            "\nSecond.",
            "http.csrf();",
            "http { csrf }",
            "A block title",
            "Sidebar words.",
            "Quoted words.",
            "Open words.",
            "Java::",
        ] {
            assert!(text.contains(kept), "{kept:?} missing from {text}");
        }
        assert!(extracted.warnings.is_empty(), "{:?}", extracted.warnings);
    }

    #[test]
    fn inline_links_become_their_text() {
        let doc = ":docs: https://docs.example\n\nSee xref:servlet/index.adoc[the servlet guide], \
                   xref:empty.adoc[], link:{docs}/a[the docs], https://spring.io[Spring], \
                   <<csrf,CSRF>>, <<plain>>, *bold* and `mono`, image:logo.png[Logo,20].\n";
        let extracted = read(doc);
        assert!(
            extracted.text.contains(
                "See the servlet guide, empty.adoc, the docs, Spring, CSRF, plain, *bold* and \
                 `mono`, Logo."
            ),
            "{}",
            extracted.text
        );
    }

    #[test]
    fn tables_become_rows() {
        let doc =
            "[cols=\"1,2\"]\n|===\n|Name |Value\n\n|csrf |on\na|adoc cell 2+|wide\n|===\nAfter.\n";
        let extracted = read(doc);
        assert!(
            extracted
                .text
                .contains("Name | Value\ncsrf | on\nadoc cell | wide\n"),
            "{}",
            extracted.text
        );
        let locations = locations(&extracted);
        let row = extracted
            .text
            .lines()
            .position(|l| l == "csrf | on")
            .expect("row");
        assert_eq!(locations[row], at(5));
    }

    #[test]
    fn an_unclosed_block_runs_to_the_end_with_a_warning() {
        let extracted = read("Before.\n\n----\ncode one\ncode two\n");
        assert!(extracted.text.contains("code one\ncode two"));
        assert_eq!(extracted.warnings.len(), 1, "{:?}", extracted.warnings);
        assert!(
            extracted.warnings[0].contains("line 3"),
            "{:?}",
            extracted.warnings
        );
    }

    #[test]
    fn nesting_stops_at_the_depth_limit() {
        let mut doc = String::new();
        for depth in 0..20 {
            doc.push_str(&"=".repeat(4 + depth));
            doc.push('\n');
        }
        doc.push_str("Deep words.\n");
        let limits = Limits {
            max_depth: 8,
            ..Limits::default()
        };
        let extracted = extract(&doc, &limits, &Deadline::after(limits.time));
        assert!(extracted.text.contains("Deep words."));
        assert!(
            extracted.text.contains(&"=".repeat(4 + 8)),
            "deeper delimiters are text"
        );
        assert!(
            extracted.warnings.iter().any(|w| w.contains("8 deep")),
            "{:?}",
            extracted.warnings
        );
    }

    #[test]
    fn attribute_bombs_cost_at_most_the_file_size() {
        let mut doc = String::from(":a: xxxxxxxxxxxxxxxx\n");
        for level in 1..12u8 {
            let name = char::from(b'a' + level);
            let below = char::from(b'a' + level - 1);
            doc.push_str(&format!(
                ":{name}: {{{below}}}{{{below}}}{{{below}}}{{{below}}}\n"
            ));
        }
        doc.push('\n');
        for _ in 0..2000 {
            doc.push_str("{l}\n");
        }
        let extracted = read(&doc);
        assert!(
            extracted.text.len() <= 3 * doc.len() + 4096,
            "{} from {}",
            extracted.text.len(),
            doc.len()
        );
        assert!(
            extracted
                .warnings
                .iter()
                .any(|w| w.contains("attribute references"))
        );
    }

    #[test]
    fn a_passed_deadline_stops_the_read_with_a_warning() {
        let doc = "Line.\n\n".repeat(5000);
        let limits = Limits::default();
        let extracted = extract(&doc, &limits, &Deadline::after(std::time::Duration::ZERO));
        assert!(extracted.text.len() < doc.len() / 4);
        assert!(
            extracted
                .warnings
                .iter()
                .any(|w| w.contains("the rest is left out"))
        );
    }

    #[test]
    fn hostile_lines_cost_linear_time() {
        let long = "xref:".repeat(2_000_000) + &"<<".repeat(1_000_000) + &"{a".repeat(1_000_000);
        let started = std::time::Instant::now();
        let extracted = read(&long);
        assert_eq!(extracted.text.len(), long.len() + 1);
        let many = "====\n=====\n".repeat(50_000) + &"|===\n".repeat(1000);
        let extracted = read(&many);
        assert!(
            extracted.warnings.iter().any(|w| w.contains("512 deep")),
            "{:?}",
            extracted.warnings
        );
        // Generous for a debug build on a shared machine; quadratic input would take hours.
        assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
    }
}
