//! Extraction: a document file's bytes in, the text the chunker cuts and its structure out.
//!
//! Each format has one extractor, in a file of its own, that turns bytes into an `Extracted`:
//! the text passages are slices of, how to find its units (Markdown syntax, blank-line
//! paragraphs, or the headings and blocks the extractor found), metadata found outside the
//! text (an HTML `<meta>`, an rST field list), and where each line of the text is in the file
//! (a line of the source, or a line of a PDF page's text). The chunker (`chunk`) then cuts every
//! format the same way, so identity, packing and the crash protocol know nothing of formats.
//!
//! Markdown and plain text are their own text (the file's lines are the text's lines). The
//! other formats build a text with `TextBuilder`. Every extractor is bounded: by the input's
//! size (the walk's `--max-file-size`), by `Limits::max_depth` for nesting, by
//! `Limits::max_text_bytes` for what it writes, and by a deadline it checks as it goes. The PDF
//! extractor, a third-party parser, runs in a child process with memory and CPU limits
//! (`isolate`), so nothing a PDF does can take the run down.
//!
//! Extraction fails (`Err`, with a reason) only when the file cannot be read as its format at
//! all: an encrypted PDF, a notebook that is not JSON. Odd input otherwise gives less text and
//! a warning. It does no I/O but `isolate`'s child.

mod asciidoc;
pub mod front_matter;
mod html;
pub mod isolate;
mod mdx;
mod notebook;
mod pdf;
mod rst;

use std::ops::Range;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::format::Format;

/// The version of this format's extractor: bump it with every change that gives some file
/// of the format another text or structure. It is part of the recipe a store records per
/// document (`chunk::recipe_version`), so an upgrade re-chunks the files of this format
/// only. Markdown and plain text are read as they are (0).
pub(crate) fn extractor_version(format: Format) -> u32 {
    match format {
        Format::Markdown | Format::PlainText => 0,
        Format::Mdx => mdx::VERSION,
        Format::Rst => rst::VERSION,
        Format::AsciiDoc => asciidoc::VERSION,
        Format::Html => html::VERSION,
        Format::Pdf => pdf::VERSION,
        Format::Notebook => notebook::VERSION,
    }
}

/// A piece of a document that chunking keeps whole where it can.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// A heading: it closes the current chunk and changes the heading path. `range` is its
    /// byte range in the text.
    Heading {
        level: u8,
        text: String,
        range: Range<usize>,
    },
    /// A block of body text: `range` is its byte range in the text.
    Body { range: Range<usize> },
    /// A block of markup that renders no words (`</details>`, `{: .note}`): packed like body
    /// text, but never a passage on its own.
    Markup { range: Range<usize> },
}

/// How the chunker finds an extracted text's units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Structure {
    /// Markdown: front matter, then CommonMark (`chunk::markdown`).
    Markdown,
    /// Paragraphs separated by blank lines.
    Paragraphs,
    /// The units the extractor found, in order.
    Units(Vec<Unit>),
}

/// Where a line of an extracted text is in its file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The PDF page, from 1; 0 for a format without pages.
    pub page: u32,
    /// The first and last line (1-based) in the file, or for a PDF in the page's text, that
    /// the text's line came from.
    pub first: u32,
    pub last: u32,
}

/// Where the lines of an extracted text are in the file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Locations {
    /// The text's lines are the file's lines.
    #[default]
    SameLines,
    /// For each line of the text (index 0 is line 1), where it is.
    Mapped(Vec<Location>),
}

/// Metadata an extractor found outside the text: an HTML `<title>` and `<meta>`, an rST field
/// list, AsciiDoc attributes. Markdown's front matter stays in its text, where the chunker
/// reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub title: Option<String>,
    pub tags: Vec<String>,
    pub fields: std::collections::BTreeMap<String, String>,
}

/// What an extractor made of a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extracted {
    /// The text passages are slices of.
    pub text: String,
    pub structure: Structure,
    pub meta: Meta,
    pub locations: Locations,
    /// Problems worth telling the user about; the text is still as good as the input allows.
    pub warnings: Vec<String>,
}

impl Extracted {
    /// A text read as it is, with the given structure.
    pub(crate) fn as_is(text: String, structure: Structure) -> Extracted {
        Extracted {
            text,
            structure,
            meta: Meta::default(),
            locations: Locations::SameLines,
            warnings: Vec::new(),
        }
    }
}

/// The bounds every extractor keeps to.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The deepest nesting (HTML elements, PDF objects, JSON values, rST blocks) followed;
    /// what lies deeper is read as flat text or left out, with a warning.
    pub max_depth: usize,
    /// The most bytes of text an extractor writes; the rest is left out, with a warning.
    pub max_text_bytes: usize,
    /// How long one file may take.
    pub time: Duration,
    /// The most memory, in bytes, an isolated extractor's process may map.
    pub max_memory: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 512,
            max_text_bytes: 64 << 20,
            time: Duration::from_secs(60),
            max_memory: 2 << 30,
        }
    }
}

/// How `extract` runs the extractors that run isolated.
#[derive(Clone, Debug, Default)]
pub enum Isolation {
    /// In this process (the library's default, and the fuzz targets').
    #[default]
    InProcess,
    /// In a child process of this executable, started as `<exe> extract-worker <format>`.
    Child(std::path::PathBuf),
}

/// The settings of extraction.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub limits: Limits,
    pub isolation: Isolation,
}

/// Why a file could not be read as its format at all.
pub(crate) type Unreadable = String;

/// Extracts a file of `format`. Never panics: a panic in an extractor is caught and reported
/// as the file being unreadable.
pub fn extract(format: Format, bytes: &[u8], options: &Options) -> Result<Extracted, Unreadable> {
    match (&options.isolation, format.runs_isolated()) {
        (Isolation::Child(exe), true) => isolate::extract_in_child(exe, format, bytes, options),
        _ => extract_here(format, bytes, &options.limits),
    }
}

/// Extracts in this process.
pub fn extract_here(
    format: Format,
    bytes: &[u8],
    limits: &Limits,
) -> Result<Extracted, Unreadable> {
    let deadline = Deadline::after(limits.time);
    let run = || -> Result<Extracted, Unreadable> {
        match format {
            Format::Markdown => Ok(Extracted::as_is(
                utf8(bytes)?.to_string(),
                Structure::Markdown,
            )),
            Format::PlainText => Ok(Extracted::as_is(
                utf8(bytes)?.to_string(),
                Structure::Paragraphs,
            )),
            Format::Mdx => Ok(mdx::extract(utf8(bytes)?, limits, &deadline)),
            Format::Rst => Ok(rst::extract(utf8(bytes)?, limits, &deadline)),
            Format::AsciiDoc => Ok(asciidoc::extract(utf8(bytes)?, limits, &deadline)),
            Format::Html => Ok(html::extract(&decode_html(bytes)?, limits, &deadline)),
            Format::Notebook => notebook::extract(utf8(bytes)?, limits, &deadline),
            Format::Pdf => pdf::extract(bytes, limits, &deadline),
        }
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(std::string::ToString::to_string)
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            Err(format!("the {format} reader failed on it ({what})"))
        }
    }
}

/// The text of a file of a text format, without its byte order mark: every extractor (and so
/// every unit range and location) sees the same text.
fn utf8(bytes: &[u8]) -> Result<&str, Unreadable> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    std::str::from_utf8(bytes)
        .map_err(|err| format!("not valid UTF-8 (at byte {}); skipped", err.valid_up_to()))
}

/// An HTML file's text: UTF-8 (with or without a byte order mark); a page in another encoding
/// is refused by name.
fn decode_html(bytes: &[u8]) -> Result<String, Unreadable> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    utf8(bytes).map(str::to_string)
}

/// A point in time an extractor must stop by; checked as it goes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    pub fn after(time: Duration) -> Deadline {
        Deadline(Instant::now() + time)
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }
}

/// Builds an extracted text unit by unit: each heading and block on lines of their own, a
/// blank line between units, and every line's location.
#[derive(Debug, Default)]
pub(crate) struct TextBuilder {
    text: String,
    units: Vec<Unit>,
    locations: Vec<Location>,
    max_bytes: usize,
    truncated: bool,
}

impl TextBuilder {
    pub(crate) fn new(limits: &Limits) -> TextBuilder {
        TextBuilder {
            max_bytes: limits.max_text_bytes,
            ..TextBuilder::default()
        }
    }

    /// Whether the text reached `Limits::max_text_bytes`: what follows is left out.
    pub(crate) fn is_full(&self) -> bool {
        self.truncated
    }

    /// A heading of `level` (1 the outermost), its white space folded onto one line.
    pub(crate) fn heading(&mut self, level: u8, heading: &str, at: Location) {
        let folded = fold_space(heading);
        if folded.is_empty() || !self.room_for(folded.len()) {
            return;
        }
        self.separate();
        let start = self.text.len();
        self.text.push_str(&folded);
        let range = start..self.text.len();
        self.text.push('\n');
        self.locations.push(at);
        self.units.push(Unit::Heading {
            level: level.max(1),
            text: folded,
            range,
        });
    }

    /// A block of body text, its white space folded onto one line (an HTML paragraph, a
    /// reflowed PDF line); `at` spans the lines it came from.
    pub(crate) fn paragraph(&mut self, text: &str, at: Location) {
        let folded = fold_space(text);
        self.block_lines(std::iter::once((folded.as_str(), at)));
    }

    /// A block of body text whose lines are kept (code, a list, verse), each with its location.
    /// Blank lines inside are kept as empty lines; leading and trailing ones are dropped.
    pub(crate) fn block_lines<'a>(&mut self, lines: impl IntoIterator<Item = (&'a str, Location)>) {
        let mut lines: Vec<(&str, Location)> = lines
            .into_iter()
            .map(|(line, at)| (line.trim_end(), at))
            .collect();
        while lines.last().is_some_and(|(line, _)| line.trim().is_empty()) {
            lines.pop();
        }
        let first = lines.iter().position(|(line, _)| !line.trim().is_empty());
        let Some(first) = first else { return };
        let lines = &lines[first..];
        let size: usize = lines.iter().map(|(line, _)| line.len() + 1).sum();
        if !self.room_for(size) {
            return;
        }
        self.separate();
        let start = self.text.len();
        for (line, at) in lines {
            // A line break inside a line (a PDF's text, a notebook's string) would put the
            // text's lines out of step with the locations.
            for piece in line.split(['\n', '\r']) {
                self.text.push_str(piece);
                self.text.push('\n');
                self.locations.push(*at);
            }
        }
        let end = self.text.len() - 1;
        self.units.push(Unit::Body { range: start..end });
    }

    fn room_for(&mut self, size: usize) -> bool {
        if self.text.len() + size + 2 > self.max_bytes {
            self.truncated = true;
            return false;
        }
        !self.truncated
    }

    /// A blank line after the unit before.
    fn separate(&mut self) {
        if !self.text.is_empty() {
            let at = self.locations.last().copied().unwrap_or_default();
            self.text.push('\n');
            self.locations.push(at);
        }
    }

    /// The extracted text, with a warning when it was cut at `Limits::max_text_bytes`.
    pub(crate) fn finish(self, meta: Meta, mut warnings: Vec<String>) -> Extracted {
        if self.truncated {
            warnings.push(format!(
                "its text is over {} bytes; the rest is left out",
                self.max_bytes
            ));
        }
        Extracted {
            text: self.text,
            structure: Structure::Units(self.units),
            meta,
            locations: Locations::Mapped(self.locations),
            warnings,
        }
    }
}

/// `text` with every run of white space folded to one space, and none at the ends.
pub(crate) fn fold_space(text: &str) -> String {
    let mut folded = String::with_capacity(text.len());
    for word in text.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !folded.is_empty() {
            folded.push(' ');
        }
        folded.push_str(word);
    }
    folded
}

/// A line in a source file, for an extractor of a text format.
pub(crate) fn line(number: usize) -> Location {
    let line = u32::try_from(number).unwrap_or(u32::MAX);
    Location {
        page: 0,
        first: line,
        last: line,
    }
}

/// Lines `first..=last` of a source file.
pub(crate) fn lines(first: usize, last: usize) -> Location {
    Location {
        page: 0,
        first: u32::try_from(first).unwrap_or(u32::MAX),
        last: u32::try_from(last.max(first)).unwrap_or(u32::MAX),
    }
}

/// What the extractors' unit tests read of an extraction.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Extracted, Location, Locations, Structure, Unit};

    /// Each unit as `H<level> text` or its text, in order.
    pub(crate) fn units(extracted: &Extracted) -> Vec<String> {
        let Structure::Units(units) = &extracted.structure else {
            panic!("units")
        };
        units
            .iter()
            .map(|unit| match unit {
                Unit::Heading { level, text, .. } => format!("H{level} {text}"),
                Unit::Body { range } | Unit::Markup { range } => {
                    extracted.text[range.clone()].to_string()
                }
            })
            .collect()
    }

    pub(crate) fn locations(extracted: &Extracted) -> &[Location] {
        let Locations::Mapped(locations) = &extracted.locations else {
            panic!("mapped")
        };
        assert_eq!(locations.len(), extracted.text.lines().count());
        locations
    }

    /// The source lines of the text's line holding `needle`.
    pub(crate) fn lines_of(extracted: &Extracted, needle: &str) -> (u32, u32) {
        let index = extracted
            .text
            .lines()
            .position(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in {:?}", extracted.text));
        let at = locations(extracted)[index];
        (at.first, at.last)
    }
}

#[cfg(test)]
mod tests {
    use super::{Limits, Location, Locations, Structure, TextBuilder, Unit};
    use crate::format::{Format, FormatSet};

    #[test]
    fn formats_by_extension_and_name() {
        assert_eq!(Format::from_file_name("a.MD"), Some(Format::Markdown));
        assert_eq!(Format::from_file_name("guide.mdx"), Some(Format::Mdx));
        assert_eq!(Format::from_file_name("x.htm"), Some(Format::Html));
        assert_eq!(Format::from_file_name("nb.ipynb"), Some(Format::Notebook));
        assert_eq!(Format::from_file_name("a.docx"), None);
        assert_eq!(Format::from_file_name("LICENSE"), None);
        for format in Format::ALL {
            assert_eq!(Format::parse(format.name()), Some(format));
            for extension in format.extensions() {
                assert_eq!(
                    Format::from_file_name(&format!("f.{extension}")),
                    Some(format)
                );
            }
        }
    }

    #[test]
    fn format_sets_parse_and_refuse_unknown_names() {
        let set = FormatSet::parse(&["md,rst", " .pdf "]).expect("parse");
        assert_eq!(set.formats(), [Format::Markdown, Format::Rst, Format::Pdf]);
        assert_eq!(set.names(), "md,rst,pdf");
        assert_eq!(FormatSet::parse(&["all"]), Ok(FormatSet::default()));
        let err = FormatSet::parse(&["md,docx"]).expect_err("docx");
        assert!(err.contains("\"docx\"") && err.contains("ipynb"), "{err}");
        assert!(FormatSet::parse::<&str>(&[]).is_err());
    }

    #[test]
    fn every_format_but_text_hashes_in_its_own_context() {
        let contexts: Vec<_> = Format::ALL
            .iter()
            .filter_map(|f| f.hash_context())
            .collect();
        let mut unique = contexts.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), contexts.len());
        assert_eq!(contexts.len(), Format::ALL.len() - 2);
    }

    #[test]
    fn the_builder_keeps_locations_in_step_with_lines() {
        let mut builder = TextBuilder::new(&Limits::default());
        let at = |n| super::line(n);
        builder.heading(1, "  Title \n here ", at(3));
        builder.paragraph("one\n two", super::lines(5, 6));
        builder.block_lines([
            ("", at(8)),
            ("code\nmore", at(9)),
            ("end", at(10)),
            ("", at(11)),
        ]);
        let extracted = builder.finish(Default::default(), Vec::new());
        assert_eq!(extracted.text, "Title here\n\none two\n\ncode\nmore\nend\n");
        let Locations::Mapped(locations) = &extracted.locations else {
            panic!("mapped")
        };
        assert_eq!(locations.len(), extracted.text.lines().count());
        assert_eq!(locations[2], super::lines(5, 6));
        assert_eq!(locations[4], at(9));
        assert_eq!(locations[5], at(9));
        assert_eq!(locations[6], at(10));
        let Structure::Units(units) = &extracted.structure else {
            panic!("units")
        };
        let bodies: Vec<&str> = units
            .iter()
            .filter_map(|unit| match unit {
                Unit::Body { range } => Some(&extracted.text[range.clone()]),
                _ => None,
            })
            .collect();
        assert_eq!(bodies, ["one two", "code\nmore\nend"]);
    }

    #[test]
    fn the_builder_stops_at_its_limit_and_says_so() {
        let limits = Limits {
            max_text_bytes: 20,
            ..Limits::default()
        };
        let mut builder = TextBuilder::new(&limits);
        builder.paragraph("short", Location::default());
        builder.paragraph("this one is far too long to fit", Location::default());
        builder.paragraph("tiny", Location::default());
        assert!(builder.is_full());
        let extracted = builder.finish(Default::default(), Vec::new());
        assert_eq!(extracted.text, "short\n");
        assert_eq!(extracted.warnings.len(), 1);
    }
}
