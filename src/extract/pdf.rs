//! PDF: the text of each page, in reading order as the page's content stream draws it, with
//! the outline (bookmarks) as headings.
//!
//! The file is parsed by `lopdf` and each page's text drawn by `pdf-extract`'s content-stream
//! interpreter into `PageWriter`, our own output device, which decides where lines and
//! paragraphs break (from the glyphs' positions and font sizes) and stops a page, or the whole
//! file, when the text reaches `Limits::max_text_bytes` or the deadline passes.
//!
//! - Kept: every page's text, split into lines; a vertical jump well beyond the line spacing, a
//!   change of font size, or a move up the page (a new column) starts a new paragraph (a
//!   blank line). Each line's location is its page and its line in that page's text.
//! - Headings: the outline's entries (bounded in depth and count, loops cut), each at the
//!   level of its depth (at most 6), on its destination page, at the line that reads as its
//!   title (white space folded, case ignored, a leading section number such as "2.1" allowed,
//!   or the title wrapped over two lines); that line becomes the heading. An entry whose title
//!   is not found is placed after the headings before it on that page (at the page's start
//!   for the first). A PDF without an outline has no headings: font sizes are not guessed at.
//! - `meta.title`: the document information's /Title, unless empty or a producer's default
//!   ("untitled", "Microsoft Word - x.docx", a file name); else the first outline entry.
//! - Encrypted with a user password: `Err`; encrypted with an empty user password: read.
//!   A file lopdf cannot parse: `Err("not a readable PDF: …")`. No text on any page (a scan):
//!   `Ok` with a warning. A page that fails (or makes the reader panic) is left out with a
//!   warning, and the pages after it are still read.
//!
//! Not understood: images (no OCR), annotations and form fields, tagged-PDF structure, the
//! reading order of multi-column pages beyond the order the content stream draws in, tables
//! (cells come out as the stream draws them), hyphenation (a word broken at a line end stays
//! broken), and named destinations in a remote file. Text strings in PDFDocEncoding are read
//! as Latin-1 (the two differ in a few punctuation marks).
//!
//! Bounds here: the text (`Limits::max_text_bytes`, checked glyph by glyph), the deadline
//! (checked every few thousand glyphs and between pages), the outline's depth
//! (`Limits::max_depth`, at most 6 levels kept), entries (`MAX_OUTLINE_ENTRIES`) and the
//! name tree walked for its destinations (`MAX_NAME_TREE_NODES`). What the parser itself does
//! (recursion on deep objects, inflating a compressed stream, following a cyclic reference)
//! is bounded by the child process it runs in (`isolate`): memory, CPU time and wall time.

use std::collections::{BTreeMap, HashMap, HashSet};

use lopdf::{Dictionary, Document, Object, ObjectId};
use pdf_extract::{MediaBox, OutputDev, OutputError, Transform};

use super::{Deadline, Extracted, Limits, Location, Meta, TextBuilder, Unreadable, fold_space};

pub(crate) const VERSION: u32 = 2;

/// The most outline entries read; a longer outline is cut, with a warning.
const MAX_OUTLINE_ENTRIES: usize = 4096;

/// The most nodes of the destinations name tree walked to resolve named destinations.
const MAX_NAME_TREE_NODES: usize = 16_384;

/// The deepest outline level kept as such; deeper entries are headings of this level.
const MAX_HEADING_LEVEL: usize = 6;

/// How many glyphs pass between two looks at the deadline.
const GLYPHS_PER_DEADLINE_CHECK: u32 = 4096;

/// How many failed pages are named in warnings; the rest are counted.
const MAX_PAGE_WARNINGS: usize = 5;

/// The most outline entries × lines of a page searched for titles; past it the entries are
/// placed at the page's start (a hostile outline cannot make the search quadratic).
const MAX_TITLE_SEARCH: usize = 4_000_000;

/// Reads a PDF: see the module documentation for what is kept.
pub(crate) fn extract(
    bytes: &[u8],
    limits: &Limits,
    deadline: &Deadline,
) -> Result<Extracted, Unreadable> {
    let document = load(bytes)?;
    let pages = document.get_pages();
    let mut warnings = Vec::new();
    let (texts, failed_pages) = read_pages(&document, &pages, limits, deadline, &mut warnings);
    let outline = if deadline.passed() {
        Vec::new()
    } else {
        read_outline(&document, &pages, limits, &mut warnings)
    };
    let title = info_title(&document).or_else(|| {
        outline
            .iter()
            .map(|entry| fold_space(&entry.title))
            .find(|title| !title.is_empty())
    });
    if pages.is_empty() {
        warnings.push("it has no pages".to_string());
    } else if failed_pages == 0 && !texts.values().any(|text| !text.trim().is_empty()) {
        warnings.push(format!(
            "no text on any of its {} pages (a scanned or image-only PDF?)",
            pages.len()
        ));
    }
    let meta = Meta {
        title,
        ..Meta::default()
    };
    Ok(build_text(&texts, outline, limits).finish(meta, warnings))
}

/// Parses the file; an encrypted file that needs a password, or one lopdf cannot parse, is
/// unreadable.
fn load(bytes: &[u8]) -> Result<Document, Unreadable> {
    const ENCRYPTED: &str = "encrypted PDF (a password is needed to read it); skipped";
    let document = Document::load_mem(bytes).map_err(|err| match err {
        lopdf::Error::Decryption(_) | lopdf::Error::InvalidPassword => ENCRYPTED.to_string(),
        other => format!("not a readable PDF: {other}"),
    })?;
    // lopdf decrypts a file whose user password is empty as it loads; one that still says it
    // is encrypted needs a password.
    if document.is_encrypted() {
        return Err(ENCRYPTED.to_string());
    }
    Ok(document)
}

/// Why reading stopped before the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The text reached `Limits::max_text_bytes`.
    Full,
    /// The deadline passed.
    Time,
}

/// The text of every page read, by page number, from the pdf-extract interpreter, and how
/// many pages failed.
fn read_pages(
    document: &Document,
    pages: &BTreeMap<u32, ObjectId>,
    limits: &Limits,
    deadline: &Deadline,
    warnings: &mut Vec<String>,
) -> (BTreeMap<u32, String>, usize) {
    let mut writer = PageWriter::new(limits.max_text_bytes, *deadline);
    // One pass over the whole document first: `output_doc_page` walks the page tree on each
    // call, so page by page costs the square of the page count.
    let whole = run_guarded(|| pdf_extract::output_doc(document, &mut writer));
    let mut failed: Vec<(u32, String)> = Vec::new();
    if let Err(why) = whole
        && writer.stop.is_none()
    {
        // A page failed: keep the pages before it, and read the rest one by one.
        let failed_page = writer.page.unwrap_or(0);
        writer.discard_page();
        failed.push((failed_page, why));
        for &number in pages.keys().filter(|&&number| number > failed_page) {
            if writer.stop.is_some() {
                break;
            }
            if deadline.passed() {
                writer.stop = Some(Stop::Time);
                break;
            }
            let result =
                run_guarded(|| pdf_extract::output_doc_page(document, &mut writer, number));
            if let Err(why) = result
                && writer.stop.is_none()
            {
                writer.discard_page();
                failed.push((number, why));
            }
        }
    }
    writer.keep_page();
    for (page, why) in failed.iter().take(MAX_PAGE_WARNINGS) {
        warnings.push(format!(
            "page {page} could not be read ({why}); it is left out"
        ));
    }
    if failed.len() > MAX_PAGE_WARNINGS {
        warnings.push(format!(
            "{} more pages could not be read and are left out",
            failed.len() - MAX_PAGE_WARNINGS
        ));
    }
    match writer.stop {
        Some(Stop::Time) => warnings.push(format!(
            "took over {} s; the rest is left out",
            limits.time.as_secs()
        )),
        Some(Stop::Full) => warnings.push(format!(
            "its text is over {} bytes; the rest is left out",
            limits.max_text_bytes
        )),
        None => {}
    }
    (writer.pages, failed.len())
}

/// Runs the interpreter, a panic in it (a missing /MediaBox, a malformed page) turned into an
/// error for the page.
fn run_guarded(run: impl FnOnce() -> Result<(), OutputError>) -> Result<(), String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(panic) => Err(panic
            .downcast_ref::<&str>()
            .map(std::string::ToString::to_string)
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "the reader failed".to_string())),
    }
}

/// The output device pdf-extract draws each page into: glyphs become lines and paragraphs,
/// and the text is bounded.
struct PageWriter {
    /// The pages finished so far.
    pages: BTreeMap<u32, String>,
    /// The page being drawn, and its text.
    page: Option<u32>,
    text: String,
    /// Bytes of text the pages may still take.
    budget: usize,
    deadline: Deadline,
    glyphs: u32,
    stop: Option<Stop>,
    /// The page's height, to turn PDF's upward y into a downward one.
    height: f64,
    /// Where the last glyph ended, its baseline, its font size, and the gap between the last
    /// two lines of the paragraph (`None` at a paragraph's first line).
    last_end: f64,
    last_y: f64,
    last_size: f64,
    line_gap: Option<f64>,
    /// Whether the next glyph starts a text-showing operation (where spaces and breaks are
    /// decided).
    word_start: bool,
}

impl PageWriter {
    fn new(max_bytes: usize, deadline: Deadline) -> PageWriter {
        PageWriter {
            pages: BTreeMap::new(),
            page: None,
            text: String::new(),
            budget: max_bytes,
            deadline,
            glyphs: 0,
            stop: None,
            height: 0.0,
            last_end: 0.0,
            last_y: 0.0,
            last_size: 0.0,
            line_gap: None,
            word_start: false,
        }
    }

    /// Keeps the page being drawn (also a part of one, when reading stopped inside it).
    fn keep_page(&mut self) {
        if let Some(page) = self.page.take() {
            self.pages.insert(page, std::mem::take(&mut self.text));
        }
    }

    /// Drops the page being drawn, which failed; its bytes go back to the budget.
    fn discard_page(&mut self) {
        self.page = None;
        self.budget += self.text.len();
        self.text.clear();
    }

    fn write(&mut self, piece: &str) -> Result<(), OutputError> {
        if piece.len() > self.budget {
            self.stop = Some(Stop::Full);
            return Err(OutputError::FormatError(std::fmt::Error));
        }
        self.budget -= piece.len();
        self.text.push_str(piece);
        Ok(())
    }
}

impl OutputDev for PageWriter {
    fn begin_page(
        &mut self,
        page_num: u32,
        media_box: &MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.keep_page();
        if self.deadline.passed() {
            self.stop = Some(Stop::Time);
            return Err(OutputError::FormatError(std::fmt::Error));
        }
        self.page = Some(page_num);
        self.height = media_box.ury - media_box.lly;
        self.last_end = f64::MAX;
        self.last_y = 0.0;
        self.last_size = 0.0;
        self.line_gap = None;
        self.word_start = false;
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        self.keep_page();
        Ok(())
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        glyph: &str,
    ) -> Result<(), OutputError> {
        self.glyphs = self.glyphs.wrapping_add(1);
        if self.glyphs.is_multiple_of(GLYPHS_PER_DEADLINE_CHECK) && self.deadline.passed() {
            self.stop = Some(Stop::Time);
            return Err(OutputError::FormatError(std::fmt::Error));
        }
        // The glyph's origin on the page, y growing downwards, and its size on the page (the
        // side of a square of the area the font size takes under the text matrix).
        let x = trm.m31;
        let y = self.height - trm.m32;
        let scaled_x = font_size * (trm.m11 + trm.m21);
        let scaled_y = font_size * (trm.m12 + trm.m22);
        let size = (scaled_x * scaled_y).abs().sqrt();
        if !x.is_finite() || !y.is_finite() || !size.is_finite() {
            return Ok(());
        }
        if self.word_start && !self.text.is_empty() {
            let drop = y - self.last_y;
            let line_size = size.max(self.last_size).max(1.0);
            if drop.abs() > line_size * 0.5 {
                let resized = (size - self.last_size).abs() > self.last_size.max(size) * 0.2;
                let gap_jump = match self.line_gap {
                    Some(gap) => drop > gap * 1.3 + line_size * 0.1,
                    None => drop > line_size * 2.2,
                };
                if drop < 0.0 || resized || gap_jump {
                    self.write("\n\n")?;
                    self.line_gap = None;
                } else {
                    self.write("\n")?;
                    self.line_gap = Some(drop);
                }
            } else if x > self.last_end + line_size * 0.1 || x < self.last_end - line_size {
                self.write(" ")?;
            }
        }
        self.write(glyph)?;
        self.word_start = false;
        self.last_y = y;
        self.last_size = size;
        self.last_end = x + width * size;
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        self.word_start = true;
        Ok(())
    }

    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
}

/// An outline entry: its depth (1 the outermost), title and destination page.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OutlineEntry {
    level: usize,
    title: String,
    page: Option<u32>,
}

/// The outline's entries in order, depth first, bounded in depth and count, each node read
/// once (a cycle of /Next or /First is cut).
fn read_outline(
    document: &Document,
    pages: &BTreeMap<u32, ObjectId>,
    limits: &Limits,
    warnings: &mut Vec<String>,
) -> Vec<OutlineEntry> {
    let Ok(catalog) = document.catalog() else {
        return Vec::new();
    };
    let Some(outlines) = catalog
        .get(b"Outlines")
        .ok()
        .and_then(|o| resolve_dict(document, o))
    else {
        return Vec::new();
    };
    let page_numbers: HashMap<ObjectId, u32> = pages.iter().map(|(n, id)| (*id, *n)).collect();
    let mut destinations = NamedDestinations::default();
    let mut entries = Vec::new();
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut stack: Vec<(ObjectId, usize)> = Vec::new();
    if let Ok(first) = outlines.get(b"First").and_then(Object::as_reference) {
        stack.push((first, 1));
    }
    let mut cut = false;
    while let Some((id, level)) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        if entries.len() >= MAX_OUTLINE_ENTRIES {
            cut = true;
            break;
        }
        let Ok(node) = document.get_dictionary(id) else {
            continue;
        };
        if let Ok(next) = node.get(b"Next").and_then(Object::as_reference) {
            stack.push((next, level));
        }
        if let Ok(first) = node.get(b"First").and_then(Object::as_reference) {
            if level < limits.max_depth {
                stack.push((first, level + 1));
            } else {
                cut = true;
            }
        }
        let title = node
            .get(b"Title")
            .ok()
            .and_then(|o| resolve(document, o))
            .and_then(|o| o.as_str().ok())
            .map(decode_text_string)
            .unwrap_or_default();
        let page = destination_page(document, node, &page_numbers, &mut destinations);
        entries.push(OutlineEntry { level, title, page });
    }
    if cut {
        warnings.push(format!(
            "its outline is over {MAX_OUTLINE_ENTRIES} entries or {} levels deep; the rest is \
             left out",
            limits.max_depth
        ));
    }
    entries
}

/// The page an outline node's /Dest or /A (GoTo) action points to.
fn destination_page(
    document: &Document,
    node: &Dictionary,
    page_numbers: &HashMap<ObjectId, u32>,
    destinations: &mut NamedDestinations,
) -> Option<u32> {
    let destination = match node.get(b"Dest") {
        Ok(dest) => dest,
        Err(_) => {
            let action = resolve_dict(document, node.get(b"A").ok()?)?;
            if action.get(b"S").and_then(Object::as_name).ok()? != b"GoTo" {
                return None;
            }
            action.get(b"D").ok()?
        }
    };
    let destination = resolve(document, destination)?;
    let array = match destination {
        Object::Name(name) | Object::String(name, _) => destinations.get(document, name)?,
        other => destination_array(document, other)?,
    };
    let page = array.first()?.as_reference().ok()?;
    page_numbers.get(&page).copied()
}

/// The named destinations of a document (the catalog's /Dests dictionary and the /Names
/// tree's /Dests), read on first use, bounded in nodes, each node once.
#[derive(Default)]
struct NamedDestinations {
    names: Option<HashMap<Vec<u8>, Vec<Object>>>,
}

impl NamedDestinations {
    fn get(&mut self, document: &Document, name: &[u8]) -> Option<Vec<Object>> {
        self.names
            .get_or_insert_with(|| named_destinations(document))
            .get(name)
            .cloned()
    }
}

fn named_destinations(document: &Document) -> HashMap<Vec<u8>, Vec<Object>> {
    let mut names = HashMap::new();
    let Ok(catalog) = document.catalog() else {
        return names;
    };
    if let Some(dests) = catalog
        .get(b"Dests")
        .ok()
        .and_then(|o| resolve_dict(document, o))
    {
        for (name, value) in dests.iter().take(MAX_NAME_TREE_NODES) {
            if let Some(array) = destination_array(document, value) {
                names.insert(name.clone(), array);
            }
        }
    }
    let Some(root) = catalog
        .get(b"Names")
        .ok()
        .and_then(|o| resolve_dict(document, o))
        .and_then(|tree| tree.get(b"Dests").ok())
        .and_then(|o| resolve_dict(document, o))
    else {
        return names;
    };
    let mut stack = vec![root];
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut nodes = 0;
    while let Some(node) = stack.pop() {
        nodes += 1;
        if nodes > MAX_NAME_TREE_NODES {
            break;
        }
        if let Ok(pairs) = node.get(b"Names").and_then(Object::as_array) {
            for pair in pairs.chunks_exact(2) {
                if let (Ok(name), Some(array)) =
                    (pair[0].as_str(), destination_array(document, &pair[1]))
                {
                    names.insert(name.to_vec(), array);
                }
            }
        }
        if let Ok(kids) = node.get(b"Kids").and_then(Object::as_array) {
            for kid in kids {
                if let Ok(id) = kid.as_reference()
                    && seen.insert(id)
                    && let Ok(dict) = document.get_dictionary(id)
                {
                    stack.push(dict);
                }
            }
        }
    }
    names
}

/// A destination as its array (`[page /XYZ …]`), from the array or a dictionary's /D.
fn destination_array(document: &Document, value: &Object) -> Option<Vec<Object>> {
    match resolve(document, value)? {
        Object::Array(array) => Some(array.clone()),
        Object::Dictionary(dict) => match resolve(document, dict.get(b"D").ok()?)? {
            Object::Array(array) => Some(array.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Follows a reference (once: a reference to a reference is not followed further).
fn resolve<'a>(document: &'a Document, object: &'a Object) -> Option<&'a Object> {
    match object {
        Object::Reference(id) => document.get_object(*id).ok(),
        other => Some(other),
    }
}

fn resolve_dict<'a>(document: &'a Document, object: &'a Object) -> Option<&'a Dictionary> {
    resolve(document, object)?.as_dict().ok()
}

/// A PDF text string: UTF-16BE or UTF-8 behind their byte order marks, else PDFDocEncoding
/// (read as Latin-1).
fn decode_text_string(bytes: &[u8]) -> String {
    if let Some(utf16) = bytes.strip_prefix(&[0xfe, 0xff]) {
        let units: Vec<u16> = utf16
            .chunks_exact(2)
            .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
            .collect();
        return String::from_utf16_lossy(&units);
    }
    if let Some(utf8) = bytes.strip_prefix(&[0xef, 0xbb, 0xbf]) {
        return String::from_utf8_lossy(utf8).into_owned();
    }
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// The document information's /Title, unless empty or a producer's default.
fn info_title(document: &Document) -> Option<String> {
    let info = resolve_dict(document, document.trailer.get(b"Info").ok()?)?;
    let title = resolve(document, info.get(b"Title").ok()?)?.as_str().ok()?;
    let title = fold_space(&decode_text_string(title));
    (!is_placeholder_title(&title)).then_some(title)
}

/// Whether a /Title is a producer's default rather than the document's title.
fn is_placeholder_title(title: &str) -> bool {
    let lower = title.to_lowercase();
    let file_name = [
        ".doc", ".docx", ".pdf", ".tex", ".dvi", ".indd", ".odt", ".rtf", ".txt", ".ppt", ".pptx",
        ".md", ".html",
    ]
    .iter()
    .any(|extension| lower.ends_with(extension));
    lower.is_empty()
        || !lower.chars().any(char::is_alphabetic)
        || matches!(
            lower.as_str(),
            "untitled" | "untitled document" | "title" | "document"
        )
        || lower.starts_with("microsoft word - ")
        || lower.starts_with("microsoft powerpoint - ")
        || file_name
}

/// A heading placed in a page's text: before line `at` (0-based), consuming `lines` lines.
struct Placed {
    level: u8,
    title: String,
    at: usize,
    lines: usize,
}

/// The text: each page's paragraphs, with the outline's headings placed in them.
fn build_text(
    texts: &BTreeMap<u32, String>,
    outline: Vec<OutlineEntry>,
    limits: &Limits,
) -> TextBuilder {
    let mut by_page: BTreeMap<u32, Vec<OutlineEntry>> = BTreeMap::new();
    for entry in outline {
        if let Some(page) = entry.page
            && !fold_space(&entry.title).is_empty()
        {
            by_page.entry(page).or_default().push(entry);
        }
    }
    let mut builder = TextBuilder::new(limits);
    let empty = String::new();
    let page_numbers: std::collections::BTreeSet<u32> =
        texts.keys().chain(by_page.keys()).copied().collect();
    for page in page_numbers {
        if builder.is_full() {
            break;
        }
        let text = texts.get(&page).unwrap_or(&empty);
        let lines: Vec<&str> = text.split('\n').map(str::trim_end).collect();
        let headings = place_headings(&lines, by_page.remove(&page).unwrap_or_default());
        write_page(&mut builder, page, &lines, &headings);
    }
    builder
}

/// Where each of a page's outline entries goes among its lines.
fn place_headings(lines: &[&str], entries: Vec<OutlineEntry>) -> Vec<Placed> {
    let search = entries.len().saturating_mul(lines.len()) <= MAX_TITLE_SEARCH;
    let folded: Vec<String> = if search {
        lines.iter().map(|line| fold_key(line)).collect()
    } else {
        Vec::new()
    };
    let mut cursor = 0;
    let mut placed = Vec::with_capacity(entries.len());
    for entry in entries {
        let key = fold_key(&entry.title);
        let found = if search {
            find_title(&folded, cursor, &key)
        } else {
            None
        };
        let level = u8::try_from(entry.level.clamp(1, MAX_HEADING_LEVEL)).unwrap_or(1);
        match found {
            Some((at, count)) => {
                placed.push(Placed {
                    level,
                    title: entry.title,
                    at,
                    lines: count,
                });
                cursor = at + count;
            }
            None => placed.push(Placed {
                level,
                title: entry.title,
                at: cursor,
                lines: 0,
            }),
        }
    }
    placed
}

/// The first line at or after `from` that reads as `title` (alone, after a section number,
/// or wrapped onto the next line): its index and how many lines it spans.
fn find_title(folded: &[String], from: usize, title: &str) -> Option<(usize, usize)> {
    if title.is_empty() {
        return None;
    }
    for at in from..folded.len() {
        let line = &folded[at];
        if line.is_empty() {
            continue;
        }
        if line == title || strip_section_number(line) == title {
            return Some((at, 1));
        }
        if title.starts_with(strip_section_number(line))
            && let Some(next) = folded.get(at + 1)
            && !next.is_empty()
        {
            let joined = format!("{line} {next}");
            if joined == title || strip_section_number(&joined) == title {
                return Some((at, 2));
            }
        }
    }
    None
}

/// A line or title as titles are compared: white space folded, lower case.
fn fold_key(text: &str) -> String {
    fold_space(text).to_lowercase()
}

/// A folded line without a leading section number ("2", "2.1", "a.", "iv.").
fn strip_section_number(line: &str) -> &str {
    let Some((first, rest)) = line.split_once(' ') else {
        return line;
    };
    let number = first.trim_end_matches(['.', ')', ':']);
    let numeric = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let lettered =
        number.len() == 1 && first.len() == 2 && number.bytes().all(|b| b.is_ascii_alphabetic());
    let roman = !number.is_empty()
        && number.len() <= 5
        && first.ends_with('.')
        && number.bytes().all(|b| matches!(b, b'i' | b'v' | b'x'));
    if numeric || lettered || roman {
        rest
    } else {
        line
    }
}

/// Writes one page: its paragraphs (runs of non-blank lines), with its headings where they
/// were placed.
fn write_page(builder: &mut TextBuilder, page: u32, lines: &[&str], headings: &[Placed]) {
    let at = |index: usize| {
        let line = u32::try_from(index + 1).unwrap_or(u32::MAX);
        Location {
            page,
            first: line,
            last: line,
        }
    };
    let mut headings = headings.iter().peekable();
    let mut block: Vec<(&str, Location)> = Vec::new();
    let mut index = 0;
    while index <= lines.len() {
        while let Some(heading) = headings.next_if(|h| h.at <= index) {
            builder.block_lines(block.drain(..));
            builder.heading(
                heading.level,
                &heading.title,
                at(heading.at.min(lines.len().saturating_sub(1))),
            );
            index = index.max(heading.at + heading.lines);
        }
        let Some(line) = lines.get(index) else {
            break;
        };
        if line.trim().is_empty() {
            builder.block_lines(block.drain(..));
        } else {
            block.push((line, at(index)));
        }
        index += 1;
    }
    builder.block_lines(block);
}

#[cfg(test)]
mod tests {
    use super::{Limits, extract, is_placeholder_title, strip_section_number};
    use crate::extract::{Deadline, Extracted, Location, Locations, Structure, Unit};

    /// A PDF file of `objects` (numbered from 1; object 1 the catalog), with a correct
    /// cross-reference table; `trailer` is added to the trailer dictionary.
    fn pdf(objects: &[String], trailer: &str) -> Vec<u8> {
        let mut bytes = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (index, object) in objects.iter().enumerate() {
            offsets.push(bytes.len());
            bytes.extend_from_slice(format!("{} 0 obj\n{object}\nendobj\n", index + 1).as_bytes());
        }
        let xref = bytes.len();
        bytes.extend_from_slice(
            format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
        );
        for offset in offsets {
            bytes.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
        }
        bytes.extend_from_slice(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R {trailer} >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .as_bytes(),
        );
        bytes
    }

    fn stream(content: &str) -> String {
        format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        )
    }

    /// Text drawn line by line from the top of the page, 14 points apart; an empty line is a
    /// 40-point gap (a new paragraph).
    fn page_content(lines: &[&str]) -> String {
        let mut content = String::from("BT /F1 12 Tf 72 720 Td\n");
        for line in lines {
            if line.is_empty() {
                content.push_str("0 -26 Td\n");
            } else {
                content.push_str(&format!("0 -14 Td ({line}) Tj\n"));
            }
        }
        content.push_str("ET");
        content
    }

    /// A document of pages of text with an outline (`(level, title, page)`, page from 1) and
    /// an information /Title.
    fn document(
        pages: &[&[&str]],
        outline: &[(usize, &str, usize)],
        title: Option<&str>,
    ) -> Vec<u8> {
        // 1 catalog, 2 pages, 3 font, 4 outlines root, 5 info, then per page: page, contents;
        // then the outline items.
        let first_page = 6;
        let first_item = first_page + 2 * pages.len();
        let kids: Vec<String> = (0..pages.len())
            .map(|i| format!("{} 0 R", first_page + 2 * i))
            .collect();
        let mut objects = vec![
            "<< /Type /Catalog /Pages 2 0 R /Outlines 4 0 R >>".to_string(),
            format!(
                "<< /Type /Pages /Kids [{}] /Count {} >>",
                kids.join(" "),
                pages.len()
            ),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
            if outline.is_empty() {
                "<< /Type /Outlines /Count 0 >>".to_string()
            } else {
                format!("<< /Type /Outlines /First {first_item} 0 R >>")
            },
            format!("<< /Title ({}) >>", title.unwrap_or("")),
        ];
        for (index, lines) in pages.iter().enumerate() {
            objects.push(format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
                first_page + 2 * index + 1
            ));
            objects.push(stream(&page_content(lines)));
        }
        // Items: children follow their parent; /Next links siblings of the same parent.
        for (index, (level, title, page)) in outline.iter().enumerate() {
            let id = first_item + index;
            let next = outline[index + 1..]
                .iter()
                .position(|(l, _, _)| l <= level)
                .filter(|&at| outline[index + 1 + at].0 == *level)
                .map(|at| format!("/Next {} 0 R", id + 1 + at))
                .unwrap_or_default();
            let first = outline
                .get(index + 1)
                .filter(|(l, _, _)| *l == level + 1)
                .map(|_| format!("/First {} 0 R", id + 1))
                .unwrap_or_default();
            objects.push(format!(
                "<< /Title ({title}) {next} {first} /Dest [{} 0 R /Fit] >>",
                first_page + 2 * (page - 1)
            ));
        }
        pdf(&objects, "/Info 5 0 R")
    }

    fn read(bytes: &[u8]) -> Result<Extracted, String> {
        let limits = Limits::default();
        extract(bytes, &limits, &Deadline::after(limits.time))
    }

    fn headings(extracted: &Extracted) -> Vec<(u8, String, Location)> {
        let Structure::Units(units) = &extracted.structure else {
            panic!("units")
        };
        let Locations::Mapped(locations) = &extracted.locations else {
            panic!("mapped")
        };
        units
            .iter()
            .filter_map(|unit| match unit {
                Unit::Heading { level, text, range } => {
                    let line = extracted.text[..range.start].matches('\n').count();
                    Some((*level, text.clone(), locations[line]))
                }
                _ => None,
            })
            .collect()
    }

    fn at(page: u32, line: u32) -> Location {
        Location {
            page,
            first: line,
            last: line,
        }
    }

    /// The location of the text line that holds `needle`.
    fn location_of(extracted: &Extracted, needle: &str) -> Location {
        let Locations::Mapped(locations) = &extracted.locations else {
            panic!("mapped")
        };
        assert_eq!(
            locations.len(),
            extracted.text.lines().count(),
            "one location per line"
        );
        let line = extracted
            .text
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in {}", extracted.text));
        locations[line]
    }

    #[test]
    fn pages_lines_paragraphs_and_outline_headings() {
        let bytes = document(
            &[
                &[
                    "1 Introduction",
                    "First line of the page.",
                    "Second line here.",
                    "",
                    "A new paragraph.",
                ],
                &[
                    "Some words on page two.",
                    "2.1 Methods and",
                    "Materials",
                    "Method text.",
                ],
                &["Closing words."],
            ],
            &[
                (1, "Introduction", 1),
                (1, "Methods", 2),
                (2, "Methods and Materials", 2),
                (2, "Not on its page", 3),
            ],
            Some("Microsoft Word - draft.docx"),
        );
        let extracted = read(&bytes).expect("readable");
        assert!(extracted.warnings.is_empty(), "{:?}", extracted.warnings);
        assert_eq!(extracted.meta.title.as_deref(), Some("Introduction"));
        assert_eq!(
            headings(&extracted),
            [
                (1, "Introduction".to_string(), at(1, 1)),
                (1, "Methods".to_string(), at(2, 1)),
                (2, "Methods and Materials".to_string(), at(2, 2)),
                (2, "Not on its page".to_string(), at(3, 1)),
            ]
        );
        assert_eq!(location_of(&extracted, "Second line here."), at(1, 3));
        assert_eq!(location_of(&extracted, "A new paragraph."), at(1, 5));
        assert_eq!(location_of(&extracted, "Method text."), at(2, 4));
        assert_eq!(location_of(&extracted, "Closing words."), at(3, 1));
        assert!(
            extracted
                .text
                .contains("First line of the page.\nSecond line here.\n\nA new paragraph."),
            "{}",
            extracted.text
        );
        assert!(
            !extracted.text.contains("1 Introduction"),
            "the title line became the heading"
        );
    }

    #[test]
    fn the_information_title_is_kept_unless_a_placeholder() {
        let bytes = document(&[&["Words."]], &[], Some("A Real Title"));
        let extracted = read(&bytes).expect("readable");
        assert_eq!(extracted.meta.title.as_deref(), Some("A Real Title"));
        assert!(headings(&extracted).is_empty(), "no outline, no headings");
        for junk in [
            "",
            "untitled",
            "Microsoft Word - x.docx",
            "paper.tex",
            "  --  ",
        ] {
            assert!(is_placeholder_title(junk), "{junk:?}");
        }
        assert!(!is_placeholder_title("Open and Secure"));
        assert_eq!(strip_section_number("2.1 methods"), "methods");
        assert_eq!(strip_section_number("a. appendix"), "appendix");
        assert_eq!(strip_section_number("iv. part"), "part");
        assert_eq!(strip_section_number("the methods"), "the methods");
    }

    #[test]
    fn unreadable_encrypted_and_image_only_files() {
        let err = read(b"not a pdf at all").expect_err("garbage");
        assert!(err.starts_with("not a readable PDF: "), "{err}");
        let truncated = &document(&[&["Words."]], &[], None)[..60];
        assert!(
            read(truncated)
                .expect_err("truncated")
                .starts_with("not a readable PDF")
        );
        let page = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>";
        let objects = [
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>".to_string(),
            page.to_string(),
            page.to_string(),
            format!(
                "<< /Filter /Standard /V 1 /R 2 /O <{}> /U <{}> /P -4 >>",
                "ab".repeat(32),
                "cd".repeat(32)
            ),
        ];
        let encrypted = pdf(
            &objects,
            "/Encrypt 5 0 R /ID [<00112233445566778899aabbccddeeff> <00112233445566778899aabbccddeeff>]",
        );
        assert_eq!(
            read(&encrypted),
            Err("encrypted PDF (a password is needed to read it); skipped".to_string())
        );
        let image_only = pdf(&objects[..4], "");
        let extracted = read(&image_only).expect("readable");
        assert_eq!(
            extracted.warnings,
            ["no text on any of its 2 pages (a scanned or image-only PDF?)"]
        );
    }

    /// `bytes` encrypted (RC4, 128 bits) with these passwords.
    fn encrypted(bytes: &[u8], user_password: &str) -> Vec<u8> {
        use lopdf::encryption::{EncryptionState, EncryptionVersion, Permissions};
        let mut document = lopdf::Document::load_mem(bytes).expect("load");
        let id = lopdf::Object::String(
            b"0123456789abcdef".to_vec(),
            lopdf::StringFormat::Hexadecimal,
        );
        document
            .trailer
            .set("ID", lopdf::Object::Array(vec![id.clone(), id]));
        let version = EncryptionVersion::V2 {
            document: &document,
            owner_password: "owner",
            user_password,
            key_length: 128,
            permissions: Permissions::all(),
        };
        let state = EncryptionState::try_from(version).expect("encryption state");
        document.encrypt(&state).expect("encrypt");
        let mut out = Vec::new();
        document.save_to(&mut out).expect("save");
        out
    }

    #[test]
    fn an_empty_user_password_is_read_and_another_is_refused() {
        let plain = document(&[&["Secret words on the page."]], &[], Some("Locked"));
        let open = read(&encrypted(&plain, "")).expect("an empty user password is read");
        assert!(
            open.text.contains("Secret words on the page."),
            "{}",
            open.text
        );
        assert_eq!(open.meta.title.as_deref(), Some("Locked"));
        assert_eq!(
            read(&encrypted(&plain, "secret")),
            Err("encrypted PDF (a password is needed to read it); skipped".to_string())
        );
    }

    #[test]
    fn the_text_stops_at_its_limit() {
        let line = "Many words on a line that repeats.";
        let lines = vec![line; 40];
        let pages: Vec<&[&str]> = vec![&lines[..]; 20];
        let bytes = document(&pages, &[], None);
        let limits = Limits {
            max_text_bytes: 4000,
            ..Limits::default()
        };
        let extracted = extract(&bytes, &limits, &Deadline::after(limits.time)).expect("readable");
        assert!(extracted.text.len() <= 4000, "{}", extracted.text.len());
        assert!(extracted.text.len() > 2000, "what fits is kept");
        assert!(
            extracted
                .warnings
                .iter()
                .any(|w| w.contains("over 4000 bytes")),
            "{:?}",
            extracted.warnings
        );
        let passed = extract(&bytes, &limits, &Deadline::after(std::time::Duration::ZERO))
            .expect("readable");
        assert!(passed.text.is_empty());
        assert!(
            passed
                .warnings
                .iter()
                .any(|w| w.contains("the rest is left out")),
            "{:?}",
            passed.warnings
        );
    }

    #[test]
    fn a_billion_laughs_of_forms_stops_at_the_deadline() {
        // Nine levels of forms, each drawing the one below ten times: 10^9 lines of text.
        let form = "/Type /XObject /Subtype /Form /BBox [0 0 612 792]";
        let mut objects = vec![
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /X 14 0 R >> >> /Contents 4 0 R >>".to_string(),
            stream("/X Do"),
        ];
        let content = "BT /F1 12 Tf 72 700 Td (laughter fills the page) Tj ET";
        objects.push(format!(
            "<< {form} /Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ));
        for level in 1..10 {
            let content = "/X Do ".repeat(10);
            objects.push(format!(
                "<< {form} /Resources << /XObject << /X {} 0 R >> >> /Length {} >>\nstream\n{content}\nendstream",
                4 + level,
                content.len()
            ));
        }
        let limits = Limits {
            time: std::time::Duration::from_secs(1),
            ..Limits::default()
        };
        let started = std::time::Instant::now();
        let extracted =
            extract(&pdf(&objects, ""), &limits, &Deadline::after(limits.time)).expect("readable");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(extracted.text.contains("laughter fills the page"));
        assert!(
            extracted
                .warnings
                .iter()
                .any(|w| w == "took over 1 s; the rest is left out"),
            "{:?}",
            extracted.warnings
        );
    }

    #[test]
    fn outline_loops_and_depth_are_bounded() {
        // Two items whose /Next point at each other, and one whose /First is itself.
        let objects = [
            "<< /Type /Catalog /Pages 2 0 R /Outlines 4 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>".to_string(),
            "<< /Type /Outlines /First 5 0 R >>".to_string(),
            "<< /Title (One) /Next 6 0 R /Dest [3 0 R /Fit] >>".to_string(),
            "<< /Title (Two) /Next 5 0 R /First 6 0 R /Dest [3 0 R /Fit] >>".to_string(),
        ];
        let extracted = read(&pdf(&objects, "")).expect("readable");
        assert_eq!(headings(&extracted).len(), 2);
        // A chain of children 40 deep, under a depth limit of 8.
        let mut objects = objects[..4].to_vec();
        for depth in 0..40 {
            objects.push(format!(
                "<< /Title (Level {depth}) /First {} 0 R /Dest [3 0 R /Fit] >>",
                6 + depth
            ));
        }
        let limits = Limits {
            max_depth: 8,
            ..Limits::default()
        };
        let extracted =
            extract(&pdf(&objects, ""), &limits, &Deadline::after(limits.time)).expect("readable");
        let found = headings(&extracted);
        assert_eq!(found.len(), 8);
        assert!(found.iter().all(|(level, _, _)| *level <= 6));
        assert!(
            extracted
                .warnings
                .iter()
                .any(|w| w.contains("8 levels deep")),
            "{:?}",
            extracted.warnings
        );
    }

    #[test]
    fn named_destinations_resolve() {
        let objects = [
            "<< /Type /Catalog /Pages 2 0 R /Outlines 4 0 R /Names << /Dests 7 0 R >> >>"
                .to_string(),
            "<< /Type /Pages /Kids [3 0 R 8 0 R] /Count 2 >>".to_string(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>".to_string(),
            "<< /Type /Outlines /First 5 0 R >>".to_string(),
            "<< /Title (Named) /Next 6 0 R /Dest (sec.2) >>".to_string(),
            "<< /Title (By action) /A << /S /GoTo /D (sec.2) >> >>".to_string(),
            "<< /Kids [9 0 R] >>".to_string(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>".to_string(),
            "<< /Names [(sec.2) [8 0 R /XYZ 0 0 0]] >>".to_string(),
        ];
        let extracted = read(&pdf(&objects, "")).expect("readable");
        let found: Vec<u32> = headings(&extracted)
            .iter()
            .map(|(_, _, at)| at.page)
            .collect();
        assert_eq!(found, [2, 2]);
    }
}
