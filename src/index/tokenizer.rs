//! The identifier-aware tokenizer every indexed field and every query goes through.
//!
//! A word is a run of letters and digits, joined by `_`, `-` or `.` when one of those sits
//! between two of them: `MAX_EFFECTIVE_BALANCE`, `safeTransferFrom`, `eip-1559`, `v2.3.1` are one
//! word each (leading and trailing connectors, as in `--directory`, are not part of it). A word
//! is indexed whole *and* in its parts, split at the connectors, at camelCase and acronym
//! boundaries (`onERC721Received`: `on`, `ERC`, `721`, `Received`) and between letters and
//! digits (`eip1559`: `eip`, `1559`). The whole is written without the connectors that join
//! words, so `eip-1559`, `eip_1559` and `eip1559` are one term (`v2.3.1` and `1.5` keep theirs). The parts take consecutive positions and
//! the whole takes the position of its first part, so a phrase of parts still matches and the
//! next word follows the last part. So `EIP-1559`, `eip 1559`, `eip1559` and `1559` all meet a
//! document that says `eip-1559`.
//!
//! A word with one part is one token, as before. A word is split into at most `MAX_PARTS`
//! parts (the last takes the rest of the word), so a megabyte of `aAaA…` costs `MAX_PARTS`
//! tokens, not a million; the filters after it (`analyzer`) drop tokens over 40 bytes.

use std::collections::HashMap;

use tantivy::tokenizer::{
    LowerCaser, RemoveLongFilter, TextAnalyzer, Token, TokenFilter, TokenStream, Tokenizer,
};

/// The analyzer's version. Bump it whenever the tokens of any text could change: a change to
/// the tokenizer or to a filter, or an update of a crate that makes them (`frostem`, pinned
/// with `=` in `Cargo.toml` for this reason; `tantivy`'s `LowerCaser`). An index keeps the
/// tokens of every chunk it was given, and a query is analyzed by the running groundidx: were
/// the two analyzers different, a query would silently miss the words whose tokens changed.
/// The version is part of [`name`], which every index saves in its schema, so an index made
/// under another version is of another schema: the next writer rebuilds it and readers say to
/// run `rebuild`. The unit test `a_fixed_set_of_words_keeps_its_tokens` fails when the tokens
/// change, to say so.
pub(crate) const VERSION: u32 = 1;

/// The name the analyzer is registered under in every index, with its `VERSION`.
pub fn name() -> String {
    format!("{NAME_STEM}.v{VERSION}")
}

/// The name before the version; an index made before the version was recorded has only this.
const NAME_STEM: &str = "groundidx_words";

/// The most parts one word is split into.
pub(crate) const MAX_PARTS: usize = 16;

/// Tokens longer than this many bytes are dropped (Tantivy's default analyzer does the same):
/// no one searches for them, and a long one would bloat the term dictionary.
const MAX_TOKEN_BYTES: usize = 40;

/// The analyzer: identifier-aware words, long tokens dropped, lower case, English stemmer.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(IdentifierTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(CachedStemmer)
        .build()
}

/// The analyzer that finds a query's terms in a passage to mark them (`index::Highlighter`):
/// the tokens of [`analyzer`], except that a word whose first letter begins none of `terms` is
/// passed on unstemmed. The English stemmer rewrites a word's ending only, never its first
/// letter (`the_stemmer_keeps_every_word_s_first_letter`), so such a word can neither stem into
/// a term nor equal one: the marks are those the whole analyzer would give, for a fraction of
/// the stemming (a passage's words are most of a search's snippet time).
pub(crate) fn highlighter<'a>(terms: impl IntoIterator<Item = &'a str>) -> TextAnalyzer {
    let mut first_letters: Vec<char> = terms.into_iter().filter_map(|t| t.chars().next()).collect();
    first_letters.sort_unstable();
    first_letters.dedup();
    TextAnalyzer::builder(IdentifierTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(StemWhereMatching { first_letters })
        .build()
}

/// The English (Snowball) stemmer, as Tantivy's `Stemmer` applies it, with the stems it made
/// kept: words follow Zipf's law, so nearly every token of a long text is a word it has
/// stemmed before, and stemming was a fifth of the CPU of an ingest. Each thread keeps its own
/// stems (up to `STEM_CACHE_WORDS`), shared by every copy of the analyzer it runs: Tantivy
/// takes a copy per field and segment, and a search one per query and snippet.
#[derive(Clone, Copy)]
struct CachedStemmer;

/// Words a thread's stem cache holds before it starts again empty (about 2 MB).
const STEM_CACHE_WORDS: usize = 20_000;

/// Hashed by foldhash rather than SipHash: the lookup is on every token of every document, and
/// SipHash was most of its cost. A hostile document can at worst fill the cache with colliding
/// words, and the cache starts again empty at `STEM_CACHE_WORDS`.
type StemCache = HashMap<String, String, foldhash::fast::RandomState>;

thread_local! {
    static STEMS: std::cell::RefCell<StemCache> = std::cell::RefCell::new(StemCache::default());
}

impl TokenFilter for CachedStemmer {
    type Tokenizer<T: Tokenizer> = CachedStemmerFilter<T>;

    fn transform<T: Tokenizer>(self, inner: T) -> CachedStemmerFilter<T> {
        CachedStemmerFilter { inner }
    }
}

#[derive(Clone)]
struct CachedStemmerFilter<T> {
    inner: T,
}

impl<T: Tokenizer> Tokenizer for CachedStemmerFilter<T> {
    type TokenStream<'a> = CachedStemmerStream<T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        CachedStemmerStream {
            tail: self.inner.token_stream(text),
            stemmer: frostem::Stemmer::new(frostem::Algorithm::English),
        }
    }
}

struct CachedStemmerStream<T> {
    tail: T,
    stemmer: frostem::Stemmer,
}

impl<T: TokenStream> TokenStream for CachedStemmerStream<T> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        stem_cached(&self.stemmer, &mut self.tail.token_mut().text);
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

/// Replaces `word` by its stem, from this thread's stem cache when it holds it.
fn stem_cached(stemmer: &frostem::Stemmer, word: &mut String) {
    STEMS.with_borrow_mut(|stems| {
        if let Some(stem) = stems.get(word) {
            word.clone_from(stem);
            return;
        }
        let stem = stemmer.stem(word).into_owned();
        if stems.len() >= STEM_CACHE_WORDS {
            stems.clear();
        }
        stems.insert(std::mem::replace(word, stem.clone()), stem);
    });
}

/// The stemmer of [`highlighter`]: stems only the words whose first letter is one of
/// `first_letters` (sorted).
#[derive(Clone)]
struct StemWhereMatching {
    first_letters: Vec<char>,
}

impl TokenFilter for StemWhereMatching {
    type Tokenizer<T: Tokenizer> = StemWhereMatchingFilter<T>;

    fn transform<T: Tokenizer>(self, inner: T) -> StemWhereMatchingFilter<T> {
        StemWhereMatchingFilter {
            inner,
            first_letters: self.first_letters,
        }
    }
}

#[derive(Clone)]
struct StemWhereMatchingFilter<T> {
    inner: T,
    first_letters: Vec<char>,
}

impl<T: Tokenizer> Tokenizer for StemWhereMatchingFilter<T> {
    type TokenStream<'a> = StemWhereMatchingStream<'a, T::TokenStream<'a>>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        StemWhereMatchingStream {
            tail: self.inner.token_stream(text),
            stemmer: frostem::Stemmer::new(frostem::Algorithm::English),
            first_letters: &self.first_letters,
        }
    }
}

struct StemWhereMatchingStream<'a, T> {
    tail: T,
    stemmer: frostem::Stemmer,
    first_letters: &'a [char],
}

impl<T: TokenStream> TokenStream for StemWhereMatchingStream<'_, T> {
    fn advance(&mut self) -> bool {
        if !self.tail.advance() {
            return false;
        }
        let word = &mut self.tail.token_mut().text;
        if word
            .chars()
            .next()
            .is_some_and(|first| self.first_letters.binary_search(&first).is_ok())
        {
            stem_cached(&self.stemmer, word);
        }
        true
    }

    fn token(&self) -> &Token {
        self.tail.token()
    }

    fn token_mut(&mut self) -> &mut Token {
        self.tail.token_mut()
    }
}

/// The parts of `text` in order, one per position (a word of several parts gives its parts, not
/// its whole), as the analyzer makes them.
pub(crate) fn parts_in_order(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut parts: Vec<(usize, String)> = Vec::new();
    let mut stream = analyzer.token_stream(text);
    while stream.advance() {
        let token = stream.token();
        match parts.last_mut() {
            // The whole comes first at its position, then its first part: keep the part.
            Some((position, last)) if *position == token.position => last.clone_from(&token.text),
            _ => parts.push((token.position, token.text.clone())),
        }
    }
    parts.into_iter().map(|(_, part)| part).collect()
}

/// The key of a label matched whole: its parts joined by a space, when it has one to
/// [`MAX_PARTS`] of them. `EIP-1559`, `eip 1559` and `eip1559` have the same key, and so do
/// `Cluster health` and `cluster-health`; a query whose own key equals it names the label
/// exactly.
pub(crate) fn whole_label(analyzer: &mut TextAnalyzer, label: &str) -> Option<String> {
    let parts = parts_in_order(analyzer, label);
    (!parts.is_empty() && parts.len() <= MAX_PARTS).then(|| parts.join(" "))
}

/// The terms a label (a file name stem, a title, an identifier) is indexed under, each a key of
/// a run of its parts that a run of a query's parts must equal: the whole label (of at most
/// [`MAX_LABEL_PARTS`] parts); its runs of two to `MAX_LABEL_PARTS` parts that neither begin nor
/// end with a stop word (`v2.3.1` in `geth-v2.3.1`); and its single parts that hold a digit (`1559` in
/// `eip-1559`). Never a single plain word of a longer label: a question that says `why` does
/// not name `why-kubernetes-and-eks`.
pub(crate) fn label_terms(analyzer: &mut TextAnalyzer, label: &str) -> Vec<String> {
    let parts = parts_in_order(analyzer, label);
    let mut terms: Vec<String> = Vec::new();
    let mut add = |term: String| {
        if !terms.contains(&term) {
            terms.push(term);
        }
    };
    if parts.is_empty() {
        return terms;
    }
    if parts.len() <= MAX_LABEL_PARTS {
        add(parts.join(" "));
    }
    let stop = stop_words();
    for start in 0..parts.len() {
        if parts[start].bytes().any(|b| b.is_ascii_digit()) {
            add(parts[start].clone());
        }
        for end in start + 2..=(start + MAX_LABEL_PARTS).min(parts.len()) {
            let run = &parts[start..end];
            // A run that begins or ends with a stop word ("adding a" of "adding-a-viz") is one
            // that a question says by chance.
            if stop.contains(&run[0]) || stop.contains(&run[run.len() - 1]) {
                continue;
            }
            add(run.join(" "));
        }
    }
    terms
}

/// English stop words (Lucene's list, as the analyzer makes them in `stop_words`).
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with", "how", "what", "which", "why", "when", "where",
    "who", "do", "does", "i", "my", "me", "can", "from",
];

/// [`STOP_WORDS`] as the analyzer makes them, computed once per process (every label of every
/// chunk written and every query asks).
pub(crate) fn stop_words() -> &'static [String] {
    static STOPPED: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        let mut analyzer = analyzer();
        STOP_WORDS
            .iter()
            .flat_map(|word| parts_in_order(&mut analyzer, word))
            .collect()
    });
    &STOPPED
}

/// The most parts a label can have and still be matched by a query.
pub(crate) const MAX_LABEL_PARTS: usize = 8;

/// Splits text into words, and each word of several parts into its whole and its parts.
#[derive(Clone, Default)]
pub(crate) struct IdentifierTokenizer {
    token: Token,
}

impl Tokenizer for IdentifierTokenizer {
    type TokenStream<'a> = IdentifierTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> IdentifierTokenStream<'a> {
        self.token.reset();
        IdentifierTokenStream {
            text,
            cursor: 0,
            next_position: 0,
            parts: Vec::new(),
            pending: Vec::new(),
            token: &mut self.token,
        }
    }
}

/// The tokens of one text, a word at a time.
pub(crate) struct IdentifierTokenStream<'a> {
    text: &'a str,
    /// Byte offset where the next word is looked for.
    cursor: usize,
    /// The position the next word's first token takes.
    next_position: usize,
    /// The current word's parts (kept to reuse its allocation).
    parts: Vec<(usize, usize)>,
    /// The rest of the current word's parts (byte range and position), in reverse order
    /// (popped from the back).
    pending: Vec<(usize, usize, usize)>,
    token: &'a mut Token,
}

impl TokenStream for IdentifierTokenStream<'_> {
    fn advance(&mut self) -> bool {
        if let Some((from, to, position)) = self.pending.pop() {
            fill(self.token, self.text, from, to, position, 1);
            return true;
        }
        let Some((start, end)) = next_word(self.text, self.cursor) else {
            self.cursor = self.text.len();
            return false;
        };
        self.cursor = end;
        parts_into(self.text, start, end, &mut self.parts);
        let position = self.next_position;
        self.next_position += self.parts.len();
        if self.parts.len() > 1 {
            // Popped from the back: the parts last, in reverse, so they come out in order.
            for (i, &(from, to)) in self.parts.iter().enumerate().rev() {
                self.pending.push((from, to, position + i));
            }
        }
        // The token's text is written over, not allocated anew: most words are one token.
        fill(
            self.token,
            self.text,
            start,
            end,
            position,
            self.parts.len(),
        );
        true
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

/// Makes `token` the token of `text[from..to]`, written without the connectors that join
/// words (only a whole, or the rest of a word cut at the cap, has any); one between two digits
/// stays, so `1.5` and `15`, or `10-20` and `1020`, remain different numbers.
fn fill(
    token: &mut Token,
    text: &str,
    from: usize,
    to: usize,
    position: usize,
    position_length: usize,
) {
    token.offset_from = from;
    token.offset_to = to;
    token.position = position;
    token.position_length = position_length;
    let span = &text[from..to];
    token.text.clear();
    if span.contains(is_connector) {
        token.text.push_str(&joined(span));
    } else {
        token.text.push_str(span);
    }
}

/// `span` without the connectors that do not sit between two digits. Linear in its length,
/// however long its runs of connectors.
fn joined(span: &str) -> String {
    if !span.contains(is_connector) {
        return span.to_string();
    }
    let chars: Vec<char> = span.chars().collect();
    // Whether the nearest letter or digit after each character is a digit.
    let mut digit_after = vec![false; chars.len()];
    let mut next_is_digit = false;
    for (i, &c) in chars.iter().enumerate().rev() {
        digit_after[i] = next_is_digit;
        if !is_connector(c) {
            next_is_digit = c.is_numeric();
        }
    }
    let mut out = String::with_capacity(span.len());
    let mut last_is_digit = false;
    for (i, &c) in chars.iter().enumerate() {
        if is_connector(c) {
            if last_is_digit && digit_after[i] {
                out.push(c);
            }
            continue;
        }
        last_is_digit = c.is_numeric();
        out.push(c);
    }
    out
}

fn is_connector(c: char) -> bool {
    matches!(c, '_' | '-' | '.')
}

/// The byte range of the first word at or after `from`.
fn next_word(text: &str, from: usize) -> Option<(usize, usize)> {
    let rest = &text[from..];
    let start = from + rest.find(char::is_alphanumeric)?;
    let mut end = start;
    let mut chars = text[start..].char_indices().peekable();
    while let Some((offset, c)) = chars.next() {
        if c.is_alphanumeric() {
            end = start + offset + c.len_utf8();
            continue;
        }
        if !is_connector(c) {
            break;
        }
        // A run of connectors joins the word only when a letter or digit follows it.
        let mut joined = false;
        while let Some(&(_, next)) = chars.peek() {
            if is_connector(next) {
                chars.next();
                continue;
            }
            joined = next.is_alphanumeric();
            break;
        }
        if !joined {
            break;
        }
    }
    Some((start, end))
}

/// What kind of character a part boundary looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Upper,
    Lower,
    /// A letter without case (most scripts other than Latin, Greek, Cyrillic).
    Caseless,
    Digit,
    Connector,
}

fn class(c: char) -> Class {
    if is_connector(c) {
        Class::Connector
    } else if c.is_numeric() {
        Class::Digit
    } else if c.is_uppercase() {
        Class::Upper
    } else if c.is_lowercase() {
        Class::Lower
    } else {
        Class::Caseless
    }
}

/// The byte ranges of the parts of the word `text[start..end]`: at most `MAX_PARTS`, the last
/// one running to the end of the word when the cap is reached.
#[cfg(test)]
fn parts(text: &str, start: usize, end: usize) -> Vec<(usize, usize)> {
    let mut parts = Vec::new();
    parts_into(text, start, end, &mut parts);
    parts
}

/// [`parts`], written into `out`.
fn parts_into(text: &str, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    out.clear();
    let word = &text[start..end];
    // Most words are plain ones (`word`, `Word`): one part, found without looking further.
    let mut bytes = word.bytes();
    if bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_lowercase())
    {
        out.push((start, end));
        return;
    }
    // Parts are written as they are found, each as a byte range of `text`; no character
    // is looked at twice and nothing is allocated.
    let mut part_start: Option<usize> = None;
    // Where the rest of the word begins once all but one of the parts are cut.
    let mut rest_from: Option<usize> = None;
    // The class of the character before the current one.
    let mut previous: Option<Class> = None;
    let mut chars = word.char_indices().peekable();
    while let Some((offset, c)) = chars.next() {
        let here = class(c);
        let before = previous.replace(here);
        if here == Class::Connector {
            if let Some(from) = part_start.take() {
                out.push((start + from, start + offset));
                if out.len() == MAX_PARTS - 1 {
                    // A word never ends with a connector, so another part follows.
                    rest_from = word[offset..]
                        .find(|c: char| !is_connector(c))
                        .map(|at| offset + at);
                    break;
                }
            }
            continue;
        }
        let (Some(from), Some(before)) = (part_start, before) else {
            part_start = Some(offset);
            continue;
        };
        let after = chars.peek().map(|&(_, c)| class(c));
        let boundary = match (before, here) {
            (Class::Lower | Class::Caseless, Class::Upper) => true,
            // The last capital of an acronym begins the next word: `HTTPServer`.
            (Class::Upper, Class::Upper) => after == Some(Class::Lower),
            (Class::Digit, Class::Upper | Class::Lower | Class::Caseless) => true,
            (Class::Upper | Class::Lower | Class::Caseless, Class::Digit) => true,
            _ => false,
        };
        if boundary {
            out.push((start + from, start + offset));
            part_start = Some(offset);
            if out.len() == MAX_PARTS - 1 {
                rest_from = Some(offset);
                break;
            }
        }
    }
    if let Some(from) = rest_from.or(part_start) {
        out.push((start + from, end));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tantivy::tokenizer::{TokenStream, Tokenizer};

    use super::{IdentifierTokenizer, MAX_PARTS, STEM_CACHE_WORDS, analyzer};

    /// Every token of `text` (text and position) through `analyzer`.
    fn tokens(analyzer: &mut tantivy::tokenizer::TextAnalyzer, text: &str) -> Vec<(String, usize)> {
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push((stream.token().text.clone(), stream.token().position));
        }
        out
    }

    #[test]
    fn the_stem_cache_gives_what_the_stemmer_gives_and_stays_bounded() {
        use tantivy::tokenizer::{Language, LowerCaser, RemoveLongFilter, Stemmer, TextAnalyzer};
        let mut plain = TextAnalyzer::builder(IdentifierTokenizer::default())
            .filter(RemoveLongFilter::limit(super::MAX_TOKEN_BYTES))
            .filter(LowerCaser)
            .filter(Stemmer::new(Language::English))
            .build();
        let mut cached = analyzer();
        let text = "Running runners ran; the RUNNING of generalizations generalized \
                    onERC721Received eip-1559 caresses ponies ties caress cats";
        // The same text twice: the second pass answers from the cache.
        for _ in 0..2 {
            assert_eq!(tokens(&mut cached, text), tokens(&mut plain, text));
        }
        // More distinct words than the cache holds: it starts again, and still agrees.
        let many: String = (0..STEM_CACHE_WORDS + 10)
            .map(|i| format!("w{i}ing "))
            .collect();
        assert_eq!(tokens(&mut cached, &many), tokens(&mut plain, &many));
        assert_eq!(tokens(&mut cached, text), tokens(&mut plain, text));
    }

    /// `text` through the raw tokenizer, as `position:token` pairs.
    fn raw(text: &str) -> String {
        let mut tokenizer = IdentifierTokenizer::default();
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            let token = stream.token();
            assert_eq!(
                super::joined(&text[token.offset_from..token.offset_to]),
                token.text
            );
            out.push(format!("{}:{}", token.position, token.text));
        }
        out.join(" ")
    }

    /// `text` through the whole analyzer (lower case, stemmer).
    fn analyzed(text: &str) -> String {
        let mut analyzer = analyzer();
        let mut stream = analyzer.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out.join(" ")
    }

    #[test]
    fn identifiers_are_indexed_whole_and_in_parts() {
        let check = |text: &str, expect: &str| assert_eq!(raw(text), expect, "{text:?}");
        check("tar archive", "0:tar 1:archive");
        check(
            "MAX_EFFECTIVE_BALANCE",
            "0:MAXEFFECTIVEBALANCE 0:MAX 1:EFFECTIVE 2:BALANCE",
        );
        check(
            "onERC721Received(x)",
            "0:onERC721Received 0:on 1:ERC 2:721 3:Received 4:x",
        );
        check(
            "safeTransferFrom",
            "0:safeTransferFrom 0:safe 1:Transfer 2:From",
        );
        check("--directory DIR", "0:directory 1:DIR");
        check("v2.3.1.", "0:v2.3.1 0:v 1:2 2:3 3:1");
        check(
            "eip-1559 and eip1559",
            "0:eip1559 0:eip 1:1559 2:and 3:eip1559 3:eip 4:1559",
        );
        check("HTTPServer", "0:HTTPServer 0:HTTP 1:Server");
        check("p 1.5 15 10-20", "0:p 1:1.5 1:1 2:5 3:15 4:10-20 4:10 5:20");
        check("__init__ a--b", "0:init 1:ab 1:a 2:b");
        check("end. Next", "0:end 1:Next");
        check("日本語", "0:日本語");
    }

    #[test]
    fn the_analyzer_lowers_and_stems_every_token() {
        assert_eq!(
            analyzed("Extracting safeTransferFrom"),
            "extract safetransferfrom safe transfer from"
        );
        assert_eq!(analyzed("EIP-1559"), "eip1559 eip 1559");
    }

    #[test]
    fn a_huge_word_costs_at_most_the_cap() {
        let dashes = format!("a{}b", "-".repeat(1 << 20));
        assert_eq!(raw(&dashes), "0:ab 0:a 1:b");
        let letters = "a".repeat(1 << 20);
        assert_eq!(raw(&letters).split(' ').count(), 1);
        let camel = "aA".repeat(1 << 19);
        let mut tokenizer = IdentifierTokenizer::default();
        let mut stream = tokenizer.token_stream(&camel);
        let mut n = 0;
        while stream.advance() {
            n += 1;
        }
        assert_eq!(n, 1 + MAX_PARTS);
        // The whole and the last part (the rest of the word) are over the length limit.
        assert_eq!(analyzed(&camel).split(' ').count(), MAX_PARTS - 1);
    }

    /// Words whose tokens every index written under [`super::VERSION`] holds: the rules of the
    /// English stemmer (plurals, `-ed`/`-ing`, `-ational`, `-ization`, `-ly`, the exceptions),
    /// identifiers, case folding beyond ASCII and a token over the length limit. When this
    /// fails, the tokens changed (a stemmer update, a tokenizer change): bump `VERSION` so that
    /// every index is rebuilt, then write the new tokens here.
    #[test]
    fn a_fixed_set_of_words_keeps_its_tokens() {
        let words = "caresses ponies ties cats skies news dying lying agreed feed plastered \
                     motoring sing hopping tanned falling fizzed failing filing happily gently \
                     sensational relational conditional generalizations organization \
                     hopefully formative electrical adjustable effective controlling \
                     communism arsenal universal generous consigned consignment knightly \
                     onERC721Received MAX_EFFECTIVE_BALANCE eip-1559 v2.3.1 HTTPServer \
                     Straße ÉCOLES ΣΟΦΙΑ Москвы İstanbul 日本語 \
                     abcdefghijklmnopqrstuvwxyzabcdefghijklmnop";
        let expect = "caress poni tie cat sky news die lie agre feed plaster motor sing hop tan fall \
                      fizz fail file happili gentl sensat relat condit general organiz hope \
                      format electr adjust effect control communism arsenal universal generous \
                      consign consign knight onerc721receiv on erc 721 receiv maxeffectivebal \
                      max effect balanc eip1559 eip 1559 v2.3.1 v 2 3 1 httpserver http server \
                      straße école σοφια москвы i\u{307}stanbul 日本語";
        assert_eq!(
            analyzed(words),
            expect,
            "the analyzer's tokens changed: bump tokenizer::VERSION (now {}) so that every \
             index made under it is rebuilt, then update this test",
            super::VERSION
        );
    }

    proptest! {
        #[test]
        fn parts_never_exceed_the_cap_and_positions_never_go_back(
            text in "([a-zA-Z0-9]{0,6}[-_. /A-Z]{0,2}){0,40}|([a-z]{1,3}[A-Z0-9_.-]){10,60}"
        ) {
            let mut tokenizer = IdentifierTokenizer::default();
            let mut stream = tokenizer.token_stream(&text);
            let mut last_position = 0;
            let mut at_position = 0;
            while stream.advance() {
                let token = stream.token();
                prop_assert!(token.position >= last_position, "{text:?}");
                prop_assert!(token.position_length <= MAX_PARTS, "{text:?}");
                prop_assert!(token.offset_from < token.offset_to);
                prop_assert_eq!(
                    super::joined(&text[token.offset_from..token.offset_to]),
                    token.text.clone()
                );
                // At most a whole and its first part share a position.
                at_position = if token.position == last_position { at_position + 1 } else { 1 };
                prop_assert!(at_position <= 2, "{text:?}");
                last_position = token.position;
            }
            let mut cursor = 0;
            while let Some((start, end)) = super::next_word(&text, cursor) {
                let parts = super::parts(&text, start, end);
                prop_assert!(!parts.is_empty() && parts.len() <= MAX_PARTS, "{text:?}");
                let mut after = start;
                for (from, to) in parts {
                    prop_assert!(after <= from && from < to && to <= end, "{text:?}");
                    after = to;
                }
                cursor = end;
            }
        }
    }

    /// `highlighter` leaves unstemmed the words whose first letter begins no query term, which
    /// is sound only while the stemmer never changes a word's first letter. Every lower-case
    /// word of up to four letters, every word of five over the letters of the endings it
    /// rewrites most (`-s`, `-ed`, `-ing`, `-ly`, `-ies`, `-ied`, with `y`), its whole-word
    /// exceptions and their like, and (below) random words: a new stemmer that broke the rule
    /// fails here.
    #[test]
    fn the_stemmer_keeps_every_word_s_first_letter() {
        let stemmer = frostem::Stemmer::new(frostem::Algorithm::English);
        let check = |word: &str| {
            let stem = stemmer.stem(word);
            assert_eq!(
                stem.chars().next(),
                word.chars().next(),
                "{word:?} stems to {stem:?}"
            );
        };
        let every_word = |letters: &str, longest: usize| {
            let letters: Vec<char> = letters.chars().collect();
            let mut words = vec![String::new()];
            for _ in 0..longest {
                let mut longer = Vec::with_capacity(words.len() * letters.len());
                for word in &words {
                    for &letter in &letters {
                        let mut next = word.clone();
                        next.push(letter);
                        check(&next);
                        longer.push(next);
                    }
                }
                words = longer;
            }
        };
        every_word("abcdefghijklmnopqrstuvwxyz", 4);
        every_word("aeiyosdglnt", 5);
        for word in [
            "skis",
            "skies",
            "sky",
            "idly",
            "gently",
            "ugly",
            "early",
            "only",
            "singly",
            "news",
            "howe",
            "atlas",
            "cosmos",
            "bias",
            "andes",
            "dying",
            "lying",
            "tying",
            "yelling",
            "ying",
            "ies",
            "ied",
            "eed",
            "ing",
            "generalization",
            "communism",
            "arsenal",
        ] {
            check(word);
        }
    }

    proptest! {
        #[test]
        fn the_stemmer_keeps_the_first_letter_of_any_word(word in "[a-z]{1,16}|[a-zé日ß0-9]{1,8}") {
            let stemmer = frostem::Stemmer::new(frostem::Algorithm::English);
            let stem = stemmer.stem(&word);
            prop_assert_eq!(stem.chars().next(), word.chars().next(), "{:?}", word);
        }

        /// The highlighter's analyzer marks what the whole analyzer marks: the same fragment
        /// and the same words, for query terms and passages made of English words and their
        /// inflections.
        #[test]
        fn the_highlighter_marks_what_the_whole_analyzer_marks(
            words in proptest::collection::vec((0usize..24, 0usize..8, any::<bool>()), 1..120),
            picked in proptest::collection::vec(0usize..24, 1..5),
        ) {
            use std::collections::BTreeMap;
            use tantivy::snippet::SnippetGenerator;
            const STEMS: [&str; 24] = [
                "run", "generaliz", "tie", "cry", "happ", "rotat", "sign", "key", "stor",
                "index", "dy", "ly", "sky", "connect", "relat", "hop", "agre", "fli", "ugl",
                "nation", "cat", "pony", "caress", "eip-1559",
            ];
            const ENDINGS: [&str; 8] = ["", "s", "es", "ed", "ing", "ly", "ies", "ational"];
            let text: Vec<String> = words
                .iter()
                .map(|&(stem, ending, capital)| {
                    let word = format!("{}{}", STEMS[stem], ENDINGS[ending]);
                    if capital { word.to_uppercase() } else { word }
                })
                .collect();
            let text = text.join(" ");
            // The query's terms are what the whole analyzer makes of its words.
            let mut whole = analyzer();
            let mut weights: BTreeMap<String, f32> = BTreeMap::new();
            for &stem in &picked {
                for (term, _) in tokens(&mut whole, STEMS[stem]) {
                    weights.insert(term, 0.5);
                }
            }
            let field = tantivy::schema::Field::from_field_id(0);
            let expected = SnippetGenerator::new(weights.clone(), analyzer(), field, 240)
                .snippet(&text);
            let marks = super::highlighter(weights.keys().map(String::as_str));
            let got = SnippetGenerator::new(weights, marks, field, 240).snippet(&text);
            prop_assert_eq!(got.fragment(), expected.fragment());
            prop_assert_eq!(got.highlighted(), expected.highlighted());
        }
    }
}
