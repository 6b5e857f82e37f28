//! reStructuredText: section titles, paragraphs, lists, literal and code blocks and the
//! directives Sphinx documents use, read line by line in one pass (after a cheap first pass
//! for substitution definitions).
//!
//! No parser crate is used: none that is kept up reads Sphinx documents (the `rst_parser`
//! crate of the rust-rst project knows no Sphinx directive and is not maintained). This reader
//! looks at each line once, with a stack of the explicit-markup blocks (directives, comments)
//! it is inside, each ended by the first line indented no deeper than its `..`; the stack
//! stops growing at `Limits::max_depth`, and a block deeper than that is read as plain text,
//! with a warning. Grid and simple tables are kept as the lines they are, never laid out, so a
//! table costs its size; a list table's cells are each read once by a reader of their own
//! (a list table nested in a cell costs its lines once more per level, and the levels are
//! capped). The deadline is checked every few hundred lines, and before each cell.
//!
//! Kept:
//! - Section titles, underlined (and optionally overlined) with one repeated punctuation
//!   character; levels in order of first appearance of each (character, overline) style, as
//!   docutils assigns them, so the document title is the first level-1 heading.
//! - Paragraphs, bullet and enumerated lists, definition lists, field lists, line blocks and
//!   block quotes, as text: a block of lines is one unit, each list item (or term with its
//!   definition) one line of it, white space folded.
//! - Literal blocks after `::` (the `::` shown as `:`, or dropped when alone or after a space,
//!   as docutils renders it), doctest blocks (`>>>`), grid and simple tables, and the bodies of
//!   `code-block`, `code`, `sourcecode`, `doctest`, `testcode`, `testoutput`, `parsed-literal`
//!   and `ipython`: their lines kept as they are (dedented).
//! - Admonitions (`note`, `warning`, `tip`, `important`, `caution`, `danger`, `hint`,
//!   `attention`, `error`, `seealso`, `admonition`, `versionadded`, `versionchanged`,
//!   `deprecated`, `topic`, `sidebar`, `rubric`): their text, the first paragraph begun with the
//!   word a reader sees ("Note: …", "See also: …", "New in version 1.4: …", or the title of an
//!   `admonition`, `topic` or `sidebar`).
//! - Sphinx object descriptions (`autoclass`, `autofunction`, `automodule`, `automethod`,
//!   `autoattribute`, `autodata`, `autoexception`, `function`, `class`, `method`, `attribute`,
//!   `data`, `exception`, `decorator`, `classmethod`, `staticmethod`, `property`, `module`, in
//!   any domain such as `py:`): the argument (the qualified name or signature) as a paragraph of
//!   its own, since people search for those names, and the body as text.
//! - `list-table`s: each row one line of the text, its cells joined by " | ", each cell read as
//!   rST of its own (roles resolved, code kept, white space folded); the title a paragraph, the
//!   options dropped. A list table in a cell is read the same way, up to `MAX_TABLE_NESTING`
//!   deep; one deeper is read as text, with a warning.
//! - Any other directive (`.. change::`, `.. glossary::`, `.. figure::`'s caption, …): its
//!   argument as a paragraph and its body as text. Footnotes and citations: their text.
//! - A field list at the top of the document (before any paragraph; after the document title
//!   too, as docinfo): the fields go to the metadata, `tags` and `keywords` (comma-separated) to
//!   the tags; `:orphan:` is a field with no value.
//! - Inline markup: a role's text (`:func:`x`` → `x`; `:ref:`text <label>`` → `text`;
//!   `:doc:`path`` → `path`); `:class:`~a.b.C`` gives the full name `a.b.C`, not the `C`
//!   docutils shows, because the full name is what people search for; `` `text <url>`_ `` →
//!   `text`; `` `text`_ `` and `text_` → `text`; footnote references `[1]_` are dropped.
//!   Literals (``` ``code`` ```) and emphasis stay as written.
//! - Substitutions: `|name|` (and `|name|_`) becomes the text of the file's
//!   `.. |name| replace:: text`, defined before or after its use (found by a first pass over
//!   the lines that start with `.. |`), its roles resolved. A replacement's own `|x|` stays as
//!   written (no recursion), and all replacements together may add at most the file's own size
//!   to the text: past that, references stay as written, with a warning.
//!
//! Dropped: every directive's options; `toctree`, `image`, `include` (never followed), `raw`,
//! `only`, `index`, `highlight`, `currentmodule`, `literalinclude` (its file is not read),
//! `contents`, `sectnum`, `tabularcolumns`, `meta`, `default-role`, `role`, `title`;
//! substitution definitions (`.. |name| …`); targets (`.. _label:`); comments; transitions. An
//! empty comment (`..` alone, then a blank line) holds nothing, as in docutils: it ends the
//! construct before it (a literal block, a list item's text) and what follows it, even
//! indented, is read as usual (an indented paragraph is a block quote, read as a paragraph).
//!
//! Not understood: sections inside directives (only top-level titles are headings), quoted
//! (unindented) literal blocks, `include`d and `literalinclude`d files, substitutions defined
//! in another file or in an indented block, or by a directive other than `replace` (left as
//! `|name|`), custom roles' meaning (their text is kept), grid and simple tables' cells (such a
//! table is its lines), `csv-table`s (their lines are a paragraph), and docutils' finer
//! indentation rules (a block quote's attribution, a paragraph directly followed by explicit
//! markup without a blank line is one paragraph here).

use std::collections::HashMap;
use std::ops::Range;

use super::{Deadline, Extracted, Limits, Location, Meta, TextBuilder, fold_space};

pub(crate) const VERSION: u32 = 3;

/// How many lines pass between two looks at the deadline.
const LINES_PER_DEADLINE_CHECK: usize = 256;
/// The longest role name looked for before a backtick (`:py:meth:`).
const MAX_ROLE_CHARS: usize = 64;
/// The deepest a list table is read inside another's cell: each level reads its cells' lines
/// once more, by a reader of its own (a deeper one is read as text).
pub(crate) const MAX_TABLE_NESTING: usize = 8;

pub(crate) fn extract(text: &str, limits: &Limits, deadline: &Deadline) -> Extracted {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    let substitutions = Substitutions::find(&lines, text.len(), deadline);
    let mut reader = Reader::new(limits, &lines, substitutions, deadline);
    reader.read_all();
    let mut warnings = Vec::new();
    if reader.out_of_time {
        warnings.push(format!(
            "took over {} s; the rest is left out",
            limits.time.as_secs()
        ));
    }
    if reader.too_deep {
        warnings.push(format!(
            "its directives nest deeper than {} (the nesting limit); deeper ones are read as \
             plain text",
            limits.max_depth
        ));
    }
    if reader.tables_too_deep {
        warnings.push(format!(
            "its list tables nest deeper than {MAX_TABLE_NESTING} in one another's cells; \
             deeper ones are read as plain text"
        ));
    }
    if reader.cell_full && !reader.builder.is_full() {
        warnings.push(format!(
            "its text is over {} bytes (in a table cell); the rest is left out",
            limits.max_text_bytes
        ));
    }
    if reader.substitutions.over_budget {
        warnings.push(
            "its substitutions would add more text than the file's own size; the references \
             past that are left as written"
                .to_string(),
        );
    }
    reader.meta.tags.sort();
    reader.meta.tags.dedup();
    reader.builder.finish(reader.meta, warnings)
}

/// A line's indentation, tabs expanded to multiples of 8 as docutils expands them, and its
/// text without the indentation or trailing white space.
fn measure(line: &str) -> (usize, &str) {
    let mut indent = 0;
    for (at, c) in line.char_indices() {
        match c {
            ' ' => indent += 1,
            '\t' => indent = indent / 8 * 8 + 8,
            _ => return (indent, line[at..].trim_end()),
        }
    }
    (indent, "")
}

/// Whether `line` is a section adornment: one punctuation character, repeated, unindented.
fn adornment(line: &str) -> Option<char> {
    let mut chars = line.chars();
    let first = chars.next()?;
    let is_mark = first.is_ascii_punctuation();
    (is_mark && line.trim_end().chars().all(|c| c == first) && !line.starts_with(' '))
        .then_some(first)
}

/// Whether `content` begins a list item, a field or a line of a line block, so it begins a
/// new line of its block.
fn starts_item(content: &str) -> bool {
    if let Some(rest) = content.strip_prefix(['-', '*', '+', '•', '|']) {
        return rest.is_empty() || rest.starts_with(' ');
    }
    if is_field(content).is_some() || content.starts_with(">>>") {
        return true;
    }
    // `1.`, `(a)`, `iv)`, `#.`
    let body = content.strip_prefix('(').unwrap_or(content);
    let marker_len = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))
        .unwrap_or(body.len());
    if marker_len == 0 || marker_len > 4 {
        return false;
    }
    let rest = &body[marker_len..];
    let numbered = body[..marker_len]
        .chars()
        .all(|c| c.is_ascii_digit() || c == '#')
        || marker_len == 1
        || body[..marker_len]
            .chars()
            .all(|c| "ivxlcdmIVXLCDM".contains(c));
    numbered && (rest.starts_with(". ") || rest.starts_with(") ") || rest == "." || rest == ")")
}

/// Where the text of a bullet or enumerated list item begins in `content`: the byte offset
/// after its marker and the white space after that (the marker's end when nothing follows).
fn item_text_offset(content: &str) -> Option<usize> {
    if !starts_item(content) || content.starts_with([':', '|', '>']) {
        return None;
    }
    let marker_end = content.find(char::is_whitespace).unwrap_or(content.len());
    Some(content.len() - content[marker_end..].trim_start().len())
}

/// Where the text of a bullet item (`* `, `- `, `+ `, `• `) begins in `content`, as
/// `item_text_offset`.
fn bullet_text_offset(content: &str) -> Option<usize> {
    if !content.starts_with(['*', '-', '+', '•']) {
        return None;
    }
    item_text_offset(content)
}

/// A field (`:name: value`): its name and value.
fn is_field(content: &str) -> Option<(&str, &str)> {
    let rest = content.strip_prefix(':')?;
    let end = rest.find(':')?;
    let name = &rest[..end];
    let value = &rest[end + 1..];
    (!name.is_empty()
        && !name.starts_with(' ')
        && !name.ends_with(' ')
        && (value.is_empty() || value.starts_with(' ')))
    .then(|| (name, value.trim()))
}

/// What a directive's block becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// Its lines are dropped.
    Drop,
    /// Its lines are code, kept as they are.
    Code,
    /// Its lines are read as rST; the first paragraph begun with `prefix` when there is one.
    Text { prefix: Option<String> },
    /// A table's lines, kept as they are; `simple` for a `=== ===` table.
    Table { simple: bool, borders: usize },
    /// A `list-table`'s body, gathered, then read row by row.
    ListTable,
}

/// How a directive name is read: its kind, and the paragraph its argument makes.
fn directive_kind(
    name: &str,
    argument: &str,
    substitutions: &mut Substitutions,
) -> (Kind, Option<String>) {
    let base = name.rsplit(':').next().unwrap_or(name).to_ascii_lowercase();
    let word = |word: &str| Some(word.to_string());
    let prefix = match base.as_str() {
        "code-block" | "code" | "sourcecode" | "doctest" | "testcode" | "testoutput"
        | "parsed-literal" | "ipython" | "literalinclude" => return (Kind::Code, None),
        "toctree" | "image" | "include" | "raw" | "only" | "index" | "highlight"
        | "currentmodule" | "contents" | "sectnum" | "tabularcolumns" | "meta" | "default-role"
        | "role" | "title" | "autosummary-skip" => return (Kind::Drop, None),
        "figure" => return (Kind::Text { prefix: None }, None),
        "list-table" => {
            let title = fold_space(&inline(argument, substitutions));
            return (Kind::ListTable, (!title.is_empty()).then_some(title));
        }
        "autoclass" | "autofunction" | "automodule" | "automethod" | "autoattribute"
        | "autodata" | "autoexception" | "function" | "class" | "method" | "attribute" | "data"
        | "exception" | "decorator" | "classmethod" | "staticmethod" | "property" | "module" => {
            let signature = fold_space(argument);
            return (
                Kind::Text { prefix: None },
                (!signature.is_empty()).then_some(signature),
            );
        }
        "note" => word("Note"),
        "warning" => word("Warning"),
        "tip" => word("Tip"),
        "important" => word("Important"),
        "caution" => word("Caution"),
        "danger" => word("Danger"),
        "hint" => word("Hint"),
        "attention" => word("Attention"),
        "error" => word("Error"),
        "seealso" => word("See also"),
        "versionadded" => Some(format!("New in version {}", first_word(argument))),
        "versionchanged" => Some(format!("Changed in version {}", first_word(argument))),
        "deprecated" => Some(format!("Deprecated since version {}", first_word(argument))),
        "admonition" | "topic" | "sidebar" | "rubric" => {
            let title = inline(argument, substitutions);
            (!title.is_empty()).then_some(title)
        }
        _ => {
            let argument = fold_space(&inline(argument, substitutions));
            return (
                Kind::Text { prefix: None },
                (!argument.is_empty()).then_some(argument),
            );
        }
    };
    (Kind::Text { prefix }, None)
}

fn first_word(text: &str) -> &str {
    text.split_whitespace().next().unwrap_or("")
}

/// Whether an admonition's argument is the start of its text (for `note`, `versionadded`…),
/// rather than its title (`admonition`, `topic`…).
fn argument_is_text(name: &str) -> bool {
    let base = name.rsplit(':').next().unwrap_or(name).to_ascii_lowercase();
    matches!(
        base.as_str(),
        "note"
            | "warning"
            | "tip"
            | "important"
            | "caution"
            | "danger"
            | "hint"
            | "attention"
            | "error"
            | "seealso"
    )
}

/// The text after the version of `versionadded`, `versionchanged` and `deprecated`; empty
/// for other directives.
fn version_text<'t>(name: &str, argument: &'t str) -> &'t str {
    let base = name.rsplit(':').next().unwrap_or(name).to_ascii_lowercase();
    if !matches!(
        base.as_str(),
        "versionadded" | "versionchanged" | "deprecated"
    ) {
        return "";
    }
    let rest = argument.trim_start();
    rest[first_word(rest).len()..].trim()
}

/// An explicit-markup block the reader is inside.
#[derive(Debug)]
struct Block {
    kind: Kind,
    /// The indentation of its `..` (or of the paragraph before a literal block, or of a
    /// table's first line less one): a non-blank line indented no deeper ends it. `None` for a
    /// table at the margin, which only its own end ends.
    indent: Option<usize>,
    /// Until its first blank line, `:option:` lines are its options, dropped.
    options: bool,
    /// For `Code` and `Table`: its lines and their numbers.
    lines: Vec<(usize, usize)>,
    /// Where it began, for a prefix with no text after it.
    at: usize,
}

/// A line of a block of text being gathered: its indentation, its text and its number.
#[derive(Debug, Clone, Copy)]
struct SourceLine<'t> {
    indent: usize,
    content: &'t str,
    number: usize,
}

struct Reader<'t> {
    lines: &'t [&'t str],
    builder: TextBuilder,
    meta: Meta,
    /// The limits this reader keeps to (a cell's reader: what its table's nesting leaves).
    limits: Limits,
    max_depth: usize,
    deadline: &'t Deadline,
    substitutions: Substitutions,
    stack: Vec<Block>,
    paragraph: Vec<SourceLine<'t>>,
    /// After a paragraph ending in `::`: the indentation its literal block must pass.
    literal_after: Option<usize>,
    /// The section styles, in order of first appearance: (character, overlined).
    styles: Vec<(char, bool)>,
    headings: usize,
    /// Whether any body text was written (a field list after that is text, not metadata).
    body_started: bool,
    too_deep: bool,
    /// How many list tables' cells this reader is inside.
    table_depth: usize,
    tables_too_deep: bool,
    /// Whether a table cell's text reached `Limits::max_text_bytes` (reading stops there).
    cell_full: bool,
    out_of_time: bool,
}

/// A list table's row being read: the lines it spans, its cells' column (that of its first
/// cell's bullet), the text of its cells so far, and the open cell's first line (its bullet
/// blanked out) and the lines below it.
struct TableRow<'t> {
    first: usize,
    last: usize,
    column: Option<usize>,
    cells: Vec<String>,
    cell: Option<(String, Vec<&'t str>)>,
}

impl<'t> Reader<'t> {
    fn new(
        limits: &Limits,
        lines: &'t [&'t str],
        substitutions: Substitutions,
        deadline: &'t Deadline,
    ) -> Reader<'t> {
        Reader {
            lines,
            builder: TextBuilder::new(limits),
            meta: Meta::default(),
            limits: limits.clone(),
            max_depth: limits.max_depth,
            deadline,
            substitutions,
            stack: Vec::new(),
            paragraph: Vec::new(),
            literal_after: None,
            styles: Vec::new(),
            headings: 0,
            body_started: false,
            too_deep: false,
            table_depth: 0,
            tables_too_deep: false,
            cell_full: false,
            out_of_time: false,
        }
    }

    /// Reads every line, until the text is full or the deadline passes, and writes what the
    /// open blocks hold.
    fn read_all(&mut self) {
        let mut index = 0;
        while index < self.lines.len() {
            if index % LINES_PER_DEADLINE_CHECK == 0 && self.deadline.passed() {
                self.out_of_time = true;
                break;
            }
            if self.builder.is_full() || self.cell_full {
                break;
            }
            index = self.line(index);
        }
        self.end();
    }

    /// Reads the line at `index` (and the lines a title spans); returns the next line's index.
    fn line(&mut self, index: usize) -> usize {
        let raw = self.lines[index];
        let number = index + 1;
        let (indent, content) = measure(raw);
        let blank = content.is_empty();
        if !blank {
            while self
                .stack
                .last()
                .is_some_and(|block| block.indent.is_some_and(|ends| indent <= ends))
            {
                self.flush_paragraph();
                self.pop();
            }
        }
        let is_border = content.starts_with('=') && adornment_with_gaps(content);
        let previous_is_border = self.previous_is_border(index);
        if let Some(block) = self.stack.last_mut() {
            if block.options {
                block.options = false;
                if !blank && is_field(content).is_some() {
                    block.options = true;
                    return index + 1;
                }
            }
            match &mut block.kind {
                Kind::Drop => return index + 1,
                Kind::Code | Kind::ListTable => {
                    block.lines.push((index, number));
                    return index + 1;
                }
                Kind::Table { simple, borders } => {
                    let ends = blank && (!*simple || *borders >= 2 && previous_is_border);
                    if ends {
                        self.pop();
                        return index + 1;
                    }
                    if is_border {
                        *borders += 1;
                    }
                    block.lines.push((index, number));
                    return index + 1;
                }
                Kind::Text { .. } => {}
            }
        }
        if let Some(base) = self.literal_after {
            if blank {
                return index + 1;
            }
            self.literal_after = None;
            if indent > base && self.push(Kind::Code, Some(base), false, number) {
                if let Some(block) = self.stack.last_mut() {
                    block.lines.push((index, number));
                }
                return index + 1;
            }
        }
        if blank {
            self.flush_paragraph();
            return index + 1;
        }
        let line = SourceLine {
            indent,
            content,
            number,
        };
        if !self.paragraph.is_empty() {
            if let Some(next) = self.underline(index, line) {
                return next;
            }
            self.paragraph.push(line);
            return index + 1;
        }
        if let Some(next) = self.overlined_title(index) {
            return next;
        }
        if self.stack.is_empty()
            && indent == 0
            && content.len() >= 4
            && adornment(content).is_some()
        {
            let next_blank = self
                .lines
                .get(index + 1)
                .is_none_or(|l| l.trim().is_empty());
            if next_blank {
                return index + 1; // a transition
            }
        }
        if content == ".." || content.starts_with(".. ") {
            self.explicit_markup(line);
            return index + 1;
        }
        let grid =
            (content.starts_with("+-") || content.starts_with("+=")) && content.ends_with('+');
        let simple = content.starts_with('=') && content.contains(' ') && is_border;
        if grid || simple {
            let kind = Kind::Table {
                simple,
                borders: usize::from(simple),
            };
            // A table ends at its blank line (a simple one at the blank after its last
            // border), or at a line indented less than it.
            let ends_below = indent.checked_sub(1);
            if self.push(kind, ends_below, false, number) {
                if let Some(block) = self.stack.last_mut() {
                    block.lines.push((index, number));
                }
                return index + 1;
            }
        }
        self.paragraph.push(line);
        index + 1
    }

    fn previous_is_border(&self, index: usize) -> bool {
        index > 0 && {
            let (_, content) = measure(self.lines[index - 1]);
            content.starts_with('=') && adornment_with_gaps(content)
        }
    }

    /// A one-line paragraph followed by an underline is a section title.
    fn underline(&mut self, index: usize, line: SourceLine<'t>) -> Option<usize> {
        let [title] = self.paragraph.as_slice() else {
            return None;
        };
        let title = *title;
        let mark = adornment(self.lines[index])?;
        let width = title.content.chars().count();
        let long_enough = line.content.len() >= width || line.content.len() >= 4;
        if !self.stack.is_empty() || title.indent != 0 || !long_enough {
            return None;
        }
        if adornment(title.content).is_some() {
            return None;
        }
        self.paragraph.clear();
        self.heading((mark, false), title.content, title.number);
        Some(index + 1)
    }

    /// An overline, a title and an underline of the same character.
    fn overlined_title(&mut self, index: usize) -> Option<usize> {
        if !self.stack.is_empty() {
            return None;
        }
        let mark = adornment(self.lines[index])?;
        let (_, title) = measure(self.lines.get(index + 1)?);
        let under = adornment(self.lines.get(index + 2)?)?;
        if under != mark || title.is_empty() || adornment(title).is_some() {
            return None;
        }
        self.heading((mark, true), title, index + 2);
        Some(index + 3)
    }

    fn heading(&mut self, style: (char, bool), title: &str, number: usize) {
        let level = match self.styles.iter().position(|s| *s == style) {
            Some(position) => position + 1,
            None => {
                self.styles.push(style);
                self.styles.len()
            }
        };
        self.literal_after = None;
        self.headings += 1;
        let level = u8::try_from(level).unwrap_or(u8::MAX);
        let title = inline(title, &mut self.substitutions);
        self.builder.heading(level, &title, super::line(number));
    }

    /// `..` at the start of a block: a directive, a target, a substitution, a footnote or a
    /// comment.
    fn explicit_markup(&mut self, line: SourceLine<'t>) {
        let rest = line.content.strip_prefix("..").unwrap_or("").trim_start();
        let next_is_blank = self
            .lines
            .get(line.number)
            .is_none_or(|next| next.trim().is_empty());
        if rest.is_empty() && next_is_blank {
            // An empty comment: it has ended the block or literal block before it (its line
            // is indented no deeper), and holds nothing, so an indented paragraph after it is
            // a block quote, read like any other (docutils: "a tiny but practical wart").
            return;
        }
        if rest.starts_with('|') || rest.starts_with('_') {
            self.push(Kind::Drop, Some(line.indent), false, line.number);
            return;
        }
        if let Some(label_end) = rest.strip_prefix('[').and_then(|r| r.find(']')) {
            let text = rest[label_end + 2..].trim();
            if self.push(
                Kind::Text { prefix: None },
                Some(line.indent),
                false,
                line.number,
            ) && !text.is_empty()
            {
                self.paragraph.push(SourceLine {
                    indent: line.indent + 3,
                    content: text,
                    number: line.number,
                });
            }
            return;
        }
        let Some((name, argument)) = directive(rest) else {
            self.push(Kind::Drop, Some(line.indent), false, line.number);
            return;
        };
        let (mut kind, paragraph) = directive_kind(name, argument, &mut self.substitutions);
        if kind == Kind::ListTable && self.table_depth >= MAX_TABLE_NESTING {
            self.tables_too_deep = true;
            kind = Kind::Text { prefix: None };
        }
        let lead = if argument_is_text(name) {
            argument.trim()
        } else {
            version_text(name, argument)
        };
        let options = kind != Kind::Drop;
        if let Some(paragraph) = paragraph {
            self.builder.paragraph(&paragraph, super::line(line.number));
            self.body_started = true;
        }
        if !self.push(kind, Some(line.indent), options, line.number) {
            return;
        }
        if !lead.is_empty() {
            self.paragraph.push(SourceLine {
                indent: line.indent + 3,
                content: lead,
                number: line.number,
            });
        }
    }

    /// Enters a block, unless the stack is at the depth limit (then its lines are read as
    /// the text around them). Returns whether it entered.
    fn push(&mut self, kind: Kind, indent: Option<usize>, options: bool, number: usize) -> bool {
        self.flush_paragraph();
        if self.stack.len() >= self.max_depth {
            self.too_deep = true;
            return false;
        }
        if !matches!(kind, Kind::Drop) {
            self.emit_pending_prefix();
        }
        self.stack.push(Block {
            kind,
            indent,
            options,
            lines: Vec::new(),
            at: number,
        });
        true
    }

    /// A text block whose prefix has not begun a paragraph yet, before a code block inside it:
    /// the prefix stands alone.
    fn emit_pending_prefix(&mut self) {
        let Some(block) = self.stack.last_mut() else {
            return;
        };
        let at = block.at;
        if let Kind::Text { prefix } = &mut block.kind
            && let Some(prefix) = prefix.take()
        {
            self.builder.paragraph(&prefix, super::line(at));
        }
    }

    /// Leaves the innermost block, writing what it held.
    fn pop(&mut self) {
        let Some(block) = self.stack.pop() else {
            return;
        };
        match block.kind {
            Kind::Code | Kind::Table { .. } => {
                let lines: Vec<(&str, Location)> = block
                    .lines
                    .iter()
                    .map(|&(index, number)| (self.lines[index], super::line(number)))
                    .collect();
                let margin = lines
                    .iter()
                    .filter(|(line, _)| !line.trim().is_empty())
                    .map(|(line, _)| line.len() - line.trim_start_matches([' ', '\t']).len())
                    .min()
                    .unwrap_or(0);
                self.builder.block_lines(lines.iter().map(|(line, at)| {
                    let cut = margin.min(line.len() - line.trim_start_matches([' ', '\t']).len());
                    (&line[cut..], *at)
                }));
                self.body_started = true;
            }
            Kind::ListTable => {
                self.list_table(&block.lines);
                self.body_started = true;
            }
            Kind::Text {
                prefix: Some(prefix),
            } => {
                self.builder.paragraph(&prefix, super::line(block.at));
                self.body_started = true;
            }
            Kind::Text { prefix: None } | Kind::Drop => {}
        }
    }

    /// A list table's body (`* - a` then `  - b` …): each row one line, its cells' text
    /// joined by " | ", at the lines the row spans; the table one unit. A row is a line at the
    /// body's margin (its bullet dropped) and the lines below it; a cell begins at the row's
    /// first cell bullet, or at a line indented no deeper than that bullet. Each line is looked
    /// at once here, and once more by its cell's reader.
    fn list_table(&mut self, body: &[(usize, usize)]) {
        let lines = self.lines;
        let mut rows: Vec<(String, Location)> = Vec::new();
        let mut row: Option<TableRow<'t>> = None;
        let mut margin = None;
        for (seen, &(index, number)) in body.iter().enumerate() {
            if seen % LINES_PER_DEADLINE_CHECK == 0 && self.deadline.passed() {
                self.out_of_time = true;
                break;
            }
            let raw = lines[index];
            let (indent, content) = measure(raw);
            if content.is_empty() {
                if let Some(cell) = row.as_mut().and_then(|row| row.cell.as_mut()) {
                    cell.1.push("");
                }
                continue;
            }
            let margin = *margin.get_or_insert(indent);
            let Some(current) = row.as_mut().filter(|_| indent > margin) else {
                if let Some(done) = row.take() {
                    self.finish_row(done, &mut rows);
                }
                let mut next = TableRow {
                    first: number,
                    last: number,
                    column: None,
                    cells: Vec::new(),
                    cell: None,
                };
                let offset = bullet_text_offset(content).unwrap_or(0);
                if offset < content.len() {
                    let column = indent + content[..offset].chars().count();
                    self.start_cell(&mut next, column, &content[offset..]);
                }
                row = Some(next);
                continue;
            };
            current.last = number;
            match current.column {
                Some(column) if indent > column => {
                    if let Some(cell) = current.cell.as_mut() {
                        cell.1.push(raw);
                    }
                }
                _ => self.start_cell(current, indent, content),
            }
        }
        if let Some(done) = row.take() {
            self.finish_row(done, &mut rows);
        }
        self.builder
            .block_lines(rows.iter().map(|(text, at)| (text.as_str(), *at)));
    }

    /// Ends the row's open cell and begins one whose text (its bullet, if any, dropped) is
    /// `content`, at `column`.
    fn start_cell(&mut self, row: &mut TableRow<'t>, column: usize, content: &'t str) {
        self.end_cell(row);
        row.column.get_or_insert(column);
        let offset = bullet_text_offset(content).unwrap_or(0);
        // The cell's first line keeps its text's column, so the lines below it keep their
        // indentation relative to it (a literal block after `- text::`).
        let column = column + content[..offset].chars().count();
        let first = format!("{}{}", " ".repeat(column), &content[offset..]);
        row.cell = Some((first, Vec::new()));
    }

    fn end_cell(&mut self, row: &mut TableRow<'t>) {
        if let Some((first, rest)) = row.cell.take() {
            let text = self.read_cell(&first, &rest);
            row.cells.push(text);
        }
    }

    fn finish_row(&mut self, mut row: TableRow<'t>, rows: &mut Vec<(String, Location)>) {
        self.end_cell(&mut row);
        let text = fold_space(&row.cells.join(" | "));
        if !text.is_empty() {
            rows.push((text, super::lines(row.first, row.last)));
        }
    }

    /// A table cell's text: its lines read as rST by a reader of their own (sharing this
    /// one's substitutions and deadline, nested no deeper than this reader may still go), its
    /// white space folded onto one line.
    fn read_cell(&mut self, first: &str, rest: &[&str]) -> String {
        let (_, content) = measure(first);
        let one_line = rest.iter().all(|line| line.trim().is_empty());
        let plain_text = !content.starts_with(['.', '>', '+', '=']) && !content.ends_with("::");
        if one_line && plain_text {
            // What a reader would make of a one-line paragraph, without starting one: most
            // cells are a word or two, and a table may have a million.
            return fold_space(&inline(content, &mut self.substitutions));
        }
        let mut lines: Vec<&str> = Vec::with_capacity(rest.len() + 1);
        lines.push(first);
        lines.extend_from_slice(rest);
        let limits = Limits {
            max_depth: self.max_depth.saturating_sub(self.stack.len() + 1),
            ..self.limits.clone()
        };
        let substitutions = std::mem::take(&mut self.substitutions);
        let mut cell = Reader::new(&limits, &lines, substitutions, self.deadline);
        cell.table_depth = self.table_depth + 1;
        cell.body_started = true;
        cell.read_all();
        self.substitutions = std::mem::take(&mut cell.substitutions);
        self.too_deep |= cell.too_deep;
        self.tables_too_deep |= cell.tables_too_deep;
        self.out_of_time |= cell.out_of_time;
        self.cell_full |= cell.cell_full || cell.builder.is_full();
        let text = std::mem::take(&mut cell.builder)
            .finish(Meta::default(), Vec::new())
            .text;
        fold_space(&text)
    }

    /// Writes the gathered paragraph: one unit, a line per list item, field or term.
    fn flush_paragraph(&mut self) {
        if self.paragraph.is_empty() {
            return;
        }
        let mut lines = std::mem::take(&mut self.paragraph);
        let base = lines[0].indent;
        if lines[0].content.starts_with(">>>") {
            self.builder.block_lines(
                lines
                    .iter()
                    .map(|line| (line.content, super::line(line.number))),
            );
            self.body_started = true;
            return;
        }
        let mut literal_text = None;
        if let Some(last) = lines.last_mut()
            && let Some(before) = last.content.strip_suffix("::")
        {
            // The literal block is indented past the text of the paragraph: in a list item
            // that begins on this line, past the item's marker (`* text::` → column 2), so a
            // line back at the item's text (an empty comment, the next paragraph) ends it.
            let marker = item_text_offset(last.content)
                .map_or(0, |offset| last.content[..offset].chars().count());
            self.literal_after = Some(last.indent + marker);
            literal_text = Some(if before.is_empty() || before.ends_with(' ') {
                before.trim_end().to_string()
            } else {
                format!("{before}:")
            });
        }
        if self.is_metadata(&lines) {
            for line in &lines {
                if let Some((name, value)) = is_field(line.content) {
                    let name = name.to_lowercase();
                    let value = fold_space(&inline(value, &mut self.substitutions));
                    if name == "tags" || name == "keywords" {
                        self.meta.tags.extend(
                            value
                                .split(',')
                                .map(|tag| tag.trim().to_lowercase())
                                .filter(|tag| !tag.is_empty()),
                        );
                    }
                    self.meta.fields.insert(name, value);
                }
            }
            return;
        }
        let count = lines.len();
        let mut items: Vec<(String, Location)> = Vec::new();
        let mut item = String::new();
        let mut first = 0;
        let mut last = 0;
        let mut previous_indent = base;
        for (position, line) in lines.iter().enumerate() {
            let content = if position + 1 == count {
                literal_text.as_deref().unwrap_or(line.content)
            } else {
                line.content
            };
            let begins = position == 0
                || line.indent <= base && (starts_item(line.content) || previous_indent > base);
            if begins && !item.is_empty() {
                push_item(&mut items, &item, first, last, &mut self.substitutions);
                item.clear();
            }
            if item.is_empty() {
                first = line.number;
            }
            if !item.is_empty() {
                item.push(' ');
            }
            item.push_str(content);
            last = line.number;
            previous_indent = line.indent;
        }
        push_item(&mut items, &item, first, last, &mut self.substitutions);
        if items.is_empty() {
            return;
        }
        if let Some(block) = self.stack.last_mut()
            && let Kind::Text { prefix } = &mut block.kind
            && let Some(prefix) = prefix.take()
        {
            items[0].0 = format!("{prefix}: {}", items[0].0);
        }
        self.body_started = true;
        match items.as_slice() {
            [(text, at)] => self.builder.paragraph(text, *at),
            _ => self
                .builder
                .block_lines(items.iter().map(|(text, at)| (text.as_str(), *at))),
        }
    }

    /// A field list before any body text (and at the top level) is the document's metadata.
    fn is_metadata(&self, lines: &[SourceLine]) -> bool {
        !self.body_started
            && self.headings <= 1
            && self.stack.is_empty()
            && lines[0].indent == 0
            && lines
                .iter()
                .all(|line| line.indent > 0 || is_field(line.content).is_some())
    }

    fn end(&mut self) {
        self.flush_paragraph();
        while !self.stack.is_empty() {
            self.pop();
            self.flush_paragraph();
        }
    }
}

fn push_item(
    items: &mut Vec<(String, Location)>,
    item: &str,
    first: usize,
    last: usize,
    substitutions: &mut Substitutions,
) {
    let text = fold_space(&inline(item, substitutions));
    if !text.is_empty() {
        items.push((text, super::lines(first, last)));
    }
}

/// A simple table's border: runs of one punctuation character separated by spaces.
fn adornment_with_gaps(content: &str) -> bool {
    let Some(mark) = content.chars().next() else {
        return false;
    };
    mark.is_ascii_punctuation() && content.chars().all(|c| c == mark || c == ' ')
}

/// `name:: argument` after `.. `: the directive's name and argument.
fn directive(rest: &str) -> Option<(&str, &str)> {
    let end = rest.find("::")?;
    let name = &rest[..end];
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ':' | '.' | '+'));
    valid.then(|| (name, &rest[end + 2..]))
}

// ---------------------------------------------------------------------------------------------
// Inline markup.

/// `text` with roles, hyperlink references and footnote references replaced by the text a
/// reader sees; literals and everything else as written. One pass: each backtick is looked at
/// once, and an unmatched one ends the search.
fn inline(text: &str, substitutions: &mut Substitutions) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(tick) = rest.find('`') {
        let at = text.len() - rest.len();
        plain(text, at..at + tick, substitutions, &mut out);
        let after_tick = &rest[tick..];
        if let Some(literal) = after_tick.strip_prefix("``") {
            match literal.find("``") {
                Some(end) => {
                    out.push_str(&after_tick[..end + 4]);
                    rest = &literal[end + 2..];
                    continue;
                }
                None => {
                    out.push_str(after_tick);
                    return out;
                }
            }
        }
        let inner = &after_tick[1..];
        if inner.starts_with(char::is_whitespace) || inner.is_empty() {
            // Not the start of inline markup: a backtick before a space is a backtick.
            out.push('`');
            rest = inner;
            continue;
        }
        let Some(end) = inner.find('`') else {
            out.push_str(after_tick);
            return out;
        };
        let content = &inner[..end];
        let role = take_role(&mut out);
        let mut after = &inner[end + 1..];
        if let Some(stripped) = after.strip_prefix("__") {
            after = stripped;
        } else if let Some(stripped) = after.strip_prefix('_') {
            after = stripped;
        } else if let Some(length) = role_at_start(after) {
            after = &after[length..];
        }
        out.push_str(&role_text(content, role.as_deref()));
        rest = after;
    }
    plain(
        text,
        text.len() - rest.len()..text.len(),
        substitutions,
        &mut out,
    );
    out
}

/// Copies `text[range]`, text outside literals and roles, to `out`: each substitution
/// reference (`|name|`, `|name|_`, `|name|__`) the file defines replaced by its text, the rest
/// as `references` shows it. A reference is a `|` after white space, an opening bracket or
/// quote, or the start, with no space after it, and the first `|` after that with no space
/// before it and white space, punctuation or the end after it (and its underscores), as
/// docutils finds them; `||` is no reference. When a `|` finds no end, no later one can, so
/// the search stops: one pass.
fn plain(text: &str, range: Range<usize>, substitutions: &mut Substitutions, out: &mut String) {
    let mut copied = range.start;
    let mut from = range.start;
    while !substitutions.is_empty()
        && let Some(found) = text[from..range.end].find('|')
    {
        let start = from + found;
        from = start + 1;
        if !opens_substitution(text, start) {
            continue;
        }
        let Some((name_end, end)) = substitution_end(text, start + 2..range.end) else {
            break;
        };
        from = end;
        if let Some(replacement) =
            substitutions.replacement(&text[start + 1..name_end], end - start)
        {
            references(&text[copied..start], out);
            out.push_str(replacement);
            copied = end;
        }
    }
    references(&text[copied..range.end], out);
}

/// Whether the `|` at `at` may open a substitution reference: after the start, white space or
/// an opening bracket, quote or delimiter, and before a character that is neither white space
/// nor `|`.
fn opens_substitution(text: &str, at: usize) -> bool {
    let before = text[..at].chars().next_back();
    let after = text[at + 1..].chars().next();
    let opens = before.is_none_or(|c| {
        c.is_whitespace() || matches!(c, '-' | ':' | '/' | '\'' | '"' | '<' | '(' | '[' | '{')
    });
    opens && after.is_some_and(|c| !c.is_whitespace() && c != '|')
}

/// The first `|` in `text[range]` that can close a substitution reference: after a character
/// that is not white space, and (after `_` or `__`) before white space, punctuation or the end.
/// Returns where the name ends and where the reference (with its underscores) ends.
fn substitution_end(text: &str, range: Range<usize>) -> Option<(usize, usize)> {
    let mut from = range.start;
    while from < range.end {
        let bar = from + text.get(from..range.end)?.find('|')?;
        from = bar + 1;
        if text[..bar].ends_with(char::is_whitespace) {
            continue;
        }
        let underscores = text[bar + 1..]
            .bytes()
            .take(2)
            .take_while(|b| *b == b'_')
            .count();
        let end = bar + 1 + underscores;
        let closes = text[end..].chars().next().is_none_or(|c| {
            c.is_whitespace()
                || matches!(
                    c,
                    '-' | '.'
                        | ','
                        | ':'
                        | ';'
                        | '!'
                        | '?'
                        | '\\'
                        | '/'
                        | '\''
                        | '"'
                        | ')'
                        | ']'
                        | '}'
                        | '>'
                )
        });
        if closes {
            return Some((bar, end));
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Substitutions.

/// The file's substitution definitions (`.. |name| replace:: text`), found by a first pass
/// before the text is read, and how many more bytes their replacements may add to the text.
#[derive(Debug, Default)]
struct Substitutions {
    /// By name with its white space folded, as written, and lower-cased: docutils looks a
    /// reference up as written first, then in any case.
    exact: HashMap<String, String>,
    any_case: HashMap<String, String>,
    /// What replacements may still add (a replacement longer than its reference adds the
    /// difference); it starts at the file's size.
    budget: usize,
    /// Whether a reference was left as written because the budget was spent.
    over_budget: bool,
}

impl Substitutions {
    /// The definitions on the lines that start with `.. |` (at the margin: a definition shown
    /// in an indented literal block is no definition), each replacement's text with its roles
    /// resolved and its own references left as written. The first definition of a name wins.
    fn find(lines: &[&str], budget: usize, deadline: &Deadline) -> Substitutions {
        let mut found = Substitutions {
            budget,
            ..Substitutions::default()
        };
        let mut index = 0;
        while index < lines.len() {
            if index % LINES_PER_DEADLINE_CHECK == 0 && deadline.passed() {
                break;
            }
            let line = lines[index];
            index += 1;
            let Some((name, first)) = line.strip_prefix(".. |").and_then(replace_definition) else {
                continue;
            };
            // Its text goes on over the indented lines below it, to a blank line.
            let mut replacement = first.to_string();
            while let Some(next) = lines.get(index) {
                let (indent, content) = measure(next);
                if indent == 0 || content.is_empty() {
                    break;
                }
                replacement.push(' ');
                replacement.push_str(content);
                index += 1;
            }
            let replacement = fold_space(&inline(&replacement, &mut Substitutions::default()));
            let name = fold_space(name);
            found
                .any_case
                .entry(name.to_lowercase())
                .or_insert_with(|| replacement.clone());
            found.exact.entry(name).or_insert(replacement);
        }
        found
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty()
    }

    /// The text of the substitution `name` written in `written` bytes, when the file defines it
    /// and the budget has room for what it adds.
    fn replacement(&mut self, name: &str, written: usize) -> Option<&str> {
        let Substitutions {
            exact,
            any_case,
            budget,
            over_budget,
        } = self;
        // As written first: most names are one word, and this asks for no allocation.
        let text = match exact.get(name) {
            Some(text) => text,
            None => {
                let name = fold_space(name);
                match exact.get(&name) {
                    Some(text) => text,
                    None => any_case.get(&name.to_lowercase())?,
                }
            }
        };
        let adds = text.len().saturating_sub(written);
        if adds > *budget {
            *over_budget = true;
            return None;
        }
        *budget -= adds;
        Some(text)
    }
}

/// The name and the first line's text of `|name| replace:: text`, after its `.. |`.
fn replace_definition(rest: &str) -> Option<(&str, &str)> {
    let end = rest.find('|')?;
    let name = &rest[..end];
    let after = &rest[end + 1..];
    let valid = !name.is_empty()
        && !name.starts_with(char::is_whitespace)
        && !name.ends_with(char::is_whitespace)
        && after.starts_with(char::is_whitespace);
    if !valid {
        return None;
    }
    let (directive_name, text) = directive(after.trim_start())?;
    directive_name
        .eq_ignore_ascii_case("replace")
        .then(|| (name, text.trim()))
}

/// The text a role or reference shows: a title before `<target>`, else the target, without the
/// `~`, `!` and leading `.` markers (`.Session` is Sphinx's "find it in any module").
fn role_text(content: &str, _role: Option<&str>) -> String {
    let content = content.trim();
    if let Some(open) = content.rfind('<')
        && content.ends_with('>')
    {
        let title = content[..open].trim();
        if !title.is_empty() {
            return title.to_string();
        }
        return content[open + 1..content.len() - 1].trim().to_string();
    }
    content.trim_start_matches(['~', '!', '.']).to_string()
}

fn is_role_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '+' | '-' | ':')
}

/// Removes a `:role:` that ends `out` (just before a backtick) and returns its name.
fn take_role(out: &mut String) -> Option<String> {
    if !out.ends_with(':') {
        return None;
    }
    let tail_start = out
        .char_indices()
        .rev()
        .take(MAX_ROLE_CHARS)
        .take_while(|(_, c)| is_role_char(*c))
        .last()
        .map(|(at, _)| at)?;
    let tail = &out[tail_start..];
    let colon = tail.find(':')?;
    let role = &tail[colon..];
    if role.len() < 3 {
        return None;
    }
    let name = role[1..role.len() - 1].to_string();
    out.truncate(tail_start + colon);
    Some(name)
}

/// The length of a `:role:` at the start of `text` (a role written after its text).
fn role_at_start(text: &str) -> Option<usize> {
    let rest = text.strip_prefix(':')?;
    let end = rest
        .char_indices()
        .take(MAX_ROLE_CHARS)
        .find(|(_, c)| !is_role_char(*c) || *c == ':')
        .map(|(at, _)| at)?;
    (end > 0 && rest[end..].starts_with(':')).then_some(end + 2)
}

/// Copies `text` to `out`, with `word_` and `word__` references shown as `word` and footnote
/// references `[1]_`, `[#note]_` dropped.
fn references(text: &str, out: &mut String) {
    let mut word_start: Option<usize> = None;
    let mut chars = text.char_indices().peekable();
    let mut copied = 0;
    while let Some((at, c)) = chars.next() {
        if c == '_' {
            let word_ok = word_start.is_some_and(|start| !text[start..].starts_with('_'));
            let next = text[at + 1..].strip_prefix('_').unwrap_or(&text[at + 1..]);
            let ends = next.chars().next().is_none_or(|n| {
                n.is_whitespace()
                    || matches!(n, '.' | ',' | ';' | ':' | '!' | '?' | ')' | '\'' | '"')
            });
            let underscores = text.len() - next.len() - at;
            if ends && word_ok && text[..at].ends_with(|p: char| p.is_alphanumeric()) {
                out.push_str(&text[copied..at]);
                copied = at + underscores;
                for _ in 1..underscores {
                    chars.next();
                }
                word_start = None;
                continue;
            }
            if ends
                && text[..at].ends_with(']')
                && let Some(open) = text[copied..at].rfind('[')
            {
                let label = &text[copied + open + 1..at - 1];
                if !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_alphanumeric() || matches!(c, '#' | '*' | '-' | '_'))
                {
                    let cut = copied + open;
                    out.push_str(text[copied..cut].trim_end());
                    copied = at + underscores;
                    word_start = None;
                    continue;
                }
            }
        }
        if c.is_alphanumeric() || matches!(c, '_' | '.' | '-') {
            word_start.get_or_insert(at);
        } else {
            word_start = None;
        }
    }
    out.push_str(&text[copied..]);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{lines_of, units};
    use super::super::{Deadline, Extracted, Limits};
    use super::{Substitutions, extract};

    /// Inline markup read in a file that defines no substitutions.
    fn inline(text: &str) -> String {
        super::inline(text, &mut Substitutions::default())
    }

    fn read(text: &str) -> Extracted {
        read_with(text, &Limits::default())
    }

    fn read_with(text: &str, limits: &Limits) -> Extracted {
        extract(text, limits, &Deadline::after(limits.time))
    }

    #[test]
    fn title_levels_follow_first_appearance_of_each_style() {
        let text = "=========\nThe Title\n=========\n\nIntro text\nover two lines.\n\n\
            Section A\n---------\n\nBody A.\n\nSub\n~~~\n\nBody sub.\n\nSection B\n---------\n\n\
            Short\n=====\n\nA line\n\n----\n\nAfter the transition.\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "H1 The Title",
                "Intro text over two lines.",
                "H2 Section A",
                "Body A.",
                "H3 Sub",
                "Body sub.",
                "H2 Section B",
                "H4 Short",
                "A line",
                "After the transition."
            ]
        );
        assert_eq!(lines_of(&extracted, "The Title"), (2, 2));
        assert_eq!(lines_of(&extracted, "Intro text"), (5, 6));
        assert_eq!(lines_of(&extracted, "Sub"), (13, 13));
        assert!(extracted.warnings.is_empty(), "{:?}", extracted.warnings);
    }

    #[test]
    fn an_underline_shorter_than_three_is_text() {
        let extracted = read("Long title here\n--\n\nbody\n");
        assert_eq!(units(&extracted), ["Long title here --", "body"]);
    }

    #[test]
    fn code_directives_and_literal_blocks_keep_their_lines() {
        let text = "Title\n=====\n\nExample::\n\n    x = 1\n\n    if x:\n        y()\n\n\
            Expanded form ::\n\n  a\n\n::\n\n  b\n\n.. sourcecode:: python+sql\n    \
            :linenos:\n\n    >>> select(User)\n    SELECT ...\n\nAfter.\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "H1 Title",
                "Example:",
                "x = 1\n\nif x:\n    y()",
                "Expanded form",
                "a",
                "b",
                ">>> select(User)\nSELECT ...",
                "After."
            ]
        );
        assert_eq!(lines_of(&extracted, "y()"), (9, 9));
        assert_eq!(lines_of(&extracted, "SELECT"), (23, 23));
        assert!(!extracted.text.contains("linenos"));
    }

    #[test]
    fn admonitions_begin_with_their_word_and_dropped_directives_leave_nothing() {
        let text = ".. note:: Read this\n   first.\n\n   Second paragraph.\n\n\
            .. versionadded:: 1.4 The thing.\n\n.. deprecated:: 2.0\n\n\
            .. seealso::\n\n    :ref:`the guide <guide_label>`\n\n\
            .. admonition:: Custom Title\n\n   Body.\n\n\
            .. toctree::\n   :maxdepth: 2\n\n   intro\n   tutorial\n\n\
            .. image:: pic.png\n   :alt: words\n\n.. include:: other.rst\n\n\
            .. _label:\n\n.. |sub| replace:: gone\n\n.. a comment\n   spanning lines\n\n\
            .. figure:: fig.png\n   :width: 10\n\n   The caption.\n\n\
            .. change::\n    :tags: orm, bug\n    :tickets: 123\n\n    Fixed a thing.\n\nEnd.\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "Note: Read this first.",
                "Second paragraph.",
                "New in version 1.4: The thing.",
                "Deprecated since version 2.0",
                "See also: the guide",
                "Custom Title: Body.",
                "The caption.",
                "Fixed a thing.",
                "End."
            ]
        );
        assert_eq!(lines_of(&extracted, "Read this"), (1, 2));
    }

    #[test]
    fn object_descriptions_keep_their_names() {
        let text = ".. autoclass:: sqlalchemy.orm.Session\n   :members:\n\n   The session.\n\n\
            .. function:: connect(url, **kw)\n\n   Connects.\n\n\
            .. py:method:: Query.all()\n\n.. currentmodule:: sqlalchemy.orm\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "sqlalchemy.orm.Session",
                "The session.",
                "connect(url, **kw)",
                "Connects.",
                "Query.all()"
            ]
        );
        assert_eq!(lines_of(&extracted, "orm.Session"), (1, 1));
    }

    #[test]
    fn roles_and_references_show_their_text() {
        assert_eq!(inline(":func:`create_engine`"), "create_engine");
        assert_eq!(
            inline("a :class:`~sqlalchemy.orm.Session` b"),
            "a sqlalchemy.orm.Session b"
        );
        assert_eq!(inline(":py:meth:`.Session.add`"), "Session.add");
        assert_eq!(
            inline("see :ref:`the tutorial <tut>`."),
            "see the tutorial."
        );
        assert_eq!(inline(":doc:`orm/quickstart`"), "orm/quickstart");
        assert_eq!(
            inline("`Python <https://python.org>`_ rocks"),
            "Python rocks"
        );
        assert_eq!(
            inline("`anonymous <x>`__ and `plain`_"),
            "anonymous and plain"
        );
        assert_eq!(
            inline("read docutils_ and foo__."),
            "read docutils and foo."
        );
        assert_eq!(inline("a footnote [1]_ here"), "a footnote here");
        assert_eq!(
            inline("``literal :func:`x` stays``"),
            "``literal :func:`x` stays``"
        );
        assert_eq!(
            inline("__init__ and my_var stay"),
            "__init__ and my_var stay"
        );
        assert_eq!(inline("*emph* **strong** |sub|"), "*emph* **strong** |sub|");
        assert_eq!(inline("unmatched ` tick and ``"), "unmatched ` tick and ``");
    }

    #[test]
    fn lists_tables_and_definitions_are_lines_of_a_block() {
        let text = "* one\n  continued\n* two\n\n1. first\n2. second\n\nterm\n    its \
            definition\nother term\n    other definition\n\n+---+---+\n| a | b |\n+===+===+\n\
            | 1 | 2 |\n+---+---+\n\n=====  =====\nA      B\n=====  =====\n1      2\n\n3      4\n\
            =====  =====\n\nAfter.\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "* one continued\n* two",
                "1. first\n2. second",
                "term its definition\nother term other definition",
                "+---+---+\n| a | b |\n+===+===+\n| 1 | 2 |\n+---+---+",
                "=====  =====\nA      B\n=====  =====\n1      2\n\n3      4\n=====  =====",
                "After."
            ]
        );
        assert_eq!(lines_of(&extracted, "* two"), (3, 3));
        assert_eq!(lines_of(&extracted, "other term"), (10, 11));
    }

    #[test]
    fn an_empty_comment_holds_nothing_and_ends_a_literal_block_in_a_list_item() {
        let text = "* :meth:`ops.eq` (the ``==`` operator)::\n\n    >>> print(x == 5)\n    \
            x = :x_1\n\n  ..\n\n\n  Note that a :class:`types.String` makes \
            :meth:`ops.add`\n  concatenate.\n\n* :meth:`ops.ne`\n\n..\n\n   A quoted \
            :class:`Quote` paragraph.\n\n..\n   a real comment\n   :class:`Gone`\n\nEnd.\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "* ops.eq (the ``==`` operator):",
                ">>> print(x == 5)\nx = :x_1",
                "Note that a types.String makes ops.add concatenate.",
                "* ops.ne",
                "A quoted Quote paragraph.",
                "End."
            ]
        );
        assert_eq!(lines_of(&extracted, "Note that"), (9, 10));
        assert!(!extracted.text.contains(".."), "{:?}", extracted.text);
        // A literal block indented past the item's text is still one.
        let indented = read("1. Example::\n\n      code here\n\n   After.\n");
        assert_eq!(units(&indented), ["1. Example:", "code here", "After."]);
    }

    #[test]
    fn list_table_rows_are_lines_of_their_cells() {
        let text = ".. list-table:: **Querying** patterns\n   :header-rows: 1\n   \
            :widths: 10 20\n\n   * - :term:`1.x style` form\n     - :term:`2.0 style` form\n     \
            - See Also\n\n   * - ::\n\n           session.query(User).get(42)\n\n     \
            - Example::\n\n           session.get(\n             User, 42)\n\n       Then \
            :meth:`.Session.get`.\n     -\n   * - .. note:: Inside\n     - ``x``\n\nAfter.\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "**Querying** patterns",
                "1.x style form | 2.0 style form | See Also\n\
                 session.query(User).get(42) | Example: session.get( User, 42) Then \
                 Session.get. |\n\
                 Note: Inside | ``x``",
                "After."
            ]
        );
        assert_eq!(lines_of(&extracted, "2.0 style"), (5, 7));
        assert_eq!(lines_of(&extracted, "query(User)"), (9, 19));
        assert!(!extracted.text.contains("header-rows"));
        assert!(extracted.warnings.is_empty(), "{:?}", extracted.warnings);
    }

    #[test]
    fn list_tables_nest_in_cells_up_to_their_limit() {
        let mut text = String::new();
        let depth = super::MAX_TABLE_NESTING + 3;
        for level in 0..depth {
            // Each table in the last cell of the one before: its `..` at that cell's text.
            let indent = " ".repeat(level * 6);
            text.push_str(&format!(
                ".. list-table::\n\n{indent}  * - cell{level}\n{indent}    - "
            ));
        }
        text.push_str("innermost\n");
        let extracted = read(&text);
        assert!(
            extracted.text.starts_with("cell0 | cell1 | cell2"),
            "{:?}",
            extracted.text
        );
        assert!(extracted.text.contains("innermost"));
        let limit = format!("deeper than {}", super::MAX_TABLE_NESTING);
        assert!(
            extracted.warnings.iter().any(|w| w.contains(&limit)),
            "{:?}",
            extracted.warnings
        );
        let within = read(
            ".. list-table::\n\n  * - a\n    - .. list-table::\n\n        \
            * - b\n          - c\n",
        );
        assert_eq!(units(&within), ["a | b | c"]);
        assert!(within.warnings.is_empty(), "{:?}", within.warnings);
    }

    #[test]
    fn substitutions_defined_in_the_file_are_replaced_once() {
        let text = ".. |prev| replace:: :doc:`select`\n\n.. topic:: |title|\n\n   Previous: \
            |prev|   |   Next: |next|_ and ``|prev|`` and |Prev|.\n\n.. |title| replace:: ORM\n   \
            Querying Guide\n.. |loop| replace:: |loop| and |prev|\n.. |pic| image:: p.png\n\n\
            Again |loop|, |pic|, a||b, x |prev|y.\n";
        let extracted = read(text);
        assert_eq!(
            units(&extracted),
            [
                "ORM Querying Guide: Previous: select | Next: |next|_ and ``|prev|`` and select.",
                "Again |loop| and |prev|, |pic|, a||b, x |prev|y."
            ]
        );
        assert!(extracted.warnings.is_empty(), "{:?}", extracted.warnings);
    }

    #[test]
    fn substitutions_add_at_most_the_files_size() {
        let long = "word ".repeat(200);
        let mut text = format!(".. |big| replace:: {long}\n\n");
        text.push_str(&"|big| ".repeat(2_000));
        text.push('\n');
        let extracted = read(&text);
        assert!(
            extracted.text.len() <= 2 * text.len(),
            "{} bytes of text from {}",
            extracted.text.len(),
            text.len()
        );
        let replaced = extracted.text.matches(long.trim()).count();
        assert!(replaced > 10 && replaced < 2_000, "{replaced}");
        assert!(extracted.text.contains("|big|"));
        assert!(
            extracted.warnings.iter().any(|w| w.contains("own size")),
            "{:?}",
            extracted.warnings
        );
    }

    #[test]
    fn a_field_list_at_the_top_is_metadata() {
        let text = ":orphan:\n:tags: ORM, Core, orm\n:author: Someone\n  Else\n\nTitle\n=====\n\n\
            :not: metadata\n";
        let extracted = read(text);
        assert_eq!(extracted.meta.tags, ["core", "orm"]);
        assert_eq!(extracted.meta.fields["author"], "Someone");
        assert_eq!(extracted.meta.fields["orphan"], "");
        assert_eq!(units(&extracted), ["H1 Title"]);

        let body_first = read("Text first.\n\n:tags: x\n");
        assert!(body_first.meta.tags.is_empty());
        assert_eq!(units(&body_first), ["Text first.", ":tags: x"]);
    }

    #[test]
    fn nesting_past_the_limit_is_read_as_text_and_named() {
        let limits = Limits {
            max_depth: 4,
            ..Limits::default()
        };
        let mut text = String::new();
        for depth in 0..20 {
            text.push_str(&format!("{}.. note::\n\n", " ".repeat(depth * 3)));
        }
        text.push_str(&format!("{}deep words\n", " ".repeat(60)));
        let extracted = read_with(&text, &limits);
        assert!(
            extracted.text.contains("deep words"),
            "{:?}",
            extracted.text
        );
        assert_eq!(extracted.warnings.len(), 1, "{:?}", extracted.warnings);
        assert!(extracted.warnings[0].contains("deeper than 4"));
    }

    #[test]
    fn the_text_limit_and_the_deadline_stop_reading_with_a_warning() {
        let text = "Some words in a paragraph.\n\n".repeat(1000);
        let small = Limits {
            max_text_bytes: 100,
            ..Limits::default()
        };
        let extracted = read_with(&text, &small);
        assert!(extracted.text.len() <= 100);
        assert!(extracted.warnings[0].contains("over 100 bytes"));
        let no_time = Limits {
            time: Duration::ZERO,
            ..Limits::default()
        };
        let extracted = read_with(&text, &no_time);
        assert!(extracted.text.is_empty());
        assert!(extracted.warnings[0].contains("the rest is left out"));
    }
}
