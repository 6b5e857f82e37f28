//! Chunking: a document's text in, passages with stable IDs out.
//!
//! A document is cut into *units* (a Markdown block, a list item, a paragraph of plain text) by
//! `markdown` or `text`; this module packs consecutive units of one section into chunks of about
//! the target size and names each chunk by `ids::chunk_id` of its exact text: a slice of the
//! document (after a byte order mark) without its trailing white space, line endings as written.
//! Sizes are measured on normalised text, so a whitespace-only edit moves no boundary: it
//! changes the IDs of the chunks whose bytes it changed, and no other.
//!
//! A search hit must be a passage a reader can use, so a fragment too small to stand alone
//! (under `MIN_CHUNK_CHARS`, or only markup such as `</details>`) is kept with a neighbour of
//! its section: the chunk before it, or the one after it when it comes first. A document with
//! headings (or a title) but no body text gets one chunk of its heading lines (or its front
//! matter), so it can be found.
//!
//! Chunking never fails: odd input gives fewer chunks and a warning. It does no I/O.

mod markdown;
mod text;

use std::ops::Range;

use crate::extract::{self, Extracted, Location, Locations, Structure, front_matter};
use crate::format::Format;
use crate::ids::{self, ChunkId};

/// The default target size of a chunk, in characters of normalised text.
pub const DEFAULT_CHUNK_SIZE: usize = 1000;

/// The version of the chunking recipe: what `chunk_document` makes of a given text. Bump it with
/// every change that gives some document other chunks; each store then chunks again, on its
/// next ingest, the documents an older recipe chunked (`recipe_version`).
///
/// 1: fragments too small to stand alone join a neighbour, and a document of headings alone
/// gets one chunk. (0 is what a store records for documents chunked before recipes were kept.)
pub const CHUNKER_VERSION: u32 = 1;

/// A passage under this many characters of normalised text does not stand alone as a search
/// hit (`</details>`, `Short.`): it joins a neighbour in its section. Short enough that a
/// short sentence or a one-line command stays a chunk where its section holds more. A target
/// size under four times this asks for small chunks, and the least is then a quarter of it.
pub(crate) const MIN_CHUNK_CHARS: usize = 20;

/// The version of the recipe that makes a document's chunks from a file of this format, as the
/// ledger records it per document: the format's extractor version (`extract::extractor_version`)
/// in the thousands, the chunker's below. A document recorded with a lower version is chunked
/// again, so a change to one format's extractor re-chunks only its files, and a change to the
/// chunker re-chunks every file. Markdown and plain text, read as they are, have the
/// chunker's version.
pub fn recipe_version(format: Format) -> u32 {
    extract::extractor_version(format) * 1000 + CHUNKER_VERSION
}

/// The longest heading (or title) kept in a heading path, in characters of normalised text.
/// Every chunk of a section carries its heading path, so an unbounded heading (a long paragraph
/// underlined with `---` is one) would be copied, hashed and indexed once per chunk.
pub const MAX_HEADING_CHARS: usize = 256;

/// Chunking settings.
#[derive(Clone, Copy, Debug)]
pub struct ChunkConfig {
    /// Target size in characters; a chunk grows past it only to keep a unit whole.
    pub target_size: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig {
            target_size: DEFAULT_CHUNK_SIZE,
        }
    }
}

/// One passage of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub id: ChunkId,
    /// Title (from front matter) and the headings above the passage, outermost first.
    pub heading_path: Vec<String>,
    /// The passage as written in the source (Markdown kept), without its heading line; for a
    /// document of headings alone, its heading lines (or the fields of its front matter).
    pub text: String,
    /// First and last line in the source file, 1-based and inclusive; for a PDF, in the text
    /// of its first and last page.
    pub lines: (u32, u32),
    /// First and last page, 1-based and inclusive, for a format with pages (PDF).
    pub pages: Option<(u32, u32)>,
    /// Position of the chunk in its document, from 0.
    pub ordinal: u32,
}

/// A chunked document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChunkedDocument {
    pub title: Option<String>,
    pub tags: Vec<String>,
    /// The front matter's top-level scalar fields, by key (`front_matter::FrontMatter::fields`).
    pub fields: std::collections::BTreeMap<String, String>,
    pub chunks: Vec<Chunk>,
    /// Problems worth telling the user about; the chunks are still as good as the input allows.
    pub warnings: Vec<String>,
    /// The recipe that made these chunks (`recipe_version`).
    pub recipe_version: u32,
}

/// Chunks a whole document of `format`, extracting it in this process. Never fails and never
/// panics on any input: a file that cannot be read as its format gives no chunks and a
/// warning.
pub fn chunk_document(format: Format, text: &str, config: &ChunkConfig) -> ChunkedDocument {
    match extract::extract_here(format, text.as_bytes(), &extract::Limits::default()) {
        Ok(extracted) => chunk_extracted(format, &extracted, config),
        Err(why) => ChunkedDocument {
            warnings: vec![why],
            recipe_version: recipe_version(format),
            ..ChunkedDocument::default()
        },
    }
}

/// Chunks what an extractor made of a file of `format`: the text is cut by its structure, and
/// each chunk's lines are taken back to the file's (and its pages, for a PDF).
pub fn chunk_extracted(
    format: Format,
    extracted: &Extracted,
    config: &ChunkConfig,
) -> ChunkedDocument {
    // The extractors' text has no byte order mark (`extract`); unit ranges index it as it is.
    let text = extracted.text.as_str();
    let lines = LineIndex::new(text);
    let target_size = config.target_size.max(1);
    let meta = &extracted.meta;
    let mut document = match &extracted.structure {
        Structure::Markdown => {
            let front = front_matter::split(text);
            let units = markdown::units(text, front.body_start);
            let title = meta.title.clone().or(front.title);
            let mut warnings: Vec<String> = front.warning.into_iter().collect();
            let mut chunks = pack(text, &units, title.as_deref(), target_size, &lines);
            if chunks.is_empty() {
                chunks.extend(headings_chunk(
                    text,
                    &units,
                    title.as_deref(),
                    front.body_start,
                    &lines,
                    &mut warnings,
                ));
            }
            warn_long_headings(title.as_deref(), &units, &mut warnings);
            let mut tags = front.tags;
            tags.extend(meta.tags.iter().cloned());
            let mut fields = front.fields;
            fields.extend(meta.fields.clone());
            ChunkedDocument {
                title: title.or_else(|| first_heading(&units)),
                tags,
                fields,
                chunks,
                warnings,
                recipe_version: recipe_version(format),
            }
        }
        Structure::Paragraphs => {
            let units = text::units(text);
            ChunkedDocument {
                title: meta.title.clone(),
                tags: meta.tags.clone(),
                fields: meta.fields.clone(),
                chunks: pack(text, &units, meta.title.as_deref(), target_size, &lines),
                warnings: Vec::new(),
                recipe_version: recipe_version(format),
            }
        }
        Structure::Units(units) => {
            let title = meta.title.as_deref();
            let mut chunks = pack(text, units, title, target_size, &lines);
            let mut warnings = Vec::new();
            if chunks.is_empty() {
                chunks.extend(headings_chunk(text, units, title, 0, &lines, &mut warnings));
            }
            warn_long_headings(title, units, &mut warnings);
            ChunkedDocument {
                title: meta.title.clone().or_else(|| first_heading(units)),
                tags: meta.tags.clone(),
                fields: meta.fields.clone(),
                chunks,
                warnings,
                recipe_version: recipe_version(format),
            }
        }
    };
    if let Locations::Mapped(locations) = &extracted.locations {
        for chunk in &mut document.chunks {
            place(chunk, locations);
        }
    }
    document
        .warnings
        .splice(0..0, extracted.warnings.iter().cloned());
    if document.chunks.is_empty() {
        document.warnings.push("no text to index".to_string());
    }
    document
}

/// Takes a chunk's lines of the extracted text back to the file's lines (and pages).
fn place(chunk: &mut Chunk, locations: &[Location]) {
    let at = |line: u32| {
        let index = (line as usize).saturating_sub(1);
        locations
            .get(index)
            .or(locations.last())
            .copied()
            .unwrap_or_default()
    };
    let (first, last) = (at(chunk.lines.0), at(chunk.lines.1));
    let end = if first.page == last.page {
        last.last.max(first.first)
    } else {
        last.last
    };
    chunk.lines = (first.first, end);
    if first.page > 0 {
        chunk.pages = Some((first.page, last.page.max(first.page)));
    }
}

fn warn_long_headings(title: Option<&str>, units: &[Unit], warnings: &mut Vec<String>) {
    let long_title = title.is_some_and(too_long);
    let long_heading = units
        .iter()
        .any(|unit| matches!(unit, Unit::Heading { text, .. } if too_long(text)));
    if long_title || long_heading {
        warnings.push(format!(
            "a heading or title over {MAX_HEADING_CHARS} characters is shortened in heading paths"
        ));
    }
}

pub(crate) use crate::extract::Unit;

fn first_heading(units: &[Unit]) -> Option<String> {
    units.iter().find_map(|unit| match unit {
        Unit::Heading { level: 1, text, .. } if !text.is_empty() => Some(text.clone()),
        _ => None,
    })
}

/// The one chunk of a Markdown document whose body gave none: its headings as written (from
/// the first to the last), or else the fields of its front matter, which hold its title; so the
/// document can be found by them, and by its file name, which the index gives every chunk. Its
/// heading path is the title when the title is not its first heading, as for any chunk. `None`
/// when there is neither heading nor title: an empty document stays chunk-free.
/// The least target size the markup-alone bound is measured against, so that small test
/// targets keep a tag beside its text.
const MIN_DROPPED_MARKUP_TARGET: usize = 1_000;

/// The most bytes of heading lines the chunk of a document of headings alone holds.
const MAX_HEADINGS_CHUNK_BYTES: usize = 4_096;

fn headings_chunk(
    text: &str,
    units: &[Unit],
    title: Option<&str>,
    body_start: usize,
    lines: &LineIndex,
    warnings: &mut Vec<String>,
) -> Option<Chunk> {
    let title = title.map(heading_of).filter(|title| !title.is_empty());
    let headings: Vec<(String, &Range<usize>)> = units
        .iter()
        .filter_map(|unit| match unit {
            Unit::Heading { text, range, .. } => Some((heading_of(text), range)),
            _ => None,
        })
        .filter(|(heading, _)| !heading.is_empty())
        .collect();
    // The headings that fit in a chunk: a file of a hundred thousand headings is no passage of
    // them all.
    let limit = headings
        .first()
        .map_or(0, |(_, first)| first.start + MAX_HEADINGS_CHUNK_BYTES);
    let fitting_count = headings
        .iter()
        .take_while(|(_, range)| range.end <= limit)
        .count()
        .max(1);
    let fitting = headings.get(fitting_count - 1);
    if fitting_count < headings.len() {
        warnings.push(format!(
            "it has headings and no text; its first {fitting_count} of {} headings \
             ({MAX_HEADINGS_CHUNK_BYTES} bytes) make its one passage, the rest are left out",
            headings.len()
        ));
    }
    match (headings.first(), fitting) {
        (Some((first, first_range)), Some((_, last_range))) => {
            let heading_path: Vec<String> =
                title.filter(|title| title != first).into_iter().collect();
            chunk_of(
                text,
                first_range.start..last_range.end,
                heading_path,
                lines,
                0,
            )
        }
        _ => {
            title.as_ref()?;
            chunk_of(
                text,
                front_matter_fields(text, body_start),
                Vec::new(),
                lines,
                0,
            )
        }
    }
}

/// The lines between the delimiters of the front matter that ends at `body_start` (all of it
/// when it has no closing line of its own).
fn front_matter_fields(text: &str, body_start: usize) -> Range<usize> {
    let front = &text[..body_start];
    let start = front.find('\n').map_or(0, |i| i + 1);
    let end = front
        .trim_end_matches(['\n', '\r'])
        .rfind('\n')
        .map_or(body_start, |i| i + 1);
    if start < end {
        start..end
    } else {
        0..body_start
    }
}

/// The chunk of `range` of `text`, without its trailing white space; `None` when that leaves
/// nothing.
fn chunk_of(
    text: &str,
    range: Range<usize>,
    heading_path: Vec<String>,
    lines: &LineIndex,
    ordinal: usize,
) -> Option<Chunk> {
    let body = text[range.clone()].trim_end();
    if body.chars().all(ids::is_space) {
        return None;
    }
    let end = range.start + body.len();
    Some(Chunk {
        id: ids::chunk_id(&heading_path, body),
        heading_path,
        text: body.to_string(),
        lines: (
            lines.line_of(range.start),
            lines.line_of(end.saturating_sub(1).max(range.start)),
        ),
        ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
        pages: None,
    })
}

/// Packs units into chunks: consecutive body units of one section, until the target size.
/// A body unit over twice the target is cut at line (or, failing that, word) boundaries. Then a
/// piece too small to stand alone joins a neighbour in its section (`Packer::finish_section`).
fn pack(
    text: &str,
    units: &[Unit],
    title: Option<&str>,
    target_size: usize,
    lines: &LineIndex,
) -> Vec<Chunk> {
    let mut packer = Packer {
        text,
        lines,
        target_size,
        headings: Vec::new(),
        title: title.map(heading_of).filter(|t| !t.is_empty()),
        current: None,
        section: Vec::new(),
        chunks: Vec::new(),
    };
    for unit in units {
        match unit {
            Unit::Heading { level, text, .. } => {
                packer.finish_section();
                packer.headings.retain(|(l, _)| l < level);
                packer.headings.push((*level, heading_of(text)));
            }
            Unit::Body { range } => {
                let size = normalised_len(&text[range.clone()]);
                if size > 2 * target_size {
                    for piece in cut(text, range.clone(), target_size) {
                        let piece_size = normalised_len(&text[piece.clone()]);
                        packer.add(piece, piece_size, Content::Words);
                    }
                } else {
                    packer.add(range.clone(), size, Content::Words);
                }
            }
            Unit::Markup { range } => {
                let size = normalised_len(&text[range.clone()]);
                packer.add(range.clone(), size, Content::MarkupOnly);
            }
        }
    }
    packer.finish_section();
    packer.chunks
}

/// A heading as a heading path holds it: normalised, and at most `MAX_HEADING_CHARS` long.
fn heading_of(text: &str) -> String {
    let heading = ids::normalise(text);
    match heading.char_indices().nth(MAX_HEADING_CHARS) {
        Some((end, _)) => ids::normalise(&heading[..end]),
        None => heading,
    }
}

fn too_long(heading: &str) -> bool {
    ids::normalise(heading)
        .chars()
        .nth(MAX_HEADING_CHARS)
        .is_some()
}

struct Packer<'a> {
    text: &'a str,
    lines: &'a LineIndex,
    target_size: usize,
    headings: Vec<(u8, String)>,
    title: Option<String>,
    /// The piece being packed.
    current: Option<Piece>,
    /// The pieces of the current section packed so far, in order.
    section: Vec<Piece>,
    chunks: Vec<Chunk>,
}

/// What a piece holds: some words, or only markup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    Words,
    MarkupOnly,
}

/// Consecutive units of one section, packed to become one chunk.
#[derive(Clone, Debug)]
struct Piece {
    range: Range<usize>,
    /// Normalised size, counting one space between units.
    size: usize,
    content: Content,
}

impl Piece {
    /// Whether it makes a passage on its own: words, and at least `min_size` of them.
    fn stands_alone(&self, min_size: usize) -> bool {
        self.content == Content::Words && self.size >= min_size
    }

    /// This piece followed by `next` (which starts after it).
    fn join(self, next: Piece) -> Piece {
        Piece {
            range: self.range.start..next.range.end,
            size: self.size + 1 + next.size,
            content: if self.content == Content::Words || next.content == Content::Words {
                Content::Words
            } else {
                Content::MarkupOnly
            },
        }
    }
}

impl Packer<'_> {
    fn add(&mut self, range: Range<usize>, size: usize, content: Content) {
        if size == 0 {
            return;
        }
        let unit = Piece {
            range,
            size,
            content,
        };
        self.current = Some(match self.current.take() {
            Some(current) if current.size + 1 + size <= self.target_size => current.join(unit),
            Some(current) => {
                self.section.push(current);
                unit
            }
            None => unit,
        });
    }

    /// Ends the section: a piece that does not stand alone joins the piece before it, or the
    /// one after it when it comes first, and each piece becomes a chunk. Pieces never join
    /// across a heading, so an edit to one section changes no other section's chunks. A
    /// section of one small piece keeps it (a short answer under its own heading is a
    /// passage) unless it is only markup.
    fn finish_section(&mut self) {
        self.section.extend(self.current.take());
        let min_size = MIN_CHUNK_CHARS.min(self.target_size / 4);
        let mut done: Vec<Piece> = Vec::with_capacity(self.section.len());
        let mut joined: Vec<Piece> = Vec::new();
        // Leading pieces too small to stand alone, waiting for the next piece.
        let mut leading: Option<Piece> = None;
        for piece in std::mem::take(&mut self.section) {
            // Markup alone larger than two chunks (an inline SVG, a wall of tags) is no
            // passage, and too large to ride along with one: it is left out, and no piece joins
            // another across it (a join spans what lies between).
            if piece.content == Content::MarkupOnly
                && piece.size > 2 * self.target_size.max(MIN_DROPPED_MARKUP_TARGET)
            {
                done.append(&mut joined);
                done.extend(leading.take().filter(|p| p.content == Content::Words));
                continue;
            }
            let piece = match leading.take() {
                Some(before) => before.join(piece),
                None => piece,
            };
            match joined.last_mut() {
                _ if piece.stands_alone(min_size) => joined.push(piece),
                Some(last) => *last = last.clone().join(piece),
                None => leading = Some(piece),
            }
        }
        joined.extend(leading.filter(|piece| piece.content == Content::Words));
        done.append(&mut joined);
        for piece in done {
            self.emit(piece.range);
        }
    }

    fn emit(&mut self, range: Range<usize>) {
        let mut heading_path: Vec<String> = Vec::with_capacity(self.headings.len() + 1);
        if let Some(title) = &self.title
            && self.headings.first().map(|(_, h)| h) != Some(title)
        {
            heading_path.push(title.clone());
        }
        heading_path.extend(self.headings.iter().map(|(_, h)| h.clone()));
        let ordinal = self.chunks.len();
        self.chunks.extend(chunk_of(
            self.text,
            range,
            heading_path,
            self.lines,
            ordinal,
        ));
    }
}

/// The length of `text` with its white space folded as `ids::normalise` folds it. Composition is
/// left out: it rarely changes a length, and a boundary needs only to be stable under white space.
fn normalised_len(text: &str) -> usize {
    if text.is_ascii() {
        // One byte per character; white space and control characters are the bytes up to
        // 0x20 and 0x7f (`ids::is_space` on ASCII).
        let (mut size, mut in_word, mut words) = (0usize, false, 0usize);
        for &b in text.as_bytes() {
            let space = b <= 0x20 || b == 0x7f;
            if !space {
                size += 1;
                if !in_word {
                    words += 1;
                }
            }
            in_word = !space;
        }
        return (size + words).saturating_sub(1);
    }
    text.split(ids::is_space)
        .filter(|word| !word.is_empty())
        .map(|word| word.chars().count() + 1)
        .sum::<usize>()
        .saturating_sub(1)
}

/// The end of the longest prefix of `text` whose `normalised_len` is at most `limit` (at least
/// one character that is not white space), with the white space that follows it.
fn normalised_prefix(text: &str, limit: usize) -> usize {
    let mut size = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if ids::is_space(c) {
            in_word = false;
            continue;
        }
        // A character that starts a word after another word brings the space between them.
        let grow = if !in_word && size > 0 { 2 } else { 1 };
        if size > 0 && size + grow > limit {
            return i;
        }
        size += grow;
        in_word = true;
    }
    text.len()
}

/// Cuts an oversized range into pieces of at most about `target_size` characters, at line
/// boundaries where possible and at white space otherwise; a single "word" longer than the
/// target is cut at a character boundary. The pieces cover the range in order. Sizes are
/// normalised sizes, so an edit of white space within lines moves no cut.
fn cut(text: &str, range: Range<usize>, target_size: usize) -> Vec<Range<usize>> {
    let mut pieces = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let rest = &text[start..range.end];
        // Where the piece would end if cut after `target_size` characters of normalised text.
        let hard_end = normalised_prefix(rest, target_size);
        if hard_end == rest.len() {
            pieces.push(start..range.end);
            break;
        }
        let window = &rest[..hard_end];
        let cut_at = window
            .rfind('\n')
            .map(|i| i + 1)
            .filter(|&i| normalised_len(&window[..i]) > target_size / 4)
            .or_else(|| {
                window
                    .rfind(ids::is_space)
                    .filter(|&i| normalised_len(&window[..i]) > 0)
                    .map(|i| i + window[i..].chars().next().map_or(1, char::len_utf8))
            })
            .unwrap_or(hard_end);
        pieces.push(start..start + cut_at);
        start += cut_at;
    }
    pieces
}

/// Maps byte offsets to 1-based line numbers.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    fn line_of(&self, offset: usize) -> u32 {
        let line = self.starts.partition_point(|&start| start <= offset);
        u32::try_from(line).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::{ChunkConfig, Format, chunk_document, cut, normalised_len};

    #[test]
    fn normalised_len_is_the_length_of_the_normalised_text() {
        for text in crate::ids::ascii_pairs() {
            let normalised = crate::ids::normalise(&text);
            assert_eq!(
                normalised_len(&text),
                normalised.chars().count(),
                "{text:?}"
            );
        }
    }

    fn chunks(text: &str, target_size: usize) -> Vec<(String, String, (u32, u32))> {
        chunk_document(Format::Markdown, text, &ChunkConfig { target_size })
            .chunks
            .into_iter()
            .map(|c| (c.heading_path.join(" > "), c.text, c.lines))
            .collect()
    }

    fn check(text: &str, target_size: usize, expect: &[(&str, &str, (u32, u32))]) {
        let got = chunks(text, target_size);
        let expect: Vec<(String, String, (u32, u32))> = expect
            .iter()
            .map(|(h, t, l)| (h.to_string(), t.to_string(), *l))
            .collect();
        assert_eq!(got, expect, "input: {text:?}");
    }

    #[test]
    fn headings_split_sections() {
        check(
            "# Guide\n\nIntro.\n\n## Install\n\nRun it.\n",
            1000,
            &[
                ("Guide", "Intro.", (3, 3)),
                ("Guide > Install", "Run it.", (7, 7)),
            ],
        );
    }

    #[test]
    fn front_matter_title_leads_the_path_and_is_not_body() {
        check(
            "---\ntitle: Handbook\ntags: [a]\n---\n## Keys\n\nRotate.\n",
            1000,
            &[("Handbook > Keys", "Rotate.", (7, 7))],
        );
        check(
            "---\ntitle: Same\n---\n# Same\n\nBody.\n",
            1000,
            &[("Same", "Body.", (6, 6))],
        );
    }

    #[test]
    fn paragraphs_pack_to_the_target() {
        check(
            "aaaa\n\nbbbb\n\ncccc\n",
            10,
            &[("", "aaaa\n\nbbbb", (1, 3)), ("", "cccc", (5, 5))],
        );
    }

    #[test]
    fn code_block_is_never_split_below_twice_the_target() {
        let text = "# T\n\n```\nline one\n\nline two\n```\n";
        check(text, 13, &[("T", "```\nline one\n\nline two\n```", (3, 7))]);
    }

    #[test]
    fn list_items_are_units() {
        check(
            "- one one\n- two two\n- three three\n",
            20,
            &[
                ("", "- one one\n- two two", (1, 2)),
                ("", "- three three", (3, 3)),
            ],
        );
    }

    #[test]
    fn cut_covers_the_range() {
        let text = "word ".repeat(100) + "é".repeat(50).as_str();
        let pieces = cut(&text, 0..text.len(), 30);
        assert_eq!(pieces.first().map(|r| r.start), Some(0));
        assert_eq!(pieces.last().map(|r| r.end), Some(text.len()));
        for pair in pieces.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
    }

    #[test]
    fn whitespace_edit_moves_no_boundary_and_changes_only_its_chunk() {
        let config = ChunkConfig { target_size: 30 };
        let text = "# T\n\nsome text here\n\n```py\nif x:\n  y()\n```\n\nlast words of it\n";
        let fixed = text.replace("  y()", "    y()");
        let a = chunk_document(Format::Markdown, text, &config);
        let b = chunk_document(Format::Markdown, &fixed, &config);
        let lines = |doc: &super::ChunkedDocument| -> Vec<(u32, u32)> {
            doc.chunks.iter().map(|c| c.lines).collect()
        };
        assert_eq!(lines(&a), lines(&b), "a whitespace edit moved a boundary");
        assert_eq!(a.chunks.len(), 3);
        for (before, after) in a.chunks.iter().zip(&b.chunks) {
            // Each chunk is named by the bytes it holds: the one edited changes, no other.
            assert_eq!(
                before.text == after.text,
                before.id == after.id,
                "{after:?}"
            );
            assert_eq!(
                after.id,
                crate::ids::chunk_id(&after.heading_path, &after.text)
            );
        }
        assert_eq!(b.chunks[1].text, "```py\nif x:\n    y()\n```");
        assert_ne!(a.chunks[1].id, b.chunks[1].id);
    }

    #[test]
    fn bom_crlf_and_empty() {
        let doc = chunk_document(
            Format::Markdown,
            "\u{feff}# T\r\n\r\nx\r\n",
            &ChunkConfig::default(),
        );
        assert_eq!(doc.chunks.len(), 1);
        assert_eq!(doc.chunks[0].heading_path, ["T"]);
        assert_eq!(doc.chunks[0].text, "x");
        let empty = chunk_document(Format::Markdown, "", &ChunkConfig::default());
        assert!(empty.chunks.is_empty());
        assert_eq!(empty.warnings, ["no text to index"]);
    }

    #[test]
    fn a_long_heading_is_shortened_in_the_path() {
        // A long paragraph underlined with `---` is a heading.
        let long = "word ".repeat(200);
        let doc = chunk_document(
            Format::Markdown,
            &format!("{long}\n---\n\none\n\ntwo\n"),
            &ChunkConfig { target_size: 3 },
        );
        assert_eq!(doc.chunks.len(), 2);
        for chunk in &doc.chunks {
            assert_eq!(chunk.heading_path.len(), 1);
            assert_eq!(
                chunk.heading_path[0].chars().count(),
                super::MAX_HEADING_CHARS
            );
            assert!(long.starts_with(&chunk.heading_path[0]));
        }
        assert_eq!(doc.warnings.len(), 1, "{:?}", doc.warnings);
    }

    #[test]
    fn a_fragment_too_small_to_stand_alone_joins_the_chunk_before_it() {
        // `</details>` closes a block whose code filled the chunk before it.
        check(
            "# T\n\n<details>\n\n```\nsome code here\n```\n\n</details>\n",
            20,
            &[(
                "T",
                "<details>\n\n```\nsome code here\n```\n\n</details>",
                (3, 9),
            )],
        );
        // A short tail of a paragraph too long for one chunk stays with the chunk before it.
        check(
            "# T\n\nA paragraph long enough to fill the target.\n\nShort.\n",
            40,
            &[(
                "T",
                "A paragraph long enough to fill the target.\n\nShort.",
                (3, 5),
            )],
        );
    }

    #[test]
    fn a_fragment_that_opens_a_section_joins_the_chunk_after_it() {
        check(
            "# T\n\n<!-- vale off -->\n\nA paragraph long enough to fill the target.\n",
            30,
            &[(
                "T",
                "<!-- vale off -->\n\nA paragraph long enough to fill the target.",
                (3, 5),
            )],
        );
    }

    #[test]
    fn markup_alone_is_no_passage_but_a_short_section_is() {
        // A tag-only line between sections joins no other section and is not a chunk itself.
        check(
            "# A\n\nText of a.\n\n## B\n\n<br>\n\n## C\n\n{% include copy.html %}\n\n{: .note}\n\n---\n\n## D\n\nOk.\n",
            1000,
            &[("A", "Text of a.", (3, 3)), ("A > D", "Ok.", (19, 19))],
        );
        // Markup beside text is kept with it, whatever its size.
        check(
            "# A\n\nSee below.\n\n{% include copy-curl.html %}\n",
            10,
            &[("A", "See below.\n\n{% include copy-curl.html %}", (3, 5))],
        );
    }

    #[test]
    fn markup_alone_or_headings_alone_never_make_an_unbounded_chunk() {
        let svg = format!(
            "# T\n\nSome intro text here.\n\n<svg>\n{}</svg>\n\nAfter the picture.\n",
            "<path d=\"M0 0L1 1\"/>\n".repeat(20_000)
        );
        let doc = chunk_document(Format::Markdown, &svg, &ChunkConfig::default());
        let largest = doc.chunks.iter().map(|c| c.text.len()).max().unwrap_or(0);
        assert!(largest < 10_000, "a chunk of {largest} bytes");
        assert!(
            doc.chunks
                .iter()
                .any(|c| c.text.contains("After the picture")),
            "{:?}",
            doc.chunks
        );
        let headings = "# Heading\n\n".repeat(100_000);
        let doc = chunk_document(Format::Markdown, &headings, &ChunkConfig::default());
        assert_eq!(doc.chunks.len(), 1);
        assert!(
            doc.chunks[0].text.len() <= 4_096,
            "{}",
            doc.chunks[0].text.len()
        );
    }

    #[test]
    fn a_heading_only_document_is_one_chunk_of_its_heading() {
        check("# A heading\n", 1000, &[("", "# A heading", (1, 1))]);
        check(
            "# Guide\n\n## Install\n\n<br>\n",
            1000,
            &[("", "# Guide\n\n## Install", (1, 3))],
        );
        check(
            "---\ntitle: Handbook\n---\n",
            1000,
            &[("", "title: Handbook", (2, 2))],
        );
        check(
            "+++\r\ntitle = \"Handbook\"\r\n+++\r\n\r\n",
            1000,
            &[("", "title = \"Handbook\"", (2, 2))],
        );
        check(
            "---\ntitle: Handbook\n---\n# Keys\n",
            1000,
            &[("Handbook", "# Keys", (4, 4))],
        );
        let doc = chunk_document(Format::Markdown, "# A heading\n", &ChunkConfig::default());
        assert_eq!(doc.title.as_deref(), Some("A heading"));
        assert!(doc.warnings.is_empty(), "{:?}", doc.warnings);
    }

    #[test]
    fn an_empty_or_blank_document_has_no_chunk() {
        for text in ["", " \n\t\n", "\u{feff}\r\n"] {
            for kind in [Format::Markdown, Format::PlainText] {
                let doc = chunk_document(kind, text, &ChunkConfig::default());
                assert_eq!(doc.chunks, [], "{kind:?} {text:?}");
                assert_eq!(doc.warnings, ["no text to index"], "{kind:?} {text:?}");
            }
        }
        // Front matter without a title names nothing to find the document by.
        let doc = chunk_document(
            Format::Markdown,
            "---\ntags: [a]\n---\n",
            &ChunkConfig::default(),
        );
        assert_eq!(doc.chunks, []);
    }

    #[test]
    fn plain_text_chunks_on_blank_lines() {
        let doc = chunk_document(
            Format::PlainText,
            "one\ntwo\n\n\nthree\n",
            &ChunkConfig { target_size: 5 },
        );
        let texts: Vec<&str> = doc.chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["one\ntwo", "three"]);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::{ChunkConfig, Format, chunk_document};
    use crate::ids::normalise;

    /// A word of letters, or Markdown punctuation that stresses the parser.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,8}",
            Just("*".to_string()),
            Just("`".to_string()),
            Just("[x](y)".to_string()),
            Just("é".to_string()),
        ]
    }

    fn paragraph() -> impl Strategy<Value = String> {
        prop::collection::vec("[a-z]{1,8}", 1..40).prop_map(|words| words.join(" "))
    }

    /// Sections of plain paragraphs under distinct headings.
    fn sections() -> impl Strategy<Value = Vec<Vec<String>>> {
        prop::collection::vec(prop::collection::vec(paragraph(), 1..6), 1..6)
    }

    fn render(sections: &[Vec<String>]) -> String {
        sections
            .iter()
            .enumerate()
            .map(|(i, paragraphs)| format!("## Section {i}\n\n{}\n\n", paragraphs.join("\n\n")))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_input_panics(text in prop::collection::vec(prop_oneof![word(), Just("\n".into()), Just("# ".into()), Just("> ".into()), Just("- ".into()), Just("```".into()), Just("---".into()), Just("|".into()), Just(" ".into())], 0..200), size in 1usize..300) {
            let text: String = text.concat();
            for kind in [Format::Markdown, Format::PlainText] {
                let doc = chunk_document(kind, &text, &ChunkConfig { target_size: size });
                for chunk in &doc.chunks {
                    prop_assert!(chunk.lines.0 >= 1 && chunk.lines.0 <= chunk.lines.1);
                    prop_assert!(!chunk.text.trim().is_empty());
                }
            }
        }

        #[test]
        fn chunks_cover_the_text_in_order(sections in sections(), size in 20usize..400) {
            let text = render(&sections);
            let doc = chunk_document(Format::Markdown, &text, &ChunkConfig { target_size: size });
            let got: Vec<String> = doc.chunks.iter().map(|c| c.text.clone()).collect();
            let expected: Vec<String> = sections.iter().flatten().cloned().collect();
            prop_assert_eq!(normalise(&got.join(" ")), normalise(&expected.join(" ")));
            let mut last_line = 0;
            for chunk in &doc.chunks {
                // Pieces of one long line share that line; chunks never go backwards.
                prop_assert!(chunk.lines.0 >= last_line, "chunks out of order");
                last_line = chunk.lines.1;
            }
        }

        #[test]
        fn an_unrelated_section_edit_keeps_the_other_ids(sections in sections(), edit in paragraph(), size in 20usize..400) {
            prop_assume!(sections.len() >= 2);
            let config = ChunkConfig { target_size: size };
            let before = chunk_document(Format::Markdown, &render(&sections), &config);
            let mut edited = sections.clone();
            let last = edited.len() - 1;
            edited[last].push(edit);
            let after = chunk_document(Format::Markdown, &render(&edited), &config);
            let untouched = |doc: &super::ChunkedDocument| -> Vec<crate::ids::ChunkId> {
                doc.chunks
                    .iter()
                    .filter(|c| c.heading_path.last().map(String::as_str) != Some(&format!("Section {last}")))
                    .map(|c| c.id)
                    .collect()
            };
            prop_assert_eq!(untouched(&before), untouched(&after));
        }
    }
}
