//! HTML: a page's readable text, headings and metadata, read from html5ever's tokenizer.
//!
//! The page is read as a stream of tokens (tags, text, comments), never built into a tree, so
//! an element nested 100,000 deep costs a counter, not a stack: every count (open elements,
//! dropped elements inside dropped elements, `<pre>`, tables, sectioning elements, the kept
//! region) saturates at `Limits::max_depth`, and deeper structure is read as flat, with a
//! warning. The tokenizer decodes entities and counts source lines; after `<script>`,
//! `<style>`, `<textarea>`, `<title>`, `<iframe>`, `<noscript>`, `<xmp>`, `<noembed>`,
//! `<noframes>` and `<plaintext>` it is switched to raw text as a tree builder would switch it,
//! so their contents are never read as markup. The input is fed in pieces, and the deadline is
//! checked between pieces and every few hundred tokens.
//!
//! Kept: the first `<title>` as the title (else a `title` in YAML front matter);
//! `<meta name="description">` as the field `description`; `<meta name="keywords">` as tags
//! (comma-separated, lower-cased); `h1`–`h6` as headings of their level; the text of every other
//! element outside the dropped ones, as paragraphs cut at block elements (`p`, `div`, `li`,
//! `dd`, `blockquote`, `figcaption`, …) with white space folded as a browser folds it and
//! `<br>` as a line break; `<pre>` (and `<listing>`, `<xmp>`, `<plaintext>`) with its lines
//! kept; each table row as one line, its cells joined by ` | `, a table's rows one block. A
//! YAML (`---`) front matter block at the very top (Eleventy pages) gives the title, tags and
//! fields as Markdown's does, and the HTML starts after it. Text before `<!DOCTYPE` is text;
//! template expressions such as `{{ version }}` stay as written.
//!
//! Dropped: comments; `script`, `style`, `noscript`, `template`, `svg`, `canvas`, `iframe`,
//! `object`, `audio`, `video`, `nav`, MathML's `annotation` and `annotation-xml`, form
//! controls' chrome (`button`, `select`, `datalist`, `textarea`, `input`'s values), elements
//! with the `hidden` attribute, and `header`/`footer` outside `article`, `section`, `aside` and
//! `main` (inside those they are the section's own header, and often hold its heading). When
//! the page has a `<main>` element (or `role="main"`), only what is inside it is kept (with the
//! title and the metadata); else when it has exactly one `<article>`, only that article. Finding
//! out costs a first pass of the tokenizer that reads tags only, run only when the page holds
//! the word `main` or `article` at all.
//!
//! Not understood: CSS (`display: none` text is kept), scripts that write the page (a page built
//! by JavaScript has little text here), `<base>` and links, images' `alt` text, and the tree
//! builder's repairs of broken nesting: a dropped element left open drops the rest of the page
//! up to `</body>`, and a heading left open ends at the next heading. A self-closing `<x/>` is
//! taken as empty for every element (as XHTML means it), where a browser would open a
//! `<script/>` or `<iframe/>` there. Encodings other than UTF-8 are refused before this reader.

use std::cell::{Cell, RefCell};

use html5ever::TokenizerResult;
use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

use super::{Deadline, Extracted, Limits, Location, Meta, TextBuilder, fold_space};
use crate::extract::front_matter;

pub(crate) const VERSION: u32 = 2;

/// How much input the tokenizer is given at a time; the deadline is checked between pieces.
const PIECE_BYTES: usize = 64 * 1024;
/// How many tokens pass between two looks at the deadline.
const TOKENS_PER_DEADLINE_CHECK: usize = 256;

pub(crate) fn extract(text: &str, limits: &Limits, deadline: &Deadline) -> Extracted {
    let front = front_matter::split(text);
    let html = &text[front.body_start..];
    let line_offset = text[..front.body_start].matches('\n').count();
    let mut warnings: Vec<String> = front.warning.into_iter().collect();

    // The first pass is needed only when a page could have a `<main>`, `role="main"` or an
    // `<article>`: most pages are read once.
    let (scout, scouted) = if mentions(html, b"main") || mentions(html, b"article") {
        tokenize(Scout::new(deadline), html, deadline)
    } else {
        (Scout::new(deadline), true)
    };
    let focus = if !scouted {
        Focus::Whole
    } else if scout.mains.get() > 0 {
        Focus::Main
    } else if scout.articles.get() == 1 {
        Focus::Article
    } else {
        Focus::Whole
    };
    let page = Page::new(limits, focus, line_offset, deadline);
    let (page, finished) = tokenize(page, html, deadline);
    let mut page = page.state.into_inner();
    page.flush_all();
    if !finished && !page.builder.is_full() || !scouted {
        warnings.push(format!(
            "took over {} s; the rest is left out",
            limits.time.as_secs()
        ));
    }
    if page.too_deep {
        warnings.push(format!(
            "its elements nest deeper than {} (the nesting limit); deeper ones are read as flat",
            page.max_depth
        ));
    }
    let mut meta = Meta {
        title: page.title.or(front.title),
        tags: front.tags,
        fields: front.fields,
    };
    if let Some(description) = page.description {
        meta.fields.insert("description".to_string(), description);
    }
    meta.tags.extend(page.keywords);
    meta.tags = clean_tags(meta.tags);
    page.builder.finish(meta, warnings)
}

/// Whether `html` holds `word` (ASCII, lower case) in any case.
fn mentions(html: &str, word: &[u8]) -> bool {
    html.as_bytes()
        .windows(word.len())
        .any(|window| window.eq_ignore_ascii_case(word))
}

/// Tags as front matter gives them: trimmed, lower-case, sorted, each once, none empty.
fn clean_tags(tags: Vec<String>) -> Vec<String> {
    let mut tags: Vec<String> = tags
        .into_iter()
        .map(|tag| fold_space(&tag).to_lowercase())
        .filter(|tag| !tag.is_empty())
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

/// A sink the tokenizer feeds, that can ask it to stop.
trait Reader {
    /// Whether the reader wants no more tokens (its text is full, or the deadline passed).
    fn stopped(&self) -> bool;
    /// Set while the tokenizer flushes its last input: the sink must not stop it then.
    fn set_ending(&self);
}

/// Runs the tokenizer over `html` in pieces. Returns the sink and whether all of the input was
/// read (false when the sink stopped or the deadline passed).
fn tokenize<S: TokenSink<Handle = ()> + Reader>(
    sink: S,
    html: &str,
    deadline: &Deadline,
) -> (S, bool) {
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let queue = BufferQueue::default();
    let mut rest = html;
    while !rest.is_empty() {
        if deadline.passed() || tokenizer.sink.stopped() {
            return (tokenizer.sink, false);
        }
        let mut cut = rest.len().min(PIECE_BYTES);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (piece, after) = rest.split_at(cut);
        rest = after;
        queue.push_back(StrTendril::from_slice(piece));
        if let TokenizerResult::Script(()) = tokenizer.feed(&queue) {
            return (tokenizer.sink, false);
        }
    }
    if tokenizer.sink.stopped() {
        return (tokenizer.sink, false);
    }
    tokenizer.sink.set_ending();
    tokenizer.end();
    (tokenizer.sink, true)
}

/// The raw-text state a tree builder would switch the tokenizer to after this start tag, so
/// the element's contents are not read as markup. A self-closing tag has no contents.
fn raw_kind(tag: &Tag) -> Option<TokenSinkResult<()>> {
    if tag.self_closing {
        return None;
    }
    let kind = match &*tag.name {
        "script" => RawKind::ScriptData,
        "style" | "xmp" | "iframe" | "noembed" | "noframes" | "noscript" => RawKind::Rawtext,
        "title" | "textarea" => RawKind::Rcdata,
        "plaintext" => return Some(TokenSinkResult::Plaintext),
        _ => return None,
    };
    Some(TokenSinkResult::RawData(kind))
}

/// What the tokenizer should do after a start tag.
fn after_start_tag(tag: &Tag) -> TokenSinkResult<()> {
    raw_kind(tag).unwrap_or(TokenSinkResult::Continue)
}

fn attribute<'t>(tag: &'t Tag, name: &str) -> Option<&'t str> {
    tag.attrs
        .iter()
        .find(|attr| &*attr.name.local == name)
        .map(|attr| &*attr.value)
}

fn is_main(tag: &Tag) -> bool {
    &*tag.name == "main"
        || attribute(tag, "role").is_some_and(|role| role.trim().eq_ignore_ascii_case("main"))
}

/// Elements that never have contents or an end tag.
fn is_void(name: &str) -> bool {
    matches!(
        name,
        "area"
            | "base"
            | "br"
            | "col"
            | "embed"
            | "hr"
            | "img"
            | "input"
            | "link"
            | "meta"
            | "param"
            | "source"
            | "track"
            | "wbr"
            | "keygen"
            | "frame"
            | "basefont"
            | "bgsound"
            | "image"
    )
}

/// Elements whose end tag may be left out: pages leave them open, so they are not counted as
/// nesting.
fn end_is_optional(name: &str) -> bool {
    matches!(
        name,
        "p" | "li"
            | "dt"
            | "dd"
            | "option"
            | "optgroup"
            | "tr"
            | "td"
            | "th"
            | "tbody"
            | "thead"
            | "tfoot"
            | "colgroup"
            | "caption"
            | "rt"
            | "rp"
            | "html"
            | "head"
            | "body"
    )
}

/// Elements whose contents are left out wherever they are.
fn is_dropped(name: &str) -> bool {
    matches!(
        name,
        "script"
            | "style"
            | "noscript"
            | "template"
            | "svg"
            | "canvas"
            | "iframe"
            | "object"
            | "audio"
            | "video"
            | "nav"
            | "annotation"
            | "annotation-xml"
            | "button"
            | "select"
            | "datalist"
            | "textarea"
            | "noembed"
            | "noframes"
    )
}

/// Elements inside which `header` and `footer` belong to the section, not to the page.
fn is_sectioning(name: &str) -> bool {
    matches!(name, "article" | "section" | "aside" | "main")
}

/// Elements that begin and end a block of text.
fn is_block(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "article"
            | "aside"
            | "blockquote"
            | "body"
            | "caption"
            | "center"
            | "dd"
            | "details"
            | "dialog"
            | "dir"
            | "div"
            | "dl"
            | "dt"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "footer"
            | "form"
            | "header"
            | "hgroup"
            | "hr"
            | "html"
            | "head"
            | "legend"
            | "li"
            | "main"
            | "menu"
            | "ol"
            | "p"
            | "section"
            | "summary"
            | "ul"
            | "tbody"
            | "thead"
            | "tfoot"
            | "option"
            | "frameset"
            | "search"
    )
}

fn heading_level(name: &str) -> Option<u8> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        _ => None,
    }
}

/// Adds one to a nesting count unless it is at `max`; false when it is (deeper is flat).
fn deeper(count: &mut usize, max: usize) -> bool {
    if *count >= max {
        return false;
    }
    *count += 1;
    true
}

// ---------------------------------------------------------------------------------------------
// The first pass: where the page's main content is.

/// Which part of the page is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Focus {
    Whole,
    /// Only the insides of `<main>` and `role="main"` elements.
    Main,
    /// Only the inside of the page's one `<article>`.
    Article,
}

/// Counts the elements that decide the focus; reads no text.
struct Scout<'d> {
    mains: Cell<usize>,
    articles: Cell<usize>,
    tokens: Cell<usize>,
    deadline: &'d Deadline,
    timed_out: Cell<bool>,
    ending: Cell<bool>,
}

impl<'d> Scout<'d> {
    fn new(deadline: &'d Deadline) -> Scout<'d> {
        Scout {
            mains: Cell::new(0),
            articles: Cell::new(0),
            tokens: Cell::new(0),
            deadline,
            timed_out: Cell::new(false),
            ending: Cell::new(false),
        }
    }
}

impl TokenSink for Scout<'_> {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let tokens = self.tokens.get() + 1;
        self.tokens.set(tokens);
        if tokens.is_multiple_of(TOKENS_PER_DEADLINE_CHECK) && self.deadline.passed() {
            self.timed_out.set(true);
        }
        let Token::TagToken(tag) = token else {
            return TokenSinkResult::Continue;
        };
        if self.timed_out.get() && !self.ending.get() {
            return TokenSinkResult::Script(());
        }
        if tag.kind == TagKind::StartTag {
            if is_main(&tag) {
                self.mains.set(self.mains.get() + 1);
            }
            if &*tag.name == "article" {
                self.articles.set(self.articles.get() + 1);
            }
            return after_start_tag(&tag);
        }
        TokenSinkResult::Continue
    }
}

impl Reader for Scout<'_> {
    fn stopped(&self) -> bool {
        self.timed_out.get()
    }
    fn set_ending(&self) {
        self.ending.set(true);
    }
}

// ---------------------------------------------------------------------------------------------
// The second pass: the text.

/// An element whose contents are being dropped or kept, and how many elements of its name are
/// open inside it (itself included), so its own end tag is known without a tree.
#[derive(Debug)]
struct Nest {
    name: String,
    open: usize,
}

/// One line of text being gathered, and the source lines its words came from.
#[derive(Debug, Default)]
struct Line {
    text: String,
    /// The source line the line began on.
    start: usize,
    /// The first and last source lines of its non-blank characters; 0 when it has none.
    first: usize,
    last: usize,
}

impl Line {
    fn at(start: usize) -> Line {
        Line {
            start,
            ..Line::default()
        }
    }

    fn location(&self) -> Location {
        if self.first == 0 {
            super::line(self.start)
        } else {
            super::lines(self.first, self.last)
        }
    }
}

/// Text gathered for one unit (a paragraph, a heading, a table cell), line by line.
#[derive(Debug, Default)]
struct Lines {
    done: Vec<Line>,
    current: Line,
    bytes: usize,
}

impl Lines {
    /// Appends `text`, whose last character is on source line `end_line`. With `keep_breaks`
    /// (in `<pre>`) a line break in it begins a new line; else it is white space. Text past
    /// `max_bytes` is not kept (the builder would refuse the unit anyway).
    fn push(&mut self, text: &str, end_line: usize, keep_breaks: bool, max_bytes: usize) {
        let mut line = end_line.saturating_sub(text.matches('\n').count());
        if self.bytes > max_bytes {
            return;
        }
        self.bytes += text.len();
        if self.current.start == 0 {
            self.current.start = line;
        }
        for c in text.chars() {
            if c == '\n' {
                line += 1;
                if keep_breaks {
                    self.break_line(line);
                    continue;
                }
            }
            self.current.text.push(c);
            if !c.is_whitespace() {
                if self.current.first == 0 {
                    self.current.first = line;
                }
                self.current.last = line;
            }
        }
    }

    fn push_space(&mut self) {
        self.current.text.push(' ');
    }

    /// Ends the current line; the next begins on source line `line`.
    fn break_line(&mut self, line: usize) {
        let done = std::mem::replace(&mut self.current, Line::at(line));
        self.done.push(done);
    }

    fn take(&mut self) -> Vec<Line> {
        let mut lines = std::mem::take(&mut self.done);
        lines.push(std::mem::take(&mut self.current));
        self.bytes = 0;
        lines
    }

    fn is_empty(&self) -> bool {
        self.done.is_empty() && self.current.text.is_empty()
    }

    /// The text on one line, white space folded, and the source lines it spans.
    fn folded(&mut self) -> Option<(String, Location)> {
        let lines = self.take();
        let text = fold_space(
            &lines
                .iter()
                .map(|line| line.text.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        );
        let first = lines.iter().map(|l| l.first).filter(|&l| l > 0).min()?;
        let last = lines.iter().map(|l| l.last).max().unwrap_or(first);
        (!text.is_empty()).then(|| (text, super::lines(first, last)))
    }
}

/// The reader's state; behind a `RefCell` because the tokenizer hands tokens through `&self`.
struct Page<'d> {
    state: RefCell<PageState>,
    deadline: &'d Deadline,
}

struct PageState {
    builder: TextBuilder,
    max_depth: usize,
    max_text_bytes: usize,
    focus: Focus,
    /// Lines of front matter before the HTML.
    line_offset: usize,
    /// Inside a dropped element.
    skip: Option<Nest>,
    /// Inside the kept region (when the focus is not the whole page).
    region: Option<Nest>,
    /// Open `article`, `section`, `aside` and `main` elements.
    sectioning: usize,
    /// Open elements, but those whose end tag may be left out.
    open: usize,
    /// Open `pre` elements: while there are, line breaks are kept.
    pre: usize,
    /// Set at `<pre>`: a line break right after it is not text, as in a browser.
    pre_fresh: bool,
    /// Open tables: while there are, rows are gathered in `rows`.
    tables: usize,
    rows: Vec<(String, Location)>,
    /// The cells of the open table row, the last one the open cell.
    row: Option<Vec<Lines>>,
    heading: Option<(u8, Lines)>,
    paragraph: Lines,
    in_title: bool,
    title_text: Lines,
    title: Option<String>,
    description: Option<String>,
    keywords: Vec<String>,
    too_deep: bool,
    tokens: usize,
    timed_out: bool,
    ending: bool,
}

impl<'d> Page<'d> {
    fn new(limits: &Limits, focus: Focus, line_offset: usize, deadline: &'d Deadline) -> Page<'d> {
        Page {
            state: RefCell::new(PageState {
                builder: TextBuilder::new(limits),
                max_depth: limits.max_depth,
                max_text_bytes: limits.max_text_bytes,
                focus,
                line_offset,
                skip: None,
                region: None,
                sectioning: 0,
                open: 0,
                pre: 0,
                pre_fresh: false,
                tables: 0,
                rows: Vec::new(),
                row: None,
                heading: None,
                paragraph: Lines::default(),
                in_title: false,
                title_text: Lines::default(),
                title: None,
                description: None,
                keywords: Vec::new(),
                too_deep: false,
                tokens: 0,
                timed_out: false,
                ending: false,
            }),
            deadline,
        }
    }
}

impl TokenSink for Page<'_> {
    type Handle = ();

    fn process_token(&self, token: Token, line: u64) -> TokenSinkResult<()> {
        let mut state = self.state.borrow_mut();
        state.tokens += 1;
        if state.tokens.is_multiple_of(TOKENS_PER_DEADLINE_CHECK) && self.deadline.passed() {
            state.timed_out = true;
        }
        let stopped = state.stopped();
        let line = usize::try_from(line)
            .unwrap_or(usize::MAX)
            .saturating_add(state.line_offset);
        match token {
            Token::TagToken(tag) => {
                if stopped {
                    return if state.ending {
                        TokenSinkResult::Continue
                    } else {
                        TokenSinkResult::Script(())
                    };
                }
                match tag.kind {
                    TagKind::StartTag => {
                        state.start_tag(&tag, line);
                        after_start_tag(&tag)
                    }
                    TagKind::EndTag => {
                        state.end_tag(&tag);
                        TokenSinkResult::Continue
                    }
                }
            }
            Token::CharacterTokens(text) if !stopped => {
                state.text(&text, line);
                TokenSinkResult::Continue
            }
            _ => TokenSinkResult::Continue,
        }
    }
}

impl Reader for Page<'_> {
    fn stopped(&self) -> bool {
        self.state.borrow().stopped()
    }
    fn set_ending(&self) {
        self.state.borrow_mut().ending = true;
    }
}

impl PageState {
    fn stopped(&self) -> bool {
        self.timed_out || self.builder.is_full()
    }

    /// Adds one to a nesting count, saturating at the depth limit (and noting it).
    fn deeper(&mut self, count: fn(&mut PageState) -> &mut usize) {
        let max = self.max_depth;
        if !deeper(count(self), max) {
            self.too_deep = true;
        }
    }

    /// Whether text here is part of the page's kept text.
    fn keeps_text(&self) -> bool {
        self.skip.is_none() && (self.focus == Focus::Whole || self.region.is_some())
    }

    fn in_cell(&self) -> bool {
        self.tables > 0 && self.row.as_ref().is_some_and(|cells| !cells.is_empty())
    }

    fn start_tag(&mut self, tag: &Tag, line: usize) {
        let name: &str = &tag.name;
        let has_end = !tag.self_closing && !is_void(name);
        if let Some(skip) = &mut self.skip {
            if has_end && skip.name == name {
                let max = self.max_depth;
                if !deeper(&mut skip.open, max) {
                    self.too_deep = true;
                }
            }
            return;
        }
        if has_end && !end_is_optional(name) {
            self.deeper(|s| &mut s.open);
        }
        match name {
            "title" if self.title.is_none() && has_end => {
                self.in_title = true;
                return;
            }
            "meta" => {
                self.meta(tag);
                return;
            }
            _ => {}
        }
        let chrome = matches!(name, "header" | "footer") && self.sectioning == 0;
        let hidden = attribute(tag, "hidden").is_some();
        if has_end && (is_dropped(name) || chrome || hidden) {
            self.skip = Some(Nest {
                name: name.to_string(),
                open: 1,
            });
            return;
        }
        match &mut self.region {
            None if has_end => {
                let enters = match self.focus {
                    Focus::Whole => false,
                    Focus::Main => is_main(tag),
                    Focus::Article => name == "article",
                };
                if enters {
                    self.flush_all();
                    self.region = Some(Nest {
                        name: name.to_string(),
                        open: 1,
                    });
                }
            }
            Some(region) if has_end && region.name == name => {
                let max = self.max_depth;
                if !deeper(&mut region.open, max) {
                    self.too_deep = true;
                }
            }
            _ => {}
        }
        if has_end && is_sectioning(name) {
            self.deeper(|s| &mut s.sectioning);
        }
        if !self.keeps_text() {
            return;
        }
        if let Some(level) = heading_level(name) {
            if self.in_cell() || self.heading.is_some() {
                self.block_boundary();
            } else {
                self.flush_paragraph();
                self.heading = Some((level, Lines::default()));
            }
            return;
        }
        match name {
            "pre" | "listing" | "xmp" | "plaintext" if has_end || name == "plaintext" => {
                if self.in_cell() {
                    self.block_boundary();
                    return;
                }
                if self.pre == 0 {
                    self.flush_paragraph();
                }
                self.deeper(|s| &mut s.pre);
                self.pre_fresh = true;
            }
            "table" if has_end => {
                self.flush_paragraph();
                self.deeper(|s| &mut s.tables);
            }
            "tr" if self.tables > 0 => {
                self.finish_row();
                self.row = Some(Vec::new());
            }
            "td" | "th" if self.tables > 0 => {
                self.row.get_or_insert_with(Vec::new).push(Lines::default());
            }
            "br" => {
                if self.in_cell() || self.heading.is_some() {
                    self.text_target().push_space();
                } else {
                    self.paragraph.break_line(line);
                }
            }
            _ if is_block(name) || name == "hr" => self.block_boundary(),
            _ => {}
        }
    }

    fn end_tag(&mut self, tag: &Tag) {
        let name: &str = &tag.name;
        let ends_page = matches!(name, "body" | "html");
        if let Some(skip) = &mut self.skip {
            if skip.name == name {
                skip.open -= 1;
                if skip.open == 0 {
                    self.skip = None;
                }
            } else if ends_page {
                self.skip = None;
            }
            return;
        }
        if !end_is_optional(name) && !is_void(name) {
            self.open = self.open.saturating_sub(1);
        }
        if name == "title" && self.in_title {
            self.in_title = false;
            let title = self.title_text.folded().map(|(title, _)| title);
            self.title = title;
            return;
        }
        if self.keeps_text() {
            if heading_level(name).is_some() && !self.in_cell() {
                self.flush_heading();
            } else {
                match name {
                    "pre" | "listing" | "xmp" if self.pre > 0 => {
                        if self.pre == 1 {
                            self.flush_paragraph();
                        }
                        self.pre -= 1;
                    }
                    "table" if self.tables > 0 => {
                        self.finish_row();
                        self.tables -= 1;
                        if self.tables == 0 {
                            self.flush_table();
                        }
                    }
                    "tr" if self.tables > 0 => self.finish_row(),
                    _ if is_block(name) || heading_level(name).is_some() => self.block_boundary(),
                    _ => {}
                }
            }
        }
        if is_sectioning(name) {
            self.sectioning = self.sectioning.saturating_sub(1);
        }
        if let Some(region) = &mut self.region {
            if region.name == name {
                region.open -= 1;
            }
            if region.open == 0 || ends_page {
                self.flush_all();
                self.region = None;
            }
        }
    }

    fn meta(&mut self, tag: &Tag) {
        let Some(name) = attribute(tag, "name") else {
            return;
        };
        let content = attribute(tag, "content").unwrap_or("");
        if name.eq_ignore_ascii_case("description") && self.description.is_none() {
            let description = fold_space(content);
            if !description.is_empty() {
                self.description = Some(description);
            }
        } else if name.eq_ignore_ascii_case("keywords") {
            self.keywords
                .extend(content.split(',').map(std::string::ToString::to_string));
        }
    }

    fn text(&mut self, text: &str, line: usize) {
        if self.skip.is_some() {
            return;
        }
        let max = self.max_text_bytes;
        if self.in_title {
            self.title_text.push(text, line, false, max);
            return;
        }
        if !self.keeps_text() {
            return;
        }
        let mut text = text;
        if self.pre > 0 && self.pre_fresh && !self.in_cell() && self.heading.is_none() {
            text = text.strip_prefix('\n').unwrap_or(text);
        }
        self.pre_fresh = false;
        let keep_breaks = self.pre > 0 && !self.in_cell() && self.heading.is_none();
        let target = self.text_target();
        if target.is_empty() && !keep_breaks && text.trim().is_empty() {
            return;
        }
        target.push(text, line, keep_breaks, max);
    }

    /// Where text goes now: the open heading, the open table cell, or the paragraph.
    fn text_target(&mut self) -> &mut Lines {
        if let Some((_, heading)) = &mut self.heading {
            return heading;
        }
        if self.tables > 0
            && let Some(cell) = self.row.as_mut().and_then(|cells| cells.last_mut())
        {
            return cell;
        }
        &mut self.paragraph
    }

    /// A block element begins or ends: inside a cell or a heading, a space; else the paragraph
    /// ends.
    fn block_boundary(&mut self) {
        if self.in_cell() || self.heading.is_some() {
            self.text_target().push_space();
        } else if self.pre == 0 {
            self.flush_paragraph();
        }
    }

    fn flush_heading(&mut self) {
        if let Some((level, mut text)) = self.heading.take()
            && let Some((heading, at)) = text.folded()
        {
            // Sphinx, MkDocs and many generators end a heading with a permalink mark.
            let heading = heading.trim_end_matches(['¶', '#', '§', '🔗']).trim_end();
            self.builder.heading(level, heading, at);
        }
    }

    fn flush_paragraph(&mut self) {
        if self.paragraph.is_empty() {
            return;
        }
        let lines = self.paragraph.take();
        if self.pre > 0 {
            self.builder.block_lines(
                lines
                    .iter()
                    .map(|line| (line.text.as_str(), line.location())),
            );
            return;
        }
        let folded: Vec<(String, Location)> = lines
            .iter()
            .map(|line| (fold_space(&line.text), line.location()))
            .filter(|(text, _)| !text.is_empty())
            .collect();
        match folded.as_slice() {
            [] => {}
            [(text, at)] => self.builder.paragraph(text, *at),
            _ => self
                .builder
                .block_lines(folded.iter().map(|(text, at)| (text.as_str(), *at))),
        }
    }

    /// Ends the open table row: its cells become one line of the table's rows.
    fn finish_row(&mut self) {
        let Some(cells) = self.row.take() else {
            return;
        };
        let mut first = usize::MAX;
        let mut last = 0;
        let mut texts = Vec::with_capacity(cells.len());
        for mut cell in cells {
            match cell.folded() {
                Some((text, at)) => {
                    first = first.min(at.first as usize);
                    last = last.max(at.last as usize);
                    texts.push(text);
                }
                None => texts.push(String::new()),
            }
        }
        if last > 0 {
            self.rows
                .push((texts.join(" | "), super::lines(first, last)));
        }
    }

    fn flush_table(&mut self) {
        let rows = std::mem::take(&mut self.rows);
        self.builder
            .block_lines(rows.iter().map(|(text, at)| (text.as_str(), *at)));
    }

    /// Ends every open unit: at the end of the page and of the kept region.
    fn flush_all(&mut self) {
        self.flush_heading();
        self.flush_paragraph();
        self.pre = 0;
        self.finish_row();
        self.flush_table();
        self.tables = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{lines_of, units};
    use super::super::{Deadline, Extracted, Limits};
    use super::{Focus, Page, extract, tokenize};

    fn read(html: &str) -> Extracted {
        read_with(html, &Limits::default())
    }

    fn read_with(html: &str, limits: &Limits) -> Extracted {
        extract(html, limits, &Deadline::after(limits.time))
    }

    #[test]
    fn headings_paragraphs_and_entities() {
        let page = "<!DOCTYPE html>\n<html><head><title>The  page &amp; more</title></head>\n\
            <body>\n<h1>Top <code>level</code></h1>\n<p>One &lt;tag&gt; and\n   two\
            &nbsp;words.</p>\n<h3>Deep</h3><div>A <b>bold</b><i>ly</i> run</div>\n</body></html>\n";
        let extracted = read(page);
        assert_eq!(extracted.meta.title.as_deref(), Some("The page & more"));
        assert_eq!(
            units(&extracted),
            [
                "H1 Top level",
                "One <tag> and two words.",
                "H3 Deep",
                "A boldly run"
            ]
        );
        assert_eq!(lines_of(&extracted, "Top level"), (4, 4));
        assert_eq!(lines_of(&extracted, "One <tag>"), (5, 6));
        assert_eq!(lines_of(&extracted, "boldly"), (7, 7));
        assert!(extracted.warnings.is_empty(), "{:?}", extracted.warnings);
    }

    #[test]
    fn scripts_styles_comments_and_chrome_are_dropped() {
        let page = "<html><head><style>p { color: red } <p>not text</p></style>\
            <script>if (a < b) { document.write('<h1>no</h1>') }</script></head><body>\
            <header><p>Site banner</p></header><nav><ul><li>Home</li></ul></nav>\
            <!-- a <p>comment</p> -->\
            <p>Kept <button>Click</button>text<noscript>Enable JS</noscript></p>\
            <template><p>template</p></template><svg><title>icon</title><text>svg</text></svg>\
            <svg/><p>after a self-closed svg</p><div hidden>hidden words</div>\
            <select><option>choice</option></select><textarea><p>typed</p></textarea>\
            <footer>Copyright</footer></body></html>";
        let extracted = read(page);
        assert_eq!(units(&extracted), ["Kept text", "after a self-closed svg"]);
        assert_eq!(extracted.meta.title, None);
    }

    #[test]
    fn headers_inside_sections_are_kept() {
        let page = "<body><header>Banner</header><section><header><h2>Section title</h2>\
            </header><p>Body</p><footer>Section note</footer></section></body>";
        assert_eq!(
            units(&read(page)),
            ["H2 Section title", "Body", "Section note"]
        );
    }

    #[test]
    fn main_or_a_single_article_is_all_that_is_kept() {
        let page = "<title>T</title><body><div>Menu</div><main><h1>Main</h1><p>Inside \
            <main>nested</main> main</p></main><div>Sidebar</div></body>";
        let extracted = read(page);
        assert_eq!(units(&extracted), ["H1 Main", "Inside", "nested", "main"]);
        assert_eq!(extracted.meta.title.as_deref(), Some("T"));

        let role = "<div>Menu</div><div role=\"main\"><div><p>Role text</p></div>\
            <p>More</p></div><div>Aside</div>";
        assert_eq!(units(&read(role)), ["Role text", "More"]);

        let article = "<p>Before</p><article><h2>Story</h2><p>Words</p></article><p>After</p>";
        assert_eq!(units(&read(article)), ["H2 Story", "Words"]);

        let two = "<p>Before</p><article><p>One</p></article><article><p>Two</p></article>";
        assert_eq!(units(&read(two)), ["Before", "One", "Two"]);
    }

    #[test]
    fn pre_keeps_its_lines_and_br_breaks_lines() {
        let page = "<p>first<br>second\n<br/>third</p>\n<pre>\n  let a = 1;\n\n  &lt;b&gt;\n</pre>\n\
            <p>after</p>";
        let extracted = read(page);
        assert_eq!(
            units(&extracted),
            ["first\nsecond\nthird", "  let a = 1;\n\n  <b>", "after"]
        );
        assert_eq!(lines_of(&extracted, "third"), (2, 2));
        assert_eq!(lines_of(&extracted, "let a"), (4, 4));
        assert_eq!(lines_of(&extracted, "<b>"), (6, 6));
        assert_eq!(lines_of(&extracted, "after"), (8, 8));
    }

    #[test]
    fn table_rows_are_lines_of_cells() {
        let page = "<p>Intro</p>\n<table>\n<caption>Sizes</caption>\n<tr><th>Name</th><th>Size\
            </th></tr>\n<tr><td><p>a</p><p>b</p></td><td>1</td></tr>\n<tr><td>c<td>2\n</table>\
            \n<p>Outro</p>";
        let extracted = read(page);
        assert_eq!(
            units(&extracted),
            ["Intro", "Sizes", "Name | Size\na b | 1\nc | 2", "Outro"]
        );
        assert_eq!(lines_of(&extracted, "a b | 1"), (5, 5));
        assert_eq!(lines_of(&extracted, "c | 2"), (6, 6));
    }

    #[test]
    fn front_matter_and_meta_tags() {
        let page = "---\ntitle: From front matter\ntags: [wcag, Eleventy]\nversion: 2.2\n---\n\
            <!DOCTYPE html>\n<meta name=\"description\" content=\"What  it is\">\n\
            <meta name=\"keywords\" content=\"HTML, Parsing,, html\">\n<h1>Version \
            {{ versionDecimal }}</h1>\n";
        let extracted = read(page);
        assert_eq!(extracted.meta.title.as_deref(), Some("From front matter"));
        assert_eq!(extracted.meta.tags, ["eleventy", "html", "parsing", "wcag"]);
        assert_eq!(extracted.meta.fields["description"], "What it is");
        assert_eq!(extracted.meta.fields["version"], "2.2");
        assert_eq!(units(&extracted), ["H1 Version {{ versionDecimal }}"]);
        assert_eq!(lines_of(&extracted, "Version"), (9, 9));

        let titled = "---\ntitle: Front\n---\n<title>Page</title><p>x</p>";
        assert_eq!(read(titled).meta.title.as_deref(), Some("Page"));
    }

    #[test]
    fn text_before_the_doctype_and_no_doctype_are_read() {
        let extracted = read("stray words\n<!DOCTYPE html><p>body</p>");
        assert_eq!(units(&extracted), ["stray words", "body"]);
        assert_eq!(units(&read("just text, no tags")), ["just text, no tags"]);
    }

    #[test]
    fn nesting_past_the_limit_is_flat_and_named() {
        let limits = Limits {
            max_depth: 8,
            ..Limits::default()
        };
        let page = format!(
            "{}<p>deep words</p>{}<p>after</p>",
            "<div>".repeat(50),
            "</div>".repeat(50)
        );
        let extracted = read_with(&page, &limits);
        assert_eq!(units(&extracted), ["deep words", "after"]);
        assert_eq!(extracted.warnings.len(), 1, "{:?}", extracted.warnings);
        assert!(extracted.warnings[0].contains("deeper than 8"));

        // Every count saturates at the limit.
        let nested = format!(
            "{}<pre>{}<table>{}<section>{}",
            "<nav>".repeat(20),
            "<pre>".repeat(20),
            "<table>".repeat(20),
            "<section>".repeat(20),
        );
        let deadline = Deadline::after(Duration::from_secs(60));
        let (page, _) = tokenize(
            Page::new(&limits, Focus::Whole, 0, &deadline),
            &nested,
            &deadline,
        );
        let state = page.state.borrow();
        assert_eq!(state.skip.as_ref().map(|nest| nest.open), Some(8));
        assert!(state.open <= 8);
        let (page, _) = tokenize(
            Page::new(&limits, Focus::Whole, 0, &deadline),
            &nested.replace("<nav>", ""),
            &deadline,
        );
        let state = page.state.borrow();
        assert_eq!((state.pre, state.tables, state.sectioning), (8, 8, 8));
    }

    #[test]
    fn the_text_limit_and_the_deadline_stop_reading_with_a_warning() {
        let page = "<p>some words here</p>".repeat(1000);
        let small = Limits {
            max_text_bytes: 100,
            ..Limits::default()
        };
        let extracted = read_with(&page, &small);
        assert!(extracted.text.len() <= 100);
        assert!(
            extracted.warnings[0].contains("over 100 bytes"),
            "{:?}",
            extracted.warnings
        );

        let no_time = Limits {
            time: Duration::ZERO,
            ..Limits::default()
        };
        let extracted = read_with(&page, &no_time);
        assert!(extracted.text.is_empty());
        assert!(
            extracted
                .warnings
                .iter()
                .any(|w| w.contains("the rest is left out")),
            "{:?}",
            extracted.warnings
        );
    }

    #[test]
    fn raw_text_elements_hide_markup_until_their_end() {
        let page = "<title>A <b>bold</b> title</title><textarea><h1>x</h1></textarea>\
            <p>one</p><script>var s = '</div><h1>not a heading</h1>';</script><p>two</p>";
        let extracted = read(page);
        assert_eq!(extracted.meta.title.as_deref(), Some("A <b>bold</b> title"));
        assert_eq!(units(&extracted), ["one", "two"]);
    }
}
