//! The properties the fuzz targets check, one public function per target.
//!
//! Each function takes the fuzzer's raw bytes and panics when a property fails. The same file is
//! compiled into the root crate's integration tests (`tests/it/fuzz_regressions.rs`), which run
//! every stored input through these functions, so a finding stays fixed.

use std::collections::HashSet;
use std::path::PathBuf;

use groundidx::agent::tools::{self, ToolRequest};
use groundidx::chunk::{ChunkConfig, ChunkedDocument, chunk_document};
use groundidx::extract::front_matter::{MAX_FRONT_MATTER_BYTES, split};
use groundidx::format::Format;
use groundidx::ids::{self, ChunkId};
use groundidx::ledger::ChunkFilter;
use groundidx::search::{self, SearchRequest};
use groundidx::store::StoreReader;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// extractors (every format: `mdx` and `notebook` here)

/// What every extractor promises, on arbitrary bytes as a file of `format`: it never panics
/// (a panic caught by `extract_here` is a finding too), it is deterministic, it writes at most a
/// bounded multiple of its input, its units lie in its text on character boundaries and in
/// order, every line of its text has a location, and chunking what it made neither panics nor
/// names a line past the end of the file (for a format without pages).
pub fn extracted(format: Format, data: &[u8]) {
    use groundidx::extract::{self, Limits, Locations, Structure, Unit};
    let limits = Limits::default();
    let first = extract::extract_here(format, data, &limits);
    let again = extract::extract_here(format, data, &limits);
    assert_eq!(first, again, "{format} extraction is not deterministic");
    let extracted = match first {
        Ok(extracted) => extracted,
        Err(why) => {
            assert!(
                !why.contains("reader failed on it"),
                "{format} panicked: {why}"
            );
            return;
        }
    };
    let text = &extracted.text;
    assert!(
        text.len() <= 16 * data.len() + 4096,
        "{format}: {} bytes of text from {} bytes",
        text.len(),
        data.len()
    );
    if let Structure::Units(units) = &extracted.structure {
        let mut end = 0;
        for unit in units {
            let range = match unit {
                Unit::Heading { range, .. } | Unit::Body { range } | Unit::Markup { range } => {
                    range
                }
            };
            assert!(
                range.start >= end && range.start <= range.end,
                "{format}: {units:?}"
            );
            assert!(
                text.get(range.clone()).is_some(),
                "{format}: {range:?} in {text:?}"
            );
            end = range.end;
        }
    }
    if let Locations::Mapped(locations) = &extracted.locations {
        assert_eq!(
            locations.len(),
            text.split_inclusive('\n').count(),
            "{format}: one location per line of {text:?}"
        );
    }
    let file_lines = data.split(|b| *b == b'\n').count() as u32;
    for config in [ChunkConfig::default(), ChunkConfig { target_size: 7 }] {
        let document = groundidx::chunk::chunk_extracted(format, &extracted, &config);
        for chunk in &document.chunks {
            assert!(!chunk.text.trim().is_empty(), "{format}: an empty chunk");
            assert_eq!(chunk.id, ids::chunk_id(&chunk.heading_path, &chunk.text));
            if chunk.pages.is_none() {
                assert!(
                    1 <= chunk.lines.0
                        && chunk.lines.0 <= chunk.lines.1
                        && chunk.lines.1 <= file_lines,
                    "{format}: lines {:?} of a file of {file_lines}",
                    chunk.lines
                );
            }
        }
    }
}

/// `extracted` for MDX.
pub fn mdx(data: &[u8]) {
    extracted(Format::Mdx, data);
}

/// `extracted` for notebooks, on the bytes as they are and on a notebook made of them: a JSON
/// notebook whose cells' sources are the data's lines (so the reader gets past the parse).
pub fn notebook(data: &[u8]) {
    extracted(Format::Notebook, data);
    let text = String::from_utf8_lossy(data);
    let cells: Vec<Value> = text
        .split("\n\n")
        .enumerate()
        .map(|(i, source)| {
            let lines: Vec<String> = source.split_inclusive('\n').map(str::to_string).collect();
            json!({
                "cell_type": if i % 2 == 0 { "markdown" } else { "code" },
                "metadata": {},
                "outputs": [],
                "source": lines,
            })
        })
        .collect();
    let notebook = json!({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5});
    let pretty = serde_json::to_string_pretty(&notebook).expect("json");
    extracted(Format::Notebook, pretty.as_bytes());
}

// ---------------------------------------------------------------------------------------------
// front_matter

/// Front matter, on arbitrary blocks behind a YAML or TOML fence.
///
/// The first byte chooses the fence (bit 0: YAML or TOML) and whether the block is closed
/// (bit 1); the rest is the block, decoded lossily, then a short body. Checked: splitting is
/// deterministic; the body starts on a character boundary after the block, or at 0 when there is
/// no front matter; a title is non-empty and is the `title` field; tags are trimmed, lower-case,
/// sorted and unique; a block over the size limit gives a warning and nothing else; and what is
/// kept is never much bigger than the block (no alias is expanded). Run with `-rss_limit_mb`:
/// the cost must stay bounded by the input's size.
pub fn front_matter(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let fence = if flags & 1 == 0 { "---" } else { "+++" };
    let block = String::from_utf8_lossy(rest);
    let text = if flags & 2 == 0 {
        format!("{fence}\n{block}\n{fence}\nthe body\n")
    } else {
        format!("{fence}\n{block}")
    };
    let front = split(&text);
    assert_eq!(front, split(&text), "front matter is not deterministic");
    assert!(
        front.body_start <= text.len() && text.is_char_boundary(front.body_start),
        "body starts at {} of {}",
        front.body_start,
        text.len()
    );
    if front.body_start == 0 {
        assert!(front.title.is_none() && front.tags.is_empty() && front.fields.is_empty());
    } else {
        assert!(
            front.body_start > fence.len(),
            "the body starts inside the fence"
        );
    }
    if let Some(title) = &front.title {
        assert!(!title.is_empty(), "an empty title");
        assert_eq!(
            front.fields.get("title"),
            Some(title),
            "the title is not its field"
        );
    }
    let mut clean = front.tags.clone();
    clean.sort();
    clean.dedup();
    assert_eq!(clean, front.tags, "tags are not sorted and unique");
    for tag in &front.tags {
        assert!(
            !tag.is_empty() && tag.trim() == tag && tag.to_lowercase() == *tag,
            "tag {tag:?}"
        );
    }
    let block_len = front.body_start;
    if block_len > MAX_FRONT_MATTER_BYTES + 2 * fence.len() + 4 {
        assert!(
            front.warning.is_some(),
            "a block of {block_len} bytes was read"
        );
        assert!(front.fields.is_empty() && front.tags.is_empty());
    }
    let kept: usize = front.tags.iter().map(String::len).sum::<usize>()
        + front
            .fields
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    assert!(
        kept <= 4 * block_len + 64,
        "{block_len} bytes of front matter kept {kept} bytes"
    );
}

// ---------------------------------------------------------------------------------------------
// chunker

/// Chunking, on arbitrary text and on tame Markdown built from the bytes.
///
/// The first byte chooses the front matter (bits 0-1: none, YAML, TOML, or a YAML title and
/// tags built from the data) and the target size (bit 2: the default; else 1 to 32 from bits
/// 3-7); the rest is the text, decoded lossily. The text is chunked as Markdown and as plain
/// text; the rest, mapped to tame Markdown, as Markdown.
pub fn chunker(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let config = if flags & 4 == 0 {
        ChunkConfig::default()
    } else {
        ChunkConfig {
            target_size: 1 + usize::from(flags >> 3),
        }
    };
    let text = with_front_matter(flags & 3, rest);
    check_document(Format::Markdown, &text, &config);
    let plain = check_document(Format::PlainText, &text, &config);
    check_plain_text_coverage(&text, &plain);
    check_plain_text_whitespace_edit(&text, &plain, &config);
    TameMarkdown::new(flags & 1 == 1, rest).check(&config);
}

/// The document text: `rest` decoded, behind front matter when `mode` asks for it. The front
/// matter is the data up to its first NUL byte (or its first quarter).
fn with_front_matter(mode: u8, rest: &[u8]) -> String {
    if mode == 0 {
        return String::from_utf8_lossy(rest).into_owned();
    }
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len() / 4);
    let front = String::from_utf8_lossy(&rest[..split]);
    let body = String::from_utf8_lossy(rest.get(split + 1..).unwrap_or_default());
    match mode {
        1 => format!("---\n{front}\n---\n{body}"),
        2 => format!("+++\n{front}\n+++\n{body}"),
        _ => {
            let title = front.lines().next().unwrap_or_default();
            let tags: Vec<&str> = front.lines().skip(1).collect();
            format!(
                "---\ntitle: {title}\ntags: [{}]\n---\n{body}",
                tags.join(", ")
            )
        }
    }
}

/// The properties every chunked document has, whatever its text:
/// chunking is deterministic; each ID is `ids::chunk_id` of the chunk's heading path and text;
/// no chunk is empty once normalised; headings are normalised and at most `MAX_HEADING_CHARS`
/// long (each chunk carries them); ordinals count from 0; each chunk's text is a piece of the
/// source (without a BOM), the pieces come in document order and do not overlap, and `lines`
/// names the lines each piece spans.
pub fn check_document(kind: Format, text: &str, config: &ChunkConfig) -> ChunkedDocument {
    let doc = chunk_document(kind, text, config);
    assert_eq!(
        doc,
        chunk_document(kind, text, config),
        "chunking is not deterministic"
    );
    let source = text.strip_prefix('\u{feff}').unwrap_or(text);
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(source.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let mut next = 0;
    for (i, chunk) in doc.chunks.iter().enumerate() {
        assert_eq!(chunk.ordinal as usize, i, "ordinals are not 0, 1, 2, …");
        assert_eq!(
            chunk.id,
            ids::chunk_id(&chunk.heading_path, &chunk.text),
            "the ID is not chunk_id(heading path, text)"
        );
        assert!(
            !ids::normalise(&chunk.text).is_empty(),
            "chunk {i} has no text once normalised: {:?}",
            chunk.text
        );
        assert_eq!(
            chunk.text.trim_end(),
            chunk.text,
            "chunk text is not trimmed"
        );
        for heading in &chunk.heading_path {
            assert!(
                heading.chars().count() <= groundidx::chunk::MAX_HEADING_CHARS,
                "a heading of {} characters",
                heading.chars().count()
            );
            assert_eq!(
                &ids::normalise(heading),
                heading,
                "heading is not normalised"
            );
        }
        let (first, last) = chunk.lines;
        assert!(
            first >= 1 && first as usize <= line_starts.len(),
            "chunk {i} starts on line {first} of {}",
            line_starts.len()
        );
        let line_start = line_starts[first as usize - 1];
        let line_end = line_starts
            .get(first as usize)
            .copied()
            .unwrap_or(source.len());
        let from = next.max(line_start);
        let found = source[from..]
            .find(chunk.text.as_str())
            .map(|at| from + at)
            .filter(|&at| at < line_end.max(line_start + 1))
            .unwrap_or_else(|| {
                panic!(
                    "chunk {i} ({:?}, line {first}) is not in the source on its line after the chunk before it",
                    chunk.text
                )
            });
        let newlines = chunk.text.matches('\n').count();
        assert_eq!(
            last as usize,
            first as usize + newlines,
            "chunk {i} spans lines {first}..={last} but has {newlines} line breaks"
        );
        next = found + chunk.text.len();
    }
    doc
}

/// Every character of the text but white space (as identity sees it: control characters too).
fn ink(text: &str) -> String {
    text.chars().filter(|&c| !ids::is_space(c)).collect()
}

/// Plain text loses nothing: the chunks hold every non-white-space character of the text, once
/// each and in order (the proptest `chunks_cover_the_text_in_order`, for any text).
fn check_plain_text_coverage(text: &str, doc: &ChunkedDocument) {
    let covered: String = doc.chunks.iter().map(|c| ink(&c.text)).collect();
    let source = text.strip_prefix('\u{feff}').unwrap_or(text);
    assert_eq!(
        covered,
        ink(source),
        "plain-text chunks do not cover the text"
    );
    assert_eq!(
        doc.chunks.is_empty(),
        doc.warnings.iter().any(|w| w == "no text to index"),
        "a plain-text document without chunks warns, and only then"
    );
}

/// A white-space edit that keeps every line (more spaces between words, spaces at line ends)
/// moves no boundary of a plain-text document: the same chunks, over the same lines, with the
/// same normalised text; and each chunk's ID changes exactly when its bytes do.
fn check_plain_text_whitespace_edit(text: &str, doc: &ChunkedDocument, config: &ChunkConfig) {
    let edited = text.replace(' ', "  ").replace('\n', " \n");
    let after = chunk_document(Format::PlainText, &edited, config);
    assert_eq!(
        doc.chunks.len(),
        after.chunks.len(),
        "a white-space edit changed the number of plain-text chunks"
    );
    for (before, after) in doc.chunks.iter().zip(&after.chunks) {
        assert_eq!(
            before.lines, after.lines,
            "a white-space edit moved a boundary"
        );
        assert_eq!(
            ids::normalise(&before.text),
            ids::normalise(&after.text),
            "a white-space edit moved a boundary"
        );
        assert_eq!(
            before.text == after.text,
            before.id == after.id,
            "a chunk ID does not follow its bytes"
        );
    }
}

/// Markdown made of words, spaces, line breaks, list items, quotes and `##` headings: a
/// document whose every non-heading character must land in a chunk, under the right heading.
struct TameMarkdown {
    text: String,
    /// The same text without front matter and headings: what the chunks must cover.
    body: String,
    /// Byte offset of each heading line in `text`, with its name.
    headings: Vec<(usize, String)>,
    title: Option<String>,
}

impl TameMarkdown {
    fn new(with_title: bool, data: &[u8]) -> TameMarkdown {
        let mut text = String::new();
        let mut body = String::new();
        let mut headings = Vec::new();
        let title = with_title.then(|| "t".to_string());
        if with_title {
            text.push_str("---\ntitle: t\n---\n");
        }
        for &b in data {
            let letter = char::from(b'a' + b % 26);
            let piece: String = match b % 40 {
                0..=25 => letter.to_string(),
                26..=30 => " ".into(),
                31..=33 => "\n".into(),
                34 => format!("- {letter}"),
                35 => "> ".into(),
                36 => {
                    let name = format!("h{}", headings.len());
                    text.push_str("\n\n");
                    headings.push((text.len(), name.clone()));
                    text.push_str(&format!("## {name}\n\n"));
                    continue;
                }
                37 => "\n\n".into(),
                38 => "é".into(),
                _ => "e\u{301}".into(),
            };
            text.push_str(&piece);
            body.push_str(&piece);
        }
        TameMarkdown {
            text,
            body,
            headings,
            title,
        }
    }

    fn check(&self, config: &ChunkConfig) {
        let doc = check_document(Format::Markdown, &self.text, config);
        let covered: String = doc.chunks.iter().map(|c| ink(&c.text)).collect();
        assert_eq!(
            covered,
            ink(&self.body),
            "Markdown chunks do not cover the body"
        );
        let mut from = 0;
        // The headings before `from`: chunks come in order, so this only moves forward.
        let mut above = 0;
        for chunk in &doc.chunks {
            let at = from
                + self.text[from..]
                    .find(chunk.text.as_str())
                    .expect("checked by check_document");
            from = at + chunk.text.len();
            while above < self.headings.len() && self.headings[above].0 < at {
                above += 1;
            }
            let mut expected: Vec<String> = self.title.iter().cloned().collect();
            if let Some((_, name)) = above.checked_sub(1).map(|i| &self.headings[i]) {
                expected.push(name.clone());
            }
            assert_eq!(chunk.heading_path, expected, "chunk {:?}", chunk.text);
        }
        // An edit of the last section keeps the IDs of the sections before it (the proptest
        // `an_unrelated_section_edit_keeps_the_other_ids`).
        if let Some(&(last, _)) = self.headings.last() {
            let before = |doc: &ChunkedDocument, text: &str| -> Vec<ChunkId> {
                let mut from = 0;
                let mut ids = Vec::new();
                for chunk in &doc.chunks {
                    let at = from + text[from..].find(chunk.text.as_str()).expect("in order");
                    from = at + chunk.text.len();
                    if at < last {
                        ids.push(chunk.id);
                    }
                }
                ids
            };
            let appended = format!("{}\n\nzz yy\n", self.text);
            let after = chunk_document(Format::Markdown, &appended, config);
            assert_eq!(
                before(&doc, &self.text),
                before(&after, &appended),
                "an edit of the last section changed the IDs before it"
            );
        }
        // Spaces at line ends change no block and move no boundary; an ID changes exactly
        // when its chunk's bytes do.
        let edited = self.text.replace('\n', "  \n");
        let after = chunk_document(Format::Markdown, &edited, config);
        let shape = |doc: &ChunkedDocument| -> Vec<((u32, u32), String)> {
            doc.chunks
                .iter()
                .map(|c| (c.lines, ids::normalise(&c.text)))
                .collect()
        };
        assert_eq!(
            shape(&doc),
            shape(&after),
            "spaces at line ends moved a Markdown chunk boundary"
        );
        for (before, after) in doc.chunks.iter().zip(&after.chunks) {
            assert_eq!(
                before.text == after.text,
                before.id == after.id,
                "a chunk ID does not follow its bytes"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// normalise

/// `ids::normalise` and the IDs built on it.
///
/// The text is the bytes decoded lossily; its lines are also read as a heading path (all but
/// the last line) and a passage (the last line).
pub fn normalise(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let normal = ids::normalise(&text);
    assert_eq!(
        ids::normalise(&normal),
        normal,
        "normalise is not idempotent"
    );
    assert!(
        !normal.starts_with(' ') && !normal.ends_with(' ') && !normal.contains("  "),
        "white space is not folded: {normal:?}"
    );
    assert!(
        normal.chars().all(|c| c == ' ' || !ids::is_space(c)),
        "white space or a control character other than a space survives: {normal:?}"
    );
    assert!(
        unicode_normalization::is_nfc(&normal),
        "normalised text is not NFC: {normal:?}"
    );
    // chunk_id separates headings with 0x1f and the path from the text with 0x00: normalised
    // text must not contain them, or two heading paths could hash the same bytes.
    assert!(
        !normal.contains(['\u{0}', '\u{1f}']),
        "normalised text contains a separator byte of chunk_id: {normal:?}"
    );

    // The text key depends on the normalised text only; a chunk ID on the normalised heading
    // path and the exact passage, so two whitespace variants of a passage are two chunks.
    assert_eq!(ids::text_key(&text), ids::text_key(&normal));
    let lines: Vec<&str> = text.split('\n').collect();
    let (passage, path) = lines.split_last().expect("split gives one part at least");
    let path: Vec<String> = path.iter().map(std::string::ToString::to_string).collect();
    let normal_path: Vec<String> = path.iter().map(|h| ids::normalise(h)).collect();
    let id = ids::chunk_id(&path, passage);
    assert_eq!(id, ids::chunk_id(&normal_path, passage));
    assert_eq!(
        id == ids::chunk_id(&normal_path, &ids::normalise(passage)),
        *passage == ids::normalise(passage),
        "a chunk ID does not name the exact passage"
    );

    // A white-space-only edit changes no normal form, text key or heading; it changes the ID
    // of the passage it edits.
    let edited = whitespace_edit(&text);
    assert_eq!(
        ids::normalise(&edited),
        normal,
        "a white-space edit changed the normal form"
    );
    assert_eq!(ids::text_key(&edited), ids::text_key(&text));
    let edited_path: Vec<String> = path.iter().map(|h| whitespace_edit(h)).collect();
    assert_eq!(ids::chunk_id(&edited_path, passage), id);
    assert_ne!(ids::chunk_id(&path, &whitespace_edit(passage)), id);

    // An ID's hex form round-trips.
    assert_eq!(id.to_hex().parse::<ChunkId>(), Ok(id));
}

/// Every run of white space replaced by another, with white space added at both ends.
fn whitespace_edit(text: &str) -> String {
    let mut out = String::from(" \t\n");
    for c in text.chars() {
        if c.is_whitespace() {
            out.push_str("\u{a0} \r\n\t\u{3000}");
        } else {
            out.push(c);
        }
    }
    out.push_str("\n\u{2028} ");
    out
}

// ---------------------------------------------------------------------------------------------
// query

/// A store with a few documents, opened for reading, in a temporary folder.
pub struct QueryFixture {
    pub reader: StoreReader,
    _dir: tempfile::TempDir,
}

/// The documents of the query fixture: the sample documents, and passages repeated under
/// other headings and in other files, so that folding has work to do.
const FIXTURE_DOCS: &[(&str, &str)] = &[
    (
        "handbook/backups.md",
        include_str!("../../sample_docs/handbook/backups.md"),
    ),
    (
        "handbook/deploys.md",
        include_str!("../../sample_docs/handbook/deploys.md"),
    ),
    (
        "handbook/key-rotation.md",
        include_str!("../../sample_docs/handbook/key-rotation.md"),
    ),
    (
        "handbook/support.md",
        include_str!("../../sample_docs/handbook/support.md"),
    ),
    (
        "notes/glossary.txt",
        include_str!("../../sample_docs/notes/glossary.txt"),
    ),
    (
        "notes/support.md",
        include_str!("../../sample_docs/notes/support.md"),
    ),
    (
        "notes/faq.md",
        include_str!("../../sample_docs/notes/faq.md"),
    ),
    ("README.md", include_str!("../../sample_docs/README.md")),
    (
        "repeats/a.md",
        "---\ntags: [ops, Repeat]\n---\n# Alpha\n\nThe same passage, word for word.\n\n## Beta\n\nThe same passage, word for word.\n\n## Gamma\n\nThe  same passage,\nword for word.\n",
    ),
    (
        "repeats/b.md",
        "# Alpha\n\nThe same passage, word for word.\n\n# Délta \"quoted\" + - : ( ) AND OR\n\nCafé crème, naïve façade, Ǆ, ﬁ, 東京, emoji 🙂 and \u{1f} control.\n",
    ),
];

impl QueryFixture {
    /// Ingests `FIXTURE_DOCS` into a new store and opens a reader on it.
    pub fn new() -> QueryFixture {
        use groundidx::ingest::{IngestConfig, NoProgress, ingest};
        use groundidx::store::{LockWait, Store};

        let dir = tempfile::tempdir().expect("temp dir");
        let docs: PathBuf = dir.path().join("docs");
        for (path, text) in FIXTURE_DOCS {
            let path = docs.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write doc");
        }
        let store_dir = dir.path().join("store");
        let (mut store, _) =
            Store::open_writer(&store_dir, LockWait::NoWait, Default::default(), None)
                .expect("open store");
        ingest(&mut store, &[docs], &IngestConfig::default(), &NoProgress).expect("ingest");
        store.close().expect("close store");
        let reader = StoreReader::open(&store_dir).expect("open reader");
        QueryFixture { reader, _dir: dir }
    }
}

impl Default for QueryFixture {
    fn default() -> Self {
        QueryFixture::new()
    }
}

/// A search as the CLI and the agent tool run it, on the fixture's store.
///
/// The first two bytes are `top_k` (0 to 1,100, so out-of-range values too), the third picks a
/// filter, the rest is the query text, decoded lossily. The search must not fail for a valid
/// `top_k` and must refuse any other; it returns at most `top_k` hits, best first, no chunk
/// twice and no passage twice, each a chunk the store holds. The same query through the
/// `search_docs` tool gives the same hits.
pub fn query(fixture: &QueryFixture, data: &[u8]) {
    let [a, b, filter, rest @ ..] = data else {
        return;
    };
    let top_k = usize::from(u16::from_le_bytes([*a, *b])) % 1_101;
    let query = String::from_utf8_lossy(rest).into_owned();
    let filter = match filter % 4 {
        0 | 1 => ChunkFilter::default(),
        2 => ChunkFilter {
            path_prefix: Some("handbook/".into()),
            ..ChunkFilter::default()
        },
        _ => ChunkFilter {
            tags: vec!["ops".into()],
            ..ChunkFilter::default()
        },
    };
    let request = SearchRequest {
        query: query.clone(),
        top_k,
        filter: filter.clone(),
        mode: None,
        min_score: None,
    };
    let result = search::search(&fixture.reader, &request);
    if top_k == 0 || top_k > search::MAX_TOP_K {
        assert!(
            matches!(result, Err(groundidx::Error::Usage(_))),
            "top_k {top_k} was not refused"
        );
        return;
    }
    let response = result.unwrap_or_else(|err| panic!("search {query:?} failed: {err}"));
    let hits = &response.hits;
    assert!(hits.len() <= top_k, "{} hits for top_k {top_k}", hits.len());
    let mut ids = HashSet::new();
    let mut passages = HashSet::new();
    for (i, hit) in hits.iter().enumerate() {
        assert!(
            ids.insert(hit.chunk_id.clone()),
            "chunk {} twice",
            hit.chunk_id
        );
        assert!(
            passages.insert(ids::text_key(&hit.text)),
            "passage {:?} twice",
            hit.text
        );
        assert!(hit.score.is_finite(), "score {}", hit.score);
        if i > 0 {
            assert!(hits[i - 1].score >= hit.score, "hits are not best first");
        }
        assert!(!hit.paths.is_empty(), "a hit without a path");
        if let Some(prefix) = &filter.path_prefix {
            assert!(
                hit.paths.iter().any(|p| p.starts_with(prefix.as_str())),
                "hit {:?} is outside {prefix}",
                hit.paths
            );
        }
        assert!(1 <= hit.lines[0] && hit.lines[0] <= hit.lines[1]);
        let id: ChunkId = hit.chunk_id.parse().expect("hit IDs are hex");
        let record = search::get_chunk(&fixture.reader, &id)
            .expect("get_chunk")
            .expect("a hit is a chunk the store holds");
        assert_eq!(record.text, hit.text);
    }

    // The agent tool: the same request, when its stricter limits admit it.
    let mut arguments = json!({"query": query, "top_k": top_k});
    if let Some(prefix) = &filter.path_prefix {
        arguments["path_prefix"] = json!(prefix);
    }
    if !filter.tags.is_empty() {
        arguments["tags"] = json!(filter.tags);
    }
    if let Ok(request) = tools::parse("search_docs", &arguments) {
        let ToolRequest::SearchDocs(request) = request else {
            panic!("search_docs arguments without a cursor parse as a first page");
        };
        let reader = &fixture.reader;
        let answer = tools::search_docs(
            reader,
            &reader.index().snapshot(),
            reader.vectors().as_deref(),
            &request,
            0,
            None,
        )
        .expect("search_docs runs");
        let body: Value = serde_json::from_str(&answer.body).expect("the answer is JSON");
        let tool_hits = body["hits"].as_array().expect("hits");
        assert_eq!(answer.n_hits as usize, tool_hits.len());
        assert!(tool_hits.len() <= top_k);
        // The tool trims the query; the hits are those of the trimmed query.
        if query.trim() == query {
            let tool_ids: Vec<&str> = tool_hits
                .iter()
                .map(|h| h["chunk_id"].as_str().expect("chunk_id"))
                .collect();
            let ids: Vec<&str> = hits.iter().map(|h| h.chunk_id.as_str()).collect();
            assert_eq!(tool_ids, ids, "the tool and the search disagree");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// request

/// Decoding of agent tool calls, and the canonical JSON their fingerprints hash.
///
/// The bytes are JSON (anything else is skipped). The value goes through `tools::parse` for
/// every tool (and, when it looks like `{"tool", "arguments"}`, as that call), and through
/// `canonical_json`. Strings in the value are also tried as idempotency keys and durations.
pub fn request(data: &[u8]) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    for tool in tools::TOOL_NAMES.into_iter().chain(["", "search"]) {
        check_parse(tool, &value);
    }
    if let Some(tool) = value.get("tool").and_then(Value::as_str)
        && let Some(arguments) = value.get("arguments")
    {
        check_parse(tool, arguments);
    }
    check_canonical(&value);
    for text in strings(&value) {
        check_key(text);
        let _ = groundidx::clock::parse_duration(text);
        let _ = text.parse::<groundidx::agent::RateLimit>();
    }
}

/// `tools::parse` accepts only what its limits allow, and its result is already clean.
fn check_parse(tool: &str, arguments: &Value) {
    match tools::parse(tool, arguments) {
        Ok(ToolRequest::SearchDocs(request)) => {
            assert_eq!(tool, "search_docs");
            assert!(arguments.is_object());
            assert!(!request.query.is_empty());
            assert_eq!(request.query.trim(), request.query);
            assert!(request.query.chars().count() <= tools::MAX_QUERY_CHARS);
            assert!((1..=search::MAX_TOP_K).contains(&request.top_k));
            assert!(request.filter.tags.len() <= 32);
            if let Some(prefix) = &request.filter.path_prefix {
                assert!(!prefix.is_empty() && !prefix.starts_with("./"));
            }
            // Parsing is a function of the value.
            assert_eq!(
                tools::parse(tool, arguments),
                Ok(ToolRequest::SearchDocs(request))
            );
        }
        Ok(ToolRequest::SearchPage { request, cursor }) => {
            assert_eq!(tool, "search_docs");
            assert_eq!(arguments["cursor"].as_str(), Some(cursor.as_str()));
            assert!((1..=search::MAX_TOP_K).contains(&request.top_k));
        }
        Ok(ToolRequest::GetChunk(id)) => {
            assert_eq!(tool, "get_chunk");
            assert_eq!(
                Some(id.to_hex().as_str()),
                arguments["chunk_id"].as_str(),
                "get_chunk accepted another spelling of an ID"
            );
        }
        Ok(ToolRequest::ReadDocument(request)) => {
            assert_eq!(tool, "read_document");
            assert!(
                (tools::read::MIN_MAX_CHARS..=tools::read::MAX_MAX_CHARS)
                    .contains(&request.max_chars)
            );
            match &request.span {
                tools::read::Span::Lines(first, last) | tools::read::Span::Pages(first, last) => {
                    assert!(1 <= *first && first <= last, "{:?}", request.span);
                }
                tools::read::Span::Around(id, around) => {
                    assert_eq!(Some(id.to_hex().as_str()), arguments["chunk_id"].as_str());
                    assert!(*around <= tools::read::MAX_AROUND);
                }
                tools::read::Span::Whole => assert!(request.path.is_some()),
            }
            assert_eq!(
                tools::parse(tool, arguments),
                Ok(ToolRequest::ReadDocument(request))
            );
        }
        Ok(ToolRequest::ListDocuments(request)) => {
            assert_eq!(tool, "list_documents");
            assert!((1..=tools::read::MAX_LIMIT).contains(&request.limit));
            assert_eq!(
                tools::parse(tool, arguments),
                Ok(ToolRequest::ListDocuments(request))
            );
        }
        Err(_) => {}
    }
}

/// `canonical_json` is JSON that parses back to the same value (numbers compared by value: JCS
/// writes `1.0` as `1`), is its own canonical form, and does not depend on member order.
///
/// serde_json, as groundidx builds it, parses a decimal number close to, but not always to, the
/// nearest `f64` (that takes its `float_roundtrip` feature). So a fraction or a large number
/// may come back a little off through serde_json; through Rust's own (correctly rounded) parser
/// every double must come back exactly. Only an exact round trip is required to be idempotent;
/// member order is compared on values whose numbers went through the same text.
fn check_canonical(value: &Value) {
    for number in numbers(value) {
        if let Some(double) = number.as_f64().filter(|_| number.is_f64()) {
            let text = groundidx::agent::canonical_json(&Value::Number(number.clone()));
            assert_eq!(
                text.parse::<f64>(),
                Ok(double),
                "{text} is not the double {double:e}"
            );
        }
    }
    let canonical = groundidx::agent::canonical_json(value);
    let parsed: Value = serde_json::from_str(&canonical)
        .unwrap_or_else(|err| panic!("canonical JSON {canonical:?} does not parse: {err}"));
    assert!(
        same_value(value, &parsed, false),
        "canonical JSON {canonical:?} parses to another value"
    );
    if same_value(value, &parsed, true) {
        assert_eq!(
            groundidx::agent::canonical_json(&parsed),
            canonical,
            "canonical JSON is not idempotent"
        );
    }
    assert!(
        !has_space_outside_strings(&canonical),
        "canonical JSON has white space: {canonical:?}"
    );
    let reversed: Value =
        serde_json::from_str(&reversed_text(value)).expect("reversed text parses");
    let value: Value = serde_json::from_str(&value.to_string()).expect("JSON text parses");
    let canonical = groundidx::agent::canonical_json(&value);
    assert_eq!(
        groundidx::agent::canonical_json(&reversed),
        canonical,
        "member order changed the canonical form"
    );
    let fingerprint = |arguments: &Value| {
        ids::fingerprint(
            groundidx::agent::canonical_json(
                &json!({"tool": "search_docs", "arguments": arguments}),
            )
            .as_bytes(),
        )
    };
    assert_eq!(fingerprint(&value), fingerprint(&reversed));
}

/// Whether JSON text has white space between its tokens.
fn has_space_outside_strings(json: &str) -> bool {
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c.is_whitespace() {
            return true;
        }
    }
    false
}

/// Equal as JSON values, numbers compared by their value: exactly, or to within serde_json's
/// parsing error.
fn same_value(a: &Value, b: &Value, exact: bool) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x == y || (!exact && (x - y).abs() <= 1e-14 * x.abs().max(y.abs()))
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y, exact))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w, exact)))
        }
        _ => a == b,
    }
}

/// The JSON text of `value` with every object's members in reverse order.
fn reversed_text(value: &Value) -> String {
    match value {
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(reversed_text).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => {
            let members: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), reversed_text(v)))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        other => other.to_string(),
    }
}

/// Every number in a value.
fn numbers(value: &Value) -> Vec<&serde_json::Number> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Number(n) => out.push(n),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    out
}

/// Every string in a value, keys included.
fn strings(value: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(s) => out.push(s.as_str()),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    out.push(key.as_str());
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
    out
}

/// A key is valid exactly when it has 1 to 255 visible ASCII characters.
fn check_key(key: &str) {
    let valid = (1..=groundidx::agent::MAX_KEY_LEN).contains(&key.len())
        && key.bytes().all(|b| b.is_ascii_graphic());
    assert_eq!(
        groundidx::agent::validate_key(key).is_ok(),
        valid,
        "validate_key({key:?})"
    );
}

// ---------------------------------------------------------------------------------------------
// pdf, asciidoc

/// The limits the extractor targets run under: small, so a cost beyond them shows.
fn extractor_limits() -> groundidx::extract::Limits {
    groundidx::extract::Limits {
        max_depth: 64,
        max_text_bytes: 1 << 20,
        time: std::time::Duration::from_secs(10),
        max_memory: 512 << 20,
    }
}

/// The properties every extraction of `data` keeps: deterministic; one location per line of
/// the text; every unit's range inside the text, on character boundaries, headings' ranges
/// holding their text; the text at most `max_ratio` times the input (plus a little) and
/// within `max_text_bytes`. Returns the extraction for further checks.
fn check_extraction(
    format: Format,
    data: &[u8],
    max_ratio: usize,
) -> Result<groundidx::extract::Extracted, String> {
    use groundidx::extract::{Locations, Structure, Unit, extract_here};
    let limits = extractor_limits();
    let first = extract_here(format, data, &limits);
    let again = extract_here(format, data, &limits);
    let extracted = match (&first, &again) {
        (Ok(a), Ok(b)) => {
            // A deadline that passed in one run only may cut one text short; the limits above
            // leave seconds for inputs of fuzzer size.
            assert_eq!(a, b, "extraction is deterministic");
            a.clone()
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "the same error twice");
            return first;
        }
        _ => panic!("one run read it, the other did not: {first:?} / {again:?}"),
    };
    let text = &extracted.text;
    assert!(
        text.len() <= max_ratio * data.len() + 4096,
        "{} bytes of text from {} bytes",
        text.len(),
        data.len()
    );
    assert!(
        text.len() <= limits.max_text_bytes,
        "text within max_text_bytes"
    );
    match &extracted.locations {
        Locations::Mapped(locations) => {
            assert_eq!(
                locations.len(),
                text.lines().count(),
                "one location per line"
            );
        }
        Locations::SameLines => {}
    }
    if let Structure::Units(units) = &extracted.structure {
        let mut last_end = 0;
        for unit in units {
            let range = match unit {
                Unit::Heading {
                    text: heading,
                    range,
                    ..
                } => {
                    assert_eq!(&text[range.clone()], heading, "a heading's range holds it");
                    range
                }
                Unit::Body { range } | Unit::Markup { range } => range,
            };
            assert!(
                range.start <= range.end && range.end <= text.len(),
                "{range:?} in the text"
            );
            assert!(text.is_char_boundary(range.start) && text.is_char_boundary(range.end));
            assert!(range.start >= last_end, "units in order, apart");
            last_end = range.end;
        }
    }
    Ok(extracted)
}

/// PDF: arbitrary bytes, and the bytes after a minimal valid header and page tree (so the
/// fuzzer reaches the object parser and the content-stream interpreter). The properties of
/// `check_extraction`, with text bounded by `max_text_bytes` (a compressed stream may inflate
/// a thousand times, so the ratio is that of Flate). Run with `-rss_limit_mb=512`: the memory
/// a hostile PDF costs in-process is the parser's, which the child process bounds in a run.
pub fn check_pdf(data: &[u8]) {
    let _ = check_extraction(Format::Pdf, data, 1100);
    let mut framed = b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n\
        2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n\
        3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >> endobj\n\
        4 0 obj << >> stream\n"
        .to_vec();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\nendstream endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n");
    let _ = check_extraction(Format::Pdf, &framed, 1100);
}

/// AsciiDoc: bytes decoded lossily as an AsciiDoc file. The properties of `check_extraction`,
/// with the text at most 4 times the input (attribute references may double it); the title,
/// when there is one, is a single folded line.
pub fn check_asciidoc(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let extracted =
        check_extraction(Format::AsciiDoc, text.as_bytes(), 4).expect("AsciiDoc is always read");
    if let Some(title) = &extracted.meta.title {
        assert!(!title.contains('\n'), "a title is one line");
    }
}

// ---------------------------------------------------------------------------------------------
// html, rst

/// The HTML extractor on arbitrary text: see `check_extractor`.
pub fn check_html(data: &[u8]) {
    check_extractor(groundidx::format::Format::Html, data);
}

/// The reStructuredText extractor on arbitrary text: see `check_extractor`.
pub fn check_rst(data: &[u8]) {
    check_extractor(groundidx::format::Format::Rst, data);
}

/// The most text an extractor may write per byte of input (and a little over, for a tiny
/// input): `<td>` becomes ` | `, `.. deprecated::` becomes "Deprecated since version", and units
/// are joined by blank lines, so no reader comes near it unless it repeats or expands input.
pub const MAX_TEXT_PER_INPUT_BYTE: usize = 4;

/// An extractor of a text format on `data` (decoded lossily), with the default limits and with
/// small ones (nesting 8, 4 KiB of text): it never fails or panics; it is deterministic; its
/// locations have exactly one entry per line of its text, each a line of the input; every unit's
/// range lies in the text on character boundaries, in order; the text is at most
/// `MAX_TEXT_PER_INPUT_BYTE` times the input (and within the text limit); and the chunker takes
/// what it gives. Run with `-rss_limit_mb=512`: the cost must stay bounded by the input's size.
pub fn check_extractor(format: groundidx::format::Format, data: &[u8]) {
    use groundidx::extract::{Limits, Locations, Structure, Unit, extract_here};

    let text = String::from_utf8_lossy(data);
    let input_lines = text.lines().count().max(1) + text.matches('\r').count();
    let small = Limits {
        max_depth: 8,
        max_text_bytes: 4096,
        ..Limits::default()
    };
    for limits in [Limits::default(), small] {
        let extracted = extract_here(format, text.as_bytes(), &limits)
            .unwrap_or_else(|err| panic!("{format} extractor refused UTF-8 text: {err}"));
        let again = extract_here(format, text.as_bytes(), &limits).expect("second run");
        assert_eq!(extracted, again, "{format} extraction is not deterministic");
        let out = &extracted.text;
        assert!(
            out.len() <= MAX_TEXT_PER_INPUT_BYTE * text.len() + 64,
            "{format}: {} bytes of text from {} bytes",
            out.len(),
            text.len()
        );
        assert!(
            out.len() <= limits.max_text_bytes,
            "{format}: over the text limit"
        );
        let Locations::Mapped(locations) = &extracted.locations else {
            panic!("{format}: the text's lines are not mapped")
        };
        assert_eq!(
            locations.len(),
            out.lines().count(),
            "{format}: one location per line of {out:?}"
        );
        for at in locations {
            assert!(at.first <= at.last, "{format}: location {at:?}");
            assert!(
                (at.last as usize) <= input_lines + 1,
                "{format}: location {at:?} past the input's {input_lines} lines"
            );
        }
        let Structure::Units(units) = &extracted.structure else {
            panic!("{format}: no units")
        };
        let mut end = 0;
        for unit in units {
            let range = match unit {
                Unit::Heading { range, text, .. } => {
                    assert_eq!(&out[range.clone()], text, "{format}: heading text");
                    range
                }
                Unit::Body { range } | Unit::Markup { range } => range,
            };
            assert!(range.start >= end && range.start <= range.end && range.end <= out.len());
            assert!(out.is_char_boundary(range.start) && out.is_char_boundary(range.end));
            end = range.end;
        }
        groundidx::chunk::chunk_extracted(
            format,
            &extracted,
            &groundidx::chunk::ChunkConfig::default(),
        );
    }
}
